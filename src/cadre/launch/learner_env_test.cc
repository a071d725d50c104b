// The learner contract as pure data: ranks, aliases, TF_CONFIG, devices, PATH handling.
#include <gtest/gtest.h>

#include "cadre/launch/learner_env.h"

namespace cadre::launch {
namespace {

JobSpec Spec(const char* framework, const char* compute, int nodes, int ps = 0) {
  JobSpec spec;
  spec.framework = *FindFramework(framework);
  spec.compute = *FindComputeConfig(compute);
  spec.nodes = nodes;
  spec.parameter_servers = ps;
  spec.slots_per_learner = spec.framework.mode == Mode::kParameterServer ? 1 : spec.compute.slots;
  spec.command = "true";
  spec.work_dir = "/code";
  return spec;
}

JobLayout Layout(int nodes, HostsMethod method = HostsMethod::kMountNamespace) {
  JobLayout layout;
  layout.training_id = "training-x";
  for (int id = 1; id <= nodes; ++id) {
    layout.hosts.push_back({id, "learner-" + std::to_string(id), "127.0.9." + std::to_string(id)});
  }
  layout.job_dir = "/runs/training-x";
  layout.data_dir = "/data";
  layout.store_address = "127.0.0.1:4000";
  layout.job_token = "secret";
  layout.hosts_method = method;
  layout.hosts_file = "/runs/training-x/hosts";
  layout.machine_cores = 8;
  layout.python_bin_dir = "/runs/training-x/bin";
  layout.python_path = "/build/python:/src/python";
  return layout;
}

TEST(LearnerEnv, RestartCountAndBudget) {
  JobSpec spec = Spec("pytorch-horovod", "cpu", 2);
  JobLayout layout = Layout(2);
  auto first = ContractEnv(spec, layout, 1, 0);
  EXPECT_EQ(first["CADRE_RESTART_COUNT"], "0");
  EXPECT_EQ(first["CADRE_MAX_RESTARTS"], "0");
  spec.max_restarts = 3;
  layout.restart_count = 2;
  auto third = ContractEnv(spec, layout, 1, 0);
  EXPECT_EQ(third["CADRE_RESTART_COUNT"], "2");
  EXPECT_EQ(third["CADRE_MAX_RESTARTS"], "3");
  EXPECT_EQ(third["TORCHELASTIC_RESTART_COUNT"], "2");  // torchrun's names too
  EXPECT_EQ(third["TORCHELASTIC_MAX_RESTARTS"], "3");
  // An elastic restart on fewer learners than the layout placed: the contract is the smaller job.
  spec.nodes = 1;
  auto smaller = ContractEnv(spec, layout, 1, 0);
  EXPECT_EQ(smaller["NUM_LEARNERS"], "1");
  EXPECT_EQ(smaller["CADRE_SIZE"], "1");
  EXPECT_FALSE(smaller.contains("CADRE_ELASTIC_UPDATES"));  // only elastic jobs have one
}

TEST(LearnerEnv, ElasticJobsLearnWhereRejoinsAreAnnounced) {
  JobSpec spec = Spec("pytorch-horovod", "cpu", 2);
  JobLayout layout = Layout(2);
  layout.elastic_updates_file = "/jobs/t/state/elastic-updates.json";
  auto env = ContractEnv(spec, layout, 2, 0);
  EXPECT_EQ(env["CADRE_ELASTIC_UPDATES"], "/jobs/t/state/elastic-updates.json");
  EXPECT_EQ(ElasticUpdateJson(std::nullopt), "{}\n");
  EXPECT_EQ(ElasticUpdateJson(3), "{\"learners\": 3, \"exit_code\": 75}\n");
}

TEST(LearnerEnv, RanksAndAliasesInAllreduceMode) {
  JobSpec spec = Spec("pytorch-horovod", "k80x2", 2);
  JobLayout layout = Layout(2);
  auto env = ContractEnv(spec, layout, 2, 1);
  EXPECT_EQ(env["LEARNER_ID"], "2");
  EXPECT_EQ(env["NUM_LEARNERS"], "2");
  EXPECT_EQ(env["LEARNER_NAME_PREFIX"], "learner");
  EXPECT_EQ(env["GPU_COUNT"], "0");  // no GPUs on the machine: slots run on CPUs
  EXPECT_EQ(env["CADRE_RANK"], "3");
  EXPECT_EQ(env["CADRE_SIZE"], "4");
  EXPECT_EQ(env["CADRE_LOCAL_RANK"], "1");
  EXPECT_EQ(env["CADRE_LOCAL_SIZE"], "2");
  EXPECT_EQ(env["CADRE_CROSS_RANK"], "1");
  EXPECT_EQ(env["CADRE_CROSS_SIZE"], "2");
  EXPECT_EQ(env["CADRE_HOST"], "learner-2");
  EXPECT_EQ(env["HOROVOD_RANK"], "3");
  EXPECT_EQ(env["HOROVOD_LOCAL_SIZE"], "2");
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["WORLD_SIZE"], "4");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["MASTER_ADDR"], "learner-1");
  EXPECT_EQ(env["MASTER_PORT"], "29500");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "2");  // 8 cores / 4 slots
  EXPECT_EQ(env["LOG_DIR"], "/runs/training-x/learner-2");
  EXPECT_EQ(env["RESULT_DIR"], "/runs/training-x");
  EXPECT_EQ(env["MODEL_DIR"], "/code");
  EXPECT_EQ(env["CADRE_STORE"], "127.0.0.1:4000");
  EXPECT_EQ(env["CADRE_JOB_TOKEN"], "secret");
  EXPECT_FALSE(env.contains("TF_CONFIG"));
  EXPECT_FALSE(env.contains("CUDA_VISIBLE_DEVICES"));
  EXPECT_FALSE(env.contains("CADRE_HOSTS"));
}

