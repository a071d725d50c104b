// Engines' facts into the learner contract: Slurm's and Open MPI's variables, hostfiles, the
// batch script and scontrol's output, all without a cluster (tests/test_slurm.py runs a real one).
#include "cadre/backends/engine_facts.h"

#include <gtest/gtest.h>

#include "cadre/backends/mpi_backend.h"
#include "cadre/backends/slurm_backend.h"
#include "cadre/backends/task.h"

namespace cadre::backends {
namespace {

EnvMap SlurmEnv(int node, int local) {
  return {{"SLURM_NODEID", std::to_string(node)},
          {"SLURM_LOCALID", std::to_string(local)},
          {"SLURM_PROCID", std::to_string(node * 2 + local)},
          {"SLURM_NTASKS_PER_NODE", "2"},
          {"SLURM_JOB_NODELIST", "gpu[09-10]"}};
}

TaskPlan Plan(int learners, int slots) {
  TaskPlan plan;
  plan.job.training_id = "training-x";
  plan.job.framework = "pytorch-horovod";
  plan.job.mode = "horovod";
  plan.job.learners = learners;
  plan.job.slots_per_learner = slots;
  plan.job.gpus_per_learner = 2;
  plan.job.store_address = "10.0.0.1:5000";
  plan.job.job_token = "t";
  plan.job.job_dir = "/shared/runs/training-x";
  plan.command = "python3 train.py";
  return plan;
}

TEST(TaskPlan, ArgumentsThatAreNotUtf8TravelByteForByte) {
  // JSON is UTF-8; a command's words after `--` may be any bytes (a Latin-1 file name).
  TaskPlan plan = Plan(2, 1);
  plan.command_argv = {"python3", "d\xe9j\xe0.py", "\xff\xfe", "plain", "caf\xc3\xa9", ""};
  plan.command = "python3 'd\xe9j\xe0.py'";
  const std::string text = TaskPlanJson(plan);
  TaskPlan back;
  ASSERT_TRUE(ParseTaskPlanJson(text, &back).ok()) << text;
  EXPECT_EQ(back.command_argv, plan.command_argv);
  EXPECT_EQ(back.command, plan.command);
  // UTF-8 words stay readable strings.
  EXPECT_NE(text.find("\"caf\xc3\xa9\""), std::string::npos) << text;
  // A record that is not ours is refused by name, never read as other bytes.
  for (const char* bad : {"\"zz\"", "\"abc\"", "7"}) {
    std::string broken = text;
    broken.replace(broken.find("\"hex\": \"") + 8, 0, std::string(bad) + ", \"x\": ");
    EXPECT_EQ(ParseTaskPlanJson(broken, &back).code(), Code::kInvalidArgument) << broken;
  }
}

TEST(EngineFacts, SlurmTaskBecomesLearnerAndSlot) {
  EngineSlot slot;
  ASSERT_TRUE(SlurmSlotFromEnv(SlurmEnv(1, 1), &slot).ok());
  EXPECT_EQ(slot.learner_index, 1);
  EXPECT_EQ(slot.local_rank, 1);
  EXPECT_EQ(slot.nodes, std::vector<std::string>({"gpu09", "gpu10"}));  // padding kept

  launch::LearnerContract c;
  ASSERT_TRUE(TaskContract(Plan(2, 2), slot, {"10.0.1.9", "10.0.1.10"}, &c).ok());
  auto env = launch::ContractToEnv(c);
  EXPECT_EQ(env["LEARNER_ID"], "2");  // node index + 1
  EXPECT_EQ(env["CADRE_RANK"], "3");
  EXPECT_EQ(env["CADRE_LOCAL_RANK"], "1");
  EXPECT_EQ(env["CADRE_HOST"], "learner-2");
  EXPECT_EQ(env["CADRE_LEARNER_ADDRESS"], "10.0.1.10");
  EXPECT_EQ(env["GPU_COUNT"], "0");  // Slurm gave the node no GPUs
}

TEST(EngineFacts, SlurmGpusAreTheOnesSlurmGaveTheNode) {
  EnvMap env = SlurmEnv(0, 0);
  env["CUDA_VISIBLE_DEVICES"] = "4,6";
  EngineSlot slot;
  ASSERT_TRUE(SlurmSlotFromEnv(env, &slot).ok());
  launch::LearnerContract c;
  ASSERT_TRUE(TaskContract(Plan(2, 2), slot, {"a", "b"}, &c).ok());
  EXPECT_EQ(launch::ContractToEnv(c)["CUDA_VISIBLE_DEVICES"], "4,6");
  EXPECT_EQ(launch::ContractToEnv(c)["GPU_COUNT"], "2");
}

TEST(EngineFacts, SlurmMistakesAreNamed) {
  EngineSlot slot;
  EnvMap env = SlurmEnv(0, 0);
  env.erase("SLURM_JOB_NODELIST");
  EXPECT_NE(SlurmSlotFromEnv(env, &slot).message().find("SLURM_JOB_NODELIST is not set"),
            std::string::npos);
  env = SlurmEnv(2, 0);
  EXPECT_NE(SlurmSlotFromEnv(env, &slot).message().find("SLURM_NODEID=2"), std::string::npos);
  env = SlurmEnv(0, 0);
  env["SLURM_LOCALID"] = "x";
  EXPECT_NE(SlurmSlotFromEnv(env, &slot).message().find("SLURM_LOCALID='x'"), std::string::npos);
  // An allocation that does not match the job: refused before the command runs.
  ASSERT_TRUE(SlurmSlotFromEnv(SlurmEnv(0, 0), &slot).ok());
  launch::LearnerContract c;
  EXPECT_NE(TaskContract(Plan(3, 2), slot, {"a", "b"}, &c).message().find("2 nodes but it has 3"),
            std::string::npos);
  EXPECT_NE(TaskContract(Plan(2, 4), slot, {"a", "b"}, &c).message().find("2 tasks per node"),
            std::string::npos);
}

TEST(EngineFacts, OpenMpiRanksFillOneHostPerLearner) {
  EnvMap env = {{"OMPI_COMM_WORLD_RANK", "5"},
                {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EngineSlot slot;
  ASSERT_TRUE(MpiSlotFromEnv(env, {"h1", "h2", "h3"}, &slot).ok());
  EXPECT_EQ(slot.learner_index, 2);
  EXPECT_EQ(slot.local_rank, 1);
  EXPECT_EQ(slot.nodes.at(2), "h3");
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  EXPECT_NE(MpiSlotFromEnv(env, {"h1", "h2", "h3"}, &slot).message().find("ppr:N:node"),
            std::string::npos);
  env["OMPI_COMM_WORLD_RANK"] = "6";
  EXPECT_NE(MpiSlotFromEnv(env, {"h1", "h2", "h3"}, &slot).message().find("lists 3"),
            std::string::npos);
}

TEST(EngineFacts, Hostfiles) {
  std::vector<std::string> hosts;
  ASSERT_TRUE(ParseHostfile("# cluster\nnode1 slots=2\n\n  node2  # spare\n", &hosts).ok());
  EXPECT_EQ(hosts, std::vector<std::string>({"node1", "node2"}));
  EXPECT_NE(ParseHostfile("node1 cpus=2\n", &hosts).message().find("line 1: 'cpus=2'"),
            std::string::npos);
  EXPECT_EQ(ParseHostfile("# nothing\n", &hosts).code(), Code::kInvalidArgument);
  Status twice = ParseHostfile("node1\nnode2 slots=2\n# spare\nnode1 slots=2\n", &hosts);
  EXPECT_NE(twice.message().find("line 4: host node1 is listed again (first on line 1)"),
            std::string::npos)
      << twice.message();
}

TEST(MpiBackend, FirstFailedRankFromMpirunsOutput) {
  EXPECT_EQ(FirstFailedRank("-----\nmpirun noticed that process rank 3 with PID 8761 on node "
                            "127.0.0.3 exited on signal 9 (Killed).\n-----\n"),
            3);
  EXPECT_EQ(FirstFailedRank("prterun noticed that process rank 12 with PID 1 on node n"), 12);
  EXPECT_EQ(FirstFailedRank("Primary job  terminated normally\n"), std::nullopt);
  EXPECT_EQ(FirstFailedRank("noticed that process rank x"), std::nullopt);
}

TEST(SlurmBackend, BatchScriptAsksForOneNodePerLearner) {
  launch::JobSpec spec;
  spec.name = "mnist run";
  spec.nodes = 2;
  spec.slots_per_learner = 2;
  spec.compute.gpus = 2;
  BackendOptions o;
  o.time_limit_minutes = 30;
  std::string s = SlurmBatchScript(spec, o, "/shared/runs/t", "/opt/cadre");
  EXPECT_NE(s.find("#SBATCH --job-name=mnist_run\n"), std::string::npos) << s;
  EXPECT_NE(s.find("#SBATCH --nodes=2\n"), std::string::npos);
  EXPECT_NE(s.find("#SBATCH --ntasks-per-node=2\n"), std::string::npos);
  EXPECT_NE(s.find("#SBATCH --gres=gpu:2\n"), std::string::npos);
  EXPECT_NE(s.find("#SBATCH --time=30\n"), std::string::npos);
  // Run once: never requeued by Slurm after a node failure, against the first run's store.
  EXPECT_NE(s.find("#SBATCH --no-requeue\n"), std::string::npos);
  EXPECT_NE(s.find("srun --kill-on-bad-exit=1 '/opt/cadre' task --engine slurm --job-dir "
                   "'/shared/runs/t'"),
            std::string::npos);
  spec.compute.gpus = 0;
  EXPECT_EQ(SlurmBatchScript(spec, BackendOptions{}, "/r", "/c").find("--gres"), std::string::npos);
}

TEST(SlurmBackend, TimeLimitsInSbatchsForms) {
  const std::pair<const char*, int> good[] = {
      {"0", 0},          {"90", 90},       {"1:30", 2},     {"0:30", 1},
      {"1:00:00", 60},   {"2-0", 2880},    {"1-2", 1560},   {"1-2:03", 1563},
      {"1-0:0:1", 1441}, {"UNLIMITED", 0}, {"INFINITE", 0}, {"365-0", 525600}};
  for (const auto& [text, expected] : good) {
    int minutes = -1;
    Status st = ParseTimeLimit(text, &minutes);
    ASSERT_TRUE(st.ok()) << text << ": " << st.message();
    EXPECT_EQ(minutes, expected) << text;
  }
  int minutes = 7;
  EXPECT_EQ(ParseTimeLimit("-5", &minutes).message(), "must be 0 (no limit) or more, got '-5'");
  for (const char* bad : {"", "1h", "1:2:3:4", "1-2:3:4:5", "1--2", "1-2-3", ":30", "1:", "365-1",
                          "9999999999", "1.5", " 60"}) {
    int minutes = 7;
    Status st = ParseTimeLimit(bad, &minutes);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("hours:minutes:seconds"), std::string::npos) << st.message();
    EXPECT_EQ(minutes, 7);
  }
}

TEST(SlurmBackend, ScontrolFields) {
  std::string line = "JobId=7 JobName=x JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0";
  EXPECT_EQ(ScontrolField(line, "JobState"), "FAILED");
  EXPECT_EQ(ScontrolField(line, "ExitCode"), "3:0");
  EXPECT_EQ(ScontrolField(line, "Job"), "");
  EXPECT_EQ(ScontrolField(line, "Nodes"), "");
}

TEST(SlurmBackend, LostNodesAreNamedWithTheirLearners) {
  const std::vector<std::string> job = {"node1", "node2", "node3"};
  std::string nodes =
      "NodeName=node1 Arch=x86_64 State=MIXED ThreadsPerCore=1 Partitions=debug\n"
      "NodeName=node2 Arch=x86_64 State=DOWN ThreadsPerCore=1 Partitions=debug "
      "Reason=probe two words [root@2026-12-03T10:29:28]\n"
      "NodeName=node3 Arch=x86_64 State=IDLE* ThreadsPerCore=1\n"
      "NodeName=node9 Arch=x86_64 State=DOWN ThreadsPerCore=1\n";
  EXPECT_EQ(LostNodes(nodes, "", job),
            "node node2 (learner-2) is DOWN (Reason=probe two words [root@2026-12-03T10:29:28]); "
            "node node3 (learner-3) is IDLE*");
  // A node that failed and came back at once: srun said which.
  EXPECT_EQ(LostNodes("NodeName=node1 State=IDLE\n",
                      "srun: error: Node failure on node3\nsrun: error: node3: tasks 2-3: "
                      "Exited with exit code 143\n",
                      job),
            "node node3 (learner-3) failed (srun: \"srun: error: Node failure on node3\")");
  EXPECT_EQ(LostNodes("NodeName=node1 State=IDLE\n", "", job),
            "Slurm names no failed node of the job");
}

TEST(EngineFacts, SinfoCpusAreTheClustersTotal) {
  int64_t total = 0;
  ASSERT_TRUE(ParseSinfoCpus("0/8/0/8\n", &total).ok());
  EXPECT_EQ(total, 8);
  ASSERT_TRUE(ParseSinfoCpus("6/2/0/8", &total).ok());
  EXPECT_EQ(total, 8);
  for (const char* bad : {"", "8", "0/8/0/", "0/8/0/x", "0/8/0/-1", "0/8/8"}) {
    Status st = ParseSinfoCpus(bad, &total);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("sinfo -o %C"), std::string::npos) << st.message();
  }
}

}  // namespace
}  // namespace cadre::backends
