// The contract as one value: made from a job and a slot's facts, written, read back.
#include "cadre/launch/contract.h"

#include <gtest/gtest.h>

namespace cadre::launch {
namespace {

JobContract Job(int learners, int slots, const std::string& mode = "horovod") {
  JobContract job;
  job.training_id = "training-x";
  job.framework = mode == "parameter-server" ? "pytorch" : "pytorch-horovod";
  job.mode = mode;
  job.learners = learners;
  job.slots_per_learner = slots;
  job.gpus_per_learner = 2;
  job.store_address = "10.0.0.9:4000";
  job.job_token = "secret";
  job.job_dir = "/runs/training-x";
  job.data_dir = "/data";
  job.model_dir = "/code";
  std::vector<std::string> addresses;
  for (int i = 1; i <= learners; ++i) addresses.push_back("10.0.1." + std::to_string(i));
  job.hosts = NamedHosts("learner", addresses);
  job.cores = 8;
  return job;
}

SlotFacts F(int learner, int local = 0, int node_gpus = 0, int on_node = 1,
            std::vector<std::string> ids = {}, int cores = 0) {
  SlotFacts f;
  f.learner_id = learner;
  f.local_rank = local;
  f.node_gpus = node_gpus;
  f.learner_on_node = on_node;
  f.node_gpu_ids = std::move(ids);
  f.node_cores = cores;
  return f;
}

LearnerContract Make(const JobContract& job, SlotFacts slot) {
  LearnerContract c;
  Status st = MakeLearnerContract(job, slot, &c);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return c;
}

TEST(Contract, WrittenAndReadBackAsTheSameValue) {
  JobContract job = Job(3, 2);
  SlotFacts slot = F(2, 1, 2, 1);
  LearnerContract c = Make(job, slot);
  auto env = ContractToEnv(c);
  EXPECT_EQ(env["CADRE_RANK"], "3");
  EXPECT_EQ(env["CADRE_HOST"], "learner-2");
  EXPECT_EQ(env["CADRE_LEARNER_ADDRESS"], "10.0.1.2");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "0,1");  // the node's own two GPUs

  LearnerContract back;
  ASSERT_TRUE(ReadContract(env, &back).ok());
  EXPECT_EQ(back.learner_id, 2);
  EXPECT_EQ(back.local_rank, 1);
  EXPECT_EQ(back.rank(), 3);
  EXPECT_EQ(back.size(), 6);
  EXPECT_EQ(back.gpu_count, 2);
  EXPECT_EQ(back.visible_gpus, c.visible_gpus);
  EXPECT_EQ(back.omp_threads, c.omp_threads);
  EXPECT_EQ(back.job.store_address, job.store_address);
  EXPECT_EQ(back.job.job_token, job.job_token);
  EXPECT_EQ(back.job.job_dir, job.job_dir);
  EXPECT_EQ(back.job.mode, job.mode);
  EXPECT_EQ(back.me().name, "learner-2");
  EXPECT_EQ(back.me().address, "10.0.1.2");
  // Written again, the value read back gives the same environment.
  EXPECT_EQ(ContractToEnv(back), env);
}

TEST(Contract, TheReaderNamesWhatIsMissingOrInconsistent) {
  auto env = ContractToEnv(Make(Job(2, 2), F(1)));
  LearnerContract c;
  auto missing = env;
  missing.erase("LEARNER_ID");
  Status st = ReadContract(missing, &c);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("LEARNER_ID is not set"), std::string::npos) << st.message();

  auto bad = env;
  bad["CADRE_LOCAL_SIZE"] = "two";
  st = ReadContract(bad, &c);
  EXPECT_NE(st.message().find("CADRE_LOCAL_SIZE='two' is not an integer"), std::string::npos);

  auto inconsistent = env;
  inconsistent["CADRE_RANK"] = "3";
  st = ReadContract(inconsistent, &c);
  EXPECT_NE(st.message().find("disagree"), std::string::npos) << st.message();
}