TEST(LearnerEnv, GpusArePartitionedPerLearner) {
  // Every slot sees its learner's GPUs; local rank k's own is device k (gpu_plan.h).
  JobSpec spec = Spec("pytorch-ddl", "k80x2", 2);
  JobLayout layout = Layout(2);
  layout.gpus.count = 4;
  EXPECT_EQ(ContractEnv(spec, layout, 1, 0)["CUDA_VISIBLE_DEVICES"], "0,1");
  EXPECT_EQ(ContractEnv(spec, layout, 2, 1)["CUDA_VISIBLE_DEVICES"], "2,3");
  EXPECT_EQ(ContractEnv(spec, layout, 2, 1)["GPU_COUNT"], "2");
  // Parameter-server mode: the server sees none (its optimizer runs on CPUs); the workers take
  // the shares in order, the first worker the first share.
  JobSpec ps = Spec("pytorch", "k80x2", 3, 1);
  layout = Layout(3);
  layout.gpus.count = 4;
  EXPECT_EQ(ContractEnv(ps, layout, 1, 0)["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(ContractEnv(ps, layout, 1, 0)["GPU_COUNT"], "0");
  EXPECT_EQ(ContractEnv(ps, layout, 2, 0)["CUDA_VISIBLE_DEVICES"], "0,1");
  EXPECT_EQ(ContractEnv(ps, layout, 3, 0)["CUDA_VISIBLE_DEVICES"], "2,3");
  EXPECT_EQ(ContractEnv(ps, layout, 3, 0)["GPU_COUNT"], "2");
  EXPECT_EQ(ps.gpu_learners(), 2);
}

TEST(LearnerEnv, ParameterServerModeHasTfConfig) {
  JobSpec spec = Spec("pytorch", "cpu", 3, 1);
  JobLayout layout = Layout(3);
  auto server = ContractEnv(spec, layout, 1, 0);
  EXPECT_EQ(server["PS_HOSTS_COUNT"], "1");
  EXPECT_EQ(server["CADRE_ROLE"], "ps");
  EXPECT_EQ(server["TF_CONFIG"],
            R"({"cluster":{"ps":["learner-1:2222"],"worker":["learner-2:2222","learner-3:2222"]},)"
            R"("task":{"type":"ps","index":0}})");
  auto worker = ContractEnv(spec, layout, 3, 0);
  EXPECT_EQ(worker["CADRE_ROLE"], "worker");
  EXPECT_NE(worker["TF_CONFIG"].find(R"("task":{"type":"worker","index":1})"), std::string::npos);
  EXPECT_EQ(worker["CADRE_SIZE"], "3");
}

TEST(LearnerEnv, CadreHostsFallbackUsesAddresses) {
  JobSpec spec = Spec("pytorch", "cpu", 2, 1);
  JobLayout layout = Layout(2, HostsMethod::kCadreHosts);
  auto env = ContractEnv(spec, layout, 2, 0);
  EXPECT_EQ(env["CADRE_HOSTS"], "/runs/training-x/hosts");
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.9.1");
  EXPECT_NE(env["TF_CONFIG"].find("127.0.9.2:2222"), std::string::npos);
}

TEST(LearnerEnv, SlotEnvironmentMergesBase) {
  JobSpec spec = Spec("pytorch-horovod", "cpux2", 2);
  JobLayout layout = Layout(2);
  auto env = SlotEnvironment(spec, layout, 1, 0,
                             {"PATH=/usr/bin", "PYTHONPATH=/mine", "HOME=/root", "RANK=99",
                              "CADRE_HOSTS=/old", "TF_CONFIG={}"});
  auto has = [&](const std::string& entry) {
    return std::find(env.begin(), env.end(), entry) != env.end();
  };
  EXPECT_TRUE(has("PATH=/runs/training-x/bin:/usr/bin"));
  EXPECT_TRUE(has("PYTHONPATH=/build/python:/src/python:/mine"));
  EXPECT_TRUE(has("HOME=/root"));
  EXPECT_TRUE(has("RANK=0"));
  EXPECT_TRUE(has("PYTHONUNBUFFERED=1"));
  for (const auto& e : env) {
    EXPECT_FALSE(e.starts_with("CADRE_HOSTS=")) << e;
    EXPECT_FALSE(e.starts_with("TF_CONFIG=")) << e;
  }
  // A user who chose Python's buffering keeps it.
  auto chosen = SlotEnvironment(spec, layout, 1, 0, {"PYTHONUNBUFFERED="});
  EXPECT_NE(std::find(chosen.begin(), chosen.end(), "PYTHONUNBUFFERED="), chosen.end());
}

TEST(Hosts, FileListsEveryLearnerAfterTheSystemEntries) {
  std::string text = HostsFileText({{1, "learner-1", "127.0.5.1"}, {2, "learner-2", "127.0.5.2"}},
                                   "127.0.0.1\tlocalhost");
  EXPECT_EQ(text,
            "127.0.0.1\tlocalhost\n# cadre learners of this job\n127.0.5.1\tlearner-1\n"
            "127.0.5.2\tlearner-2\n");
}

TEST(Hosts, PickedAddressesHaveTheLearnerPortFree) {
  std::vector<LearnerHost> hosts;
  ASSERT_TRUE(PickLearnerHosts("worker", 3, &hosts).ok());
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[2].name, "worker-3");
  EXPECT_TRUE(hosts[2].address.starts_with("127.0."));
  EXPECT_TRUE(hosts[2].address.ends_with(".3"));
}

}  // namespace
}  // namespace cadre::launch
