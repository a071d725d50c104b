// Which GPUs the slots of a job see (CUDA_VISIBLE_DEVICES), and whether the machine has them.
//
// Learner i owns GPUs (i-1)*G .. i*G-1 of the machine, G being its compute configuration's GPUs
// per learner. Every slot of the learner sees all of them, in that order, so slot k's own GPU is
// device k: `torch.cuda.set_device(hvd.local_rank())`, as Horovod's examples and the seed
// service's usage tip pin the device, names the slot's own GPU, and no slot asks for a device
// ordinal it cannot see ("invalid device ordinal"). In parameter-server mode the servers
// (learners 1..P) run their optimizer on CPUs and see no GPU; worker learner P+j (one process)
// owns the j-th share, as learner j would. Slots of a cpu configuration see no GPU.
//
// "The machine's GPUs" are those the runner itself may use: all that `nvidia-smi -L` lists, or,
// when the runner's environment sets CUDA_VISIBLE_DEVICES (a scheduler's allocation, a user
// keeping GPUs for something else), only those, in that order, as CUDA narrows them for any
// process. Pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::launch {

// The GPUs a job may use here.
struct MachineGpus {
  int count = 0;                 // usable GPUs: the learners' shares are taken from these
  std::vector<std::string> ids;  // their CUDA_VISIBLE_DEVICES names; empty: 0..count-1
  // The runner's CUDA_VISIBLE_DEVICES when it leaves none of the machine's GPUs ("", "-1"): the
  // slots keep it, so that they see none either, and run on CPUs.
  std::optional<std::string> hidden_by;
  std::string source;  // where the count comes from, for messages: "nvidia-smi -L", ...
};

// GPUs in `nvidia-smi -L` output: its "GPU <n>: ..." lines (MIG instances, listed indented
// under their GPU, and "No devices were found" are not GPUs).
int CountNvidiaSmiGpus(std::string_view output);

// The usable GPUs of a machine with `physical` GPUs (counted by `source`), given the runner's
// CUDA_VISIBLE_DEVICES (`visible`, nullopt when unset). Entries are indices below `physical` or
// GPU-/MIG- UUIDs; as CUDA does, the list ends at "-1". InvalidArgument naming
// CUDA_VISIBLE_DEVICES for an entry that names no GPU here or names one twice. A machine without
// GPUs has none, whatever the variable says.
Status UsableGpus(int physical, std::string_view source, std::optional<std::string_view> visible,
                  MachineGpus* out);

// OK when the machine has the job's GPUs (gpus_per_learner x learners that are not parameter
// servers: JobSpec::gpu_learners), or has none at all (the slots then run on CPUs; the runner
// warns); otherwise InvalidArgument naming the compute configuration, what it asks for and what
// the machine has.
Status CheckMachineGpus(const MachineGpus& machine, int gpus_per_learner, int gpu_learners,
                        std::string_view compute_name, int parameter_servers = 0);

// CUDA_VISIBLE_DEVICES for the slots of learner `learner_id` (1-based): "2,3"; "" (no GPU
// visible) for a cpu configuration on a machine with GPUs; nullopt (left unset) on a machine
// without GPUs. Indices into the machine's usable GPUs. Assumes CheckMachineGpus passed.
std::optional<std::string> VisibleGpus(int machine_gpus, int gpus_per_learner, int learner_id);

}  // namespace cadre::launch
