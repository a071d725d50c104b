// GPUs of a job on a machine with a given GPU count: each slot's CUDA_VISIBLE_DEVICES, and the
// clear error for a job that asks for more GPUs than the machine has.
#include "cadre/launch/gpu_plan.h"

#include <gtest/gtest.h>

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

TEST(GpuPlan, MoreGpusThanTheMachineHasIsAClearError) {
  EXPECT_TRUE(CheckMachineGpus(4, 2, 2, "k80x2").ok());
  EXPECT_TRUE(CheckMachineGpus(8, 4, 1, "k80x4").ok());
  EXPECT_TRUE(CheckMachineGpus(0, 4, 3, "k80x4").ok());  // no GPUs: the CPU fallback
  EXPECT_TRUE(CheckMachineGpus(2, 0, 5, "cpux2").ok());
  Status s = CheckMachineGpus(3, 2, 2, "k80x2");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'k80x2' asks for 2 GPU(s) per learner x 2 learner(s) = 4 GPUs, "
                             "but this machine has 3"),
            std::string::npos)
      << s.message();
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
  layout.machine_gpus = 4;
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
}

}  // namespace
}  // namespace cadre::launch
