// GPUs of a job on a machine with a given GPU count: each slot's CUDA_VISIBLE_DEVICES, and the
// clear error for a job that asks for more GPUs than the machine has.
#include "cadre/launch/gpu_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "cadre/launch/catalog.h"
#include "cadre/launch/learner_env.h"

namespace cadre::launch {
namespace {

TEST(GpuPlan, EachLearnerSeesItsOwnGpusAndLocalRankIndexesThem) {
  EXPECT_EQ(VisibleGpus(4, 2, 1), "0,1");
  EXPECT_EQ(VisibleGpus(4, 2, 2), "2,3");
  EXPECT_EQ(VisibleGpus(8, 4, 2), "4,5,6,7");
  EXPECT_EQ(VisibleGpus(1, 1, 1), "0");
  EXPECT_EQ(VisibleGpus(4, 0, 2), "");            // a cpu configuration on a GPU machine: none
  EXPECT_EQ(VisibleGpus(0, 2, 1), std::nullopt);  // no GPUs: left unset
}

MachineGpus Machine(int count) {
  MachineGpus gpus;
  EXPECT_TRUE(UsableGpus(count, "nvidia-smi -L", std::nullopt, &gpus).ok());
  return gpus;
}

TEST(GpuPlan, MoreGpusThanTheMachineHasIsAClearError) {
  EXPECT_TRUE(CheckMachineGpus(Machine(4), 2, 2, "k80x2").ok());
  EXPECT_TRUE(CheckMachineGpus(Machine(8), 4, 1, "k80x4").ok());
  EXPECT_TRUE(CheckMachineGpus(Machine(0), 4, 3, "k80x4").ok());  // no GPUs: the CPU fallback
  EXPECT_TRUE(CheckMachineGpus(Machine(2), 0, 5, "cpux2").ok());
  Status s = CheckMachineGpus(Machine(3), 2, 2, "k80x2");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'k80x2' asks for 2 GPU(s) per learner x 2 learner(s) = 4 GPUs, "
                             "but this machine has 3 (nvidia-smi -L)"),
            std::string::npos)
      << s.message();
  // Parameter servers take no GPU: said, so that the count is not a riddle.
  s = CheckMachineGpus(Machine(3), 2, 2, "k80x2", 1);
  EXPECT_NE(s.message().find("x 2 learner(s) (the 1 parameter server(s) take none) = 4 GPUs"),
            std::string::npos)
      << s.message();
}

// Every compute configuration at every learner count that fits a machine: no two learners share
// a GPU, every GPU named exists, each learner sees exactly its configuration's GPUs; one learner
// more than fits is refused.
TEST(GpuPlan, EveryConfigurationAndLearnerCountOnMachinesOfOneToEightGpus) {
  for (std::string_view name : ComputeConfigNameList()) {
    ComputeConfig compute = *FindComputeConfig(name);
    for (int machine = 0; machine <= 8; ++machine) {
      for (int learners = 1; learners <= 9; ++learners) {
        Status fits = CheckMachineGpus(Machine(machine), compute.gpus, learners, name);
        bool should_fit = machine == 0 || compute.gpus * learners <= machine;
        ASSERT_EQ(fits.ok(), should_fit) << name << " x" << learners << " on " << machine;
        if (!fits.ok()) continue;
        std::set<int> used;
        for (int id = 1; id <= learners; ++id) {
          auto visible = VisibleGpus(machine, compute.gpus, id);
          if (machine == 0) {
            EXPECT_EQ(visible, std::nullopt);
            continue;
          }
          ASSERT_TRUE(visible.has_value());
          int seen = 0;
          for (size_t start = 0; start < visible->size();) {
            size_t comma = std::min(visible->find(',', start), visible->size());
            int gpu = std::stoi(visible->substr(start, comma - start));
            EXPECT_GE(gpu, 0);
            EXPECT_LT(gpu, machine) << name << " learner " << id;
            EXPECT_TRUE(used.insert(gpu).second) << "GPU " << gpu << " shared, " << name;
            ++seen;
            start = comma + 1;
          }
          EXPECT_EQ(seen, compute.gpus) << name << " learner " << id << ": " << *visible;
        }
      }
    }
  }
}

TEST(GpuPlan, NvidiaSmiCountsGpusNotMigInstancesOrMessages) {
  EXPECT_EQ(CountNvidiaSmiGpus("GPU 0: Tesla K80 (UUID: GPU-1)\nGPU 1: Tesla K80 (UUID: GPU-2)\n"),
            2);
  EXPECT_EQ(CountNvidiaSmiGpus("GPU 0: NVIDIA A100 (UUID: GPU-1)\n"
                               "  MIG 1g.5gb     Device  0: (UUID: MIG-a)\n"
                               "  MIG 1g.5gb     Device  1: (UUID: MIG-b)\n"),
            1);
  EXPECT_EQ(CountNvidiaSmiGpus("No devices were found\n"), 0);
  EXPECT_EQ(CountNvidiaSmiGpus("GPU 0: H200 (UUID: GPU-9)"), 1);  // no final newline
  EXPECT_EQ(CountNvidiaSmiGpus(""), 0);
}