TEST(Contract, SlotsOutsideTheJobAreRefusedByName) {
  LearnerContract c;
  Status st = MakeLearnerContract(Job(2, 2), F(3), &c);
  EXPECT_NE(st.message().find("learner id 3 is outside 1..2"), std::string::npos);
  st = MakeLearnerContract(Job(2, 2), F(1, 2), &c);
  EXPECT_NE(st.message().find("local rank 2 of learner-1"), std::string::npos);
  JobContract unplaced = Job(2, 2);
  unplaced.hosts.clear();
  st = MakeLearnerContract(unplaced, F(1), &c);
  EXPECT_NE(st.message().find("0 learner hosts"), std::string::npos);
}

TEST(Contract, GpuPlanOnSharedAndOwnNodes) {
  JobContract job = Job(2, 2);
  // Both learners on one 4-GPU machine (the local backend): learner 2 owns GPUs 2 and 3.
  auto shared = Make(job, F(2, 0, 4, 2));
  EXPECT_EQ(shared.visible_gpus, "2,3");
  // A node of its own whose engine handed it GPUs 5 and 7 (Slurm without device cgroups).
  auto own = Make(job, F(2, 0, 2, 1, {"5", "7"}));
  EXPECT_EQ(own.visible_gpus, "5,7");
  // No GPUs on the node: unset, GPU_COUNT 0.
  auto none = Make(job, F(2));
  EXPECT_FALSE(none.visible_gpus);
  EXPECT_EQ(ContractToEnv(none)["GPU_COUNT"], "0");
  EXPECT_FALSE(ContractToEnv(none).contains("CUDA_VISIBLE_DEVICES"));
  // A parameter server sees none of the GPUs its node was handed (its optimizer runs on CPUs).
  JobContract ps = Job(2, 1, "parameter-server");
  ps.parameter_servers = 1;
  auto server = Make(ps, F(1, 0, 2, 1, {"5", "7"}));
  EXPECT_EQ(server.visible_gpus, "");
  EXPECT_EQ(ContractToEnv(server)["GPU_COUNT"], "0");
  EXPECT_EQ(Make(ps, F(2, 0, 2, 1, {"5", "7"})).visible_gpus, "5,7");
  // Fewer GPU ids than the plan needs: refused, naming the learner.
  LearnerContract c;
  Status st = MakeLearnerContract(job, F(1, 0, 2, 1, {"5"}), &c);
  EXPECT_NE(st.message().find("learner-1 needs GPU 1"), std::string::npos) << st.message();
}

TEST(Contract, ThreadsAreTheNodesCoresOverItsSlots) {
  JobContract job = Job(2, 2);
  EXPECT_EQ(Make(job, F(1)).omp_threads, 2);  // 8 shared cores / 4 slots
  EXPECT_EQ(Make(job, F(1, 0, 0, 1, {}, 16)).omp_threads, 8);
}

TEST(Contract, ParameterServerRolesTravelToo) {
  JobContract job = Job(3, 1, "parameter-server");
  job.parameter_servers = 1;
  auto env = ContractToEnv(Make(job, F(3)));
  EXPECT_EQ(env["CADRE_ROLE"], "worker");
  EXPECT_EQ(env["PS_HOSTS_COUNT"], "1");
  LearnerContract back;
  ASSERT_TRUE(ReadContract(env, &back).ok());
  EXPECT_EQ(back.job.parameter_servers, 1);
  EXPECT_EQ(ContractToEnv(back).at("CADRE_ROLE"), "worker");
}

TEST(Contract, JobContractJsonRoundTripLeavesTheTokenOut) {
  JobContract job = Job(2, 2);
  job.names_resolve = false;
  job.hosts_file = "/runs/training-x/hosts";
  std::string text = JobContractJson(job);
  EXPECT_EQ(text.find("secret"), std::string::npos);
  JobContract back;
  ASSERT_TRUE(ParseJobContractJson(text, &back).ok());
  back.job_token = job.job_token;
  EXPECT_EQ(ContractToEnv(Make(back, F(2, 1))), ContractToEnv(Make(job, F(2, 1))));
  Status st = ParseJobContractJson("{\"training_id\": 3}", &back);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("malformed"), std::string::npos);
}

}  // namespace
}  // namespace cadre::launch
