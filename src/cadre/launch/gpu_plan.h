// Which GPUs the slots of a job see (CUDA_VISIBLE_DEVICES), and whether the machine has them.
//
// Learner i owns GPUs (i-1)*G .. i*G-1 of the machine, G being its compute configuration's GPUs
// per learner. Every slot of the learner sees all of them, in that order, so slot k's own GPU is
// device k: `torch.cuda.set_device(hvd.local_rank())`, as Horovod's examples and the seed
// service's usage tip pin the device, names the slot's own GPU, and no slot asks for a device
// ordinal it cannot see ("invalid device ordinal"). A parameter-server learner, one process,
// sees its G GPUs the same way. Slots of a cpu configuration see no GPU. Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cadre/base/status.h"

namespace cadre::launch {

// OK when the machine has the job's GPUs (gpus_per_learner x learners), or has none at all
// (the slots then run on CPUs; the runner warns); otherwise InvalidArgument naming the
// compute configuration, what it asks for and what the machine has.
Status CheckMachineGpus(int machine_gpus, int gpus_per_learner, int learners,
                        std::string_view compute_name);

// CUDA_VISIBLE_DEVICES for the slots of learner `learner_id` (1-based): "2,3"; "" (no GPU
// visible) for a cpu configuration on a machine with GPUs; nullopt (left unset) on a machine
// without GPUs. Assumes CheckMachineGpus passed.
std::optional<std::string> VisibleGpus(int machine_gpus, int gpus_per_learner, int learner_id);

}  // namespace cadre::launch