// The runner's own CUDA_VISIBLE_DEVICES (a scheduler's allocation): the learners' shares are
// taken from the GPUs it lists, in its order, never from the others.
TEST(GpuPlan, TheRunnersCudaVisibleDevicesNarrowsTheMachine) {
  MachineGpus gpus;
  ASSERT_TRUE(UsableGpus(4, "nvidia-smi -L", "3, 1", &gpus).ok());
  EXPECT_EQ(gpus.count, 2);
  EXPECT_EQ(gpus.ids, (std::vector<std::string>{"3", "1"}));
  EXPECT_FALSE(gpus.hidden_by.has_value());
  Status s = CheckMachineGpus(gpus, 2, 2, "k80x2");
  EXPECT_NE(s.message().find("this machine has 2 (CUDA_VISIBLE_DEVICES='3, 1')"), std::string::npos)
      << s.message();

  ASSERT_TRUE(UsableGpus(2, "nvidia-smi -L", "GPU-aa,MIG-bb", &gpus).ok());
  EXPECT_EQ(gpus.ids, (std::vector<std::string>{"GPU-aa", "MIG-bb"}));
  ASSERT_TRUE(UsableGpus(4, "nvidia-smi -L", "2,-1,3", &gpus).ok());  // CUDA stops at -1
  EXPECT_EQ(gpus.ids, (std::vector<std::string>{"2"}));

  for (const char* hide : {"", "-1"}) {
    ASSERT_TRUE(UsableGpus(4, "nvidia-smi -L", hide, &gpus).ok());
    EXPECT_EQ(gpus.count, 0);
    EXPECT_EQ(gpus.hidden_by, hide);
  }
  // No GPU at all: the variable changes nothing (the CPU fallback).
  ASSERT_TRUE(UsableGpus(0, "nvidia-smi -L", "0,1", &gpus).ok());
  EXPECT_EQ(gpus.count, 0);
  EXPECT_FALSE(gpus.hidden_by.has_value());

  s = UsableGpus(4, "nvidia-smi -L", "1,4", &gpus);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "CUDA_VISIBLE_DEVICES='1,4': '4' names no GPU of this machine (4 GPU(s) by "
            "nvidia-smi -L; entries are 0..3 or GPU-/MIG- UUIDs)");
  s = UsableGpus(4, "nvidia-smi -L", "cuda:0", &gpus);
  EXPECT_NE(s.message().find("'cuda:0' names no GPU"), std::string::npos) << s.message();
  s = UsableGpus(4, "nvidia-smi -L", "1,01", &gpus);
  EXPECT_NE(s.message().find("GPU '1' is listed twice"), std::string::npos) << s.message();
}

TEST(GpuPlan, ContractGivesEverySlotOfALearnerTheLearnersGpus) {
  JobSpec spec;
  spec.framework = *FindFramework("pytorch-horovod");
  spec.compute = *FindComputeConfig("k80x2");
  spec.nodes = 2;
  spec.slots_per_learner = 2;
  JobLayout layout;
  for (int id = 1; id <= 2; ++id) {
    layout.hosts.push_back({id, "learner-" + std::to_string(id), "127.0.9." + std::to_string(id)});
  }
  layout.gpus.count = 4;
  for (int learner = 1; learner <= 2; ++learner) {
    for (int local = 0; local < 2; ++local) {
      auto env = ContractEnv(spec, layout, learner, local);
      EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], learner == 1 ? "0,1" : "2,3");
      EXPECT_EQ(env["GPU_COUNT"], "2");
      EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local));  // device `local` is its own GPU
    }
  }
  spec.compute = *FindComputeConfig("cpux2");
  EXPECT_EQ(ContractEnv(spec, layout, 2, 1)["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(ContractEnv(spec, layout, 2, 1)["GPU_COUNT"], "0");

  // The runner was given GPUs 6,7,2,5 of the machine: learner 1 gets 6,7 and learner 2 gets 2,5.
  spec.compute = *FindComputeConfig("k80x2");
  ASSERT_TRUE(UsableGpus(8, "nvidia-smi -L", "6,7,2,5", &layout.gpus).ok());
  EXPECT_EQ(ContractEnv(spec, layout, 1, 1)["CUDA_VISIBLE_DEVICES"], "6,7");
  EXPECT_EQ(ContractEnv(spec, layout, 2, 0)["CUDA_VISIBLE_DEVICES"], "2,5");
  // The runner sees no GPU (CUDA_VISIBLE_DEVICES=""): neither do its slots, which run on CPUs.
  ASSERT_TRUE(UsableGpus(8, "nvidia-smi -L", "", &layout.gpus).ok());
  EXPECT_EQ(ContractEnv(spec, layout, 2, 1)["CUDA_VISIBLE_DEVICES"], "");
  EXPECT_EQ(ContractEnv(spec, layout, 2, 1)["GPU_COUNT"], "0");
}

}  // namespace
}  // namespace cadre::launch
