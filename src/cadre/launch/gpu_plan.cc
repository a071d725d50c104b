#include "cadre/launch/gpu_plan.h"

namespace cadre::launch {

Status CheckMachineGpus(int machine_gpus, int gpus_per_learner, int learners,
                        std::string_view compute_name) {
  const long wanted = static_cast<long>(gpus_per_learner) * learners;
  if (machine_gpus <= 0 || wanted <= machine_gpus) return Status::Ok();
  return InvalidArgument("compute configuration '" + std::string(compute_name) + "' asks for " +
                         std::to_string(gpus_per_learner) + " GPU(s) per learner x " +
                         std::to_string(learners) + " learner(s) = " + std::to_string(wanted) +
                         " GPUs, but this machine has " + std::to_string(machine_gpus) +
                         " (nvidia-smi -L): run fewer learners, a configuration with fewer "
                         "GPUs per learner, or a cpu configuration");
}

std::optional<std::string> VisibleGpus(int machine_gpus, int gpus_per_learner, int learner_id) {
  if (machine_gpus <= 0) return std::nullopt;
  std::string devices;
  for (int i = 0; i < gpus_per_learner; ++i) {
    if (!devices.empty()) devices += ",";
    devices += std::to_string((learner_id - 1) * gpus_per_learner + i);
  }
  return devices;
}

}  // namespace cadre::launch
