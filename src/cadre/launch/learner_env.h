// The local backend's side of the learner contract (contract.h): a job laid out on this machine,
// and the environment every slot of it starts with. Pure functions of the job's layout, so tests
// check the contract without starting anything.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cadre/launch/contract.h"
#include "cadre/launch/gpu_plan.h"
#include "cadre/launch/hosts.h"
#include "cadre/launch/job_spec.h"
#include "cadre/launch/process.h"

namespace cadre::launch {

// Where a job's pieces are, decided once before any slot starts.
struct JobLayout {
  std::string training_id;
  std::string name_prefix = "learner";
  std::vector<LearnerHost> hosts;  // hosts[i].id == i + 1
  std::filesystem::path job_dir;
  std::filesystem::path data_dir;
  std::string store_address;  // CADRE_STORE, host:port
  std::string job_token;      // CADRE_JOB_TOKEN
  HostsMethod hosts_method = HostsMethod::kCadreHosts;
  std::filesystem::path hosts_file;
  MachineGpus gpus;  // the usable GPUs here; none: no CUDA_VISIBLE_DEVICES, GPU_COUNT 0
  int machine_cores = 1;
  // The CPUs of each slot, learner-major (cpu_binding.h); empty: slots are not bound.
  std::vector<std::vector<int>> slot_cpus;
  std::filesystem::path python_bin_dir;  // first on PATH; empty when no python was found
  std::string python_path;               // prepended to PYTHONPATH
  int restart_count = 0;  // CADRE_RESTART_COUNT: 0 for the first start, then 1, 2, ...
  // Elastic jobs only (CADRE_ELASTIC_UPDATES): where the runner announces that lost learners
  // may come back, as ElasticUpdateJson.
  std::filesystem::path elastic_updates_file;
};

// The text of JobLayout::elastic_updates_file: `{}` while nothing is announced, else
// {"learners": N, "exit_code": C}: hvd.elastic's next commit makes every rank exit with C, and
// the runner starts the job again on N learners from that commit.
inline constexpr int kRejoinExitCode = 75;  // EX_TEMPFAIL
std::string ElasticUpdateJson(std::optional<int> learners);

// Per-learner folders under the job directory.
std::filesystem::path LearnerDir(const JobLayout& layout, int learner_id);
std::filesystem::path SlotLogPath(const JobLayout& layout, int learner_id, int local_rank);

// The job-wide part of the contract (contract.h) of a job laid out on this machine.
JobContract JobContractOf(const JobSpec& spec, const JobLayout& layout);

// The contract variables of one slot (learner_id 1..N, local_rank 0..slots-1).
std::map<std::string, std::string> ContractEnv(const JobSpec& spec, const JobLayout& layout,
                                               int learner_id, int local_rank);

// The slot's whole environment: `base` ("KEY=VALUE" entries, the runner's own environment) with
// the contract applied over it, PATH and PYTHONPATH prefixed.
std::vector<std::string> SlotEnvironment(const JobSpec& spec, const JobLayout& layout,
                                         int learner_id, int local_rank,
                                         const std::vector<std::string>& base);

// The same for a contract made elsewhere (contract.h): `base` with `contract` applied over it.
std::vector<std::string> MergeSlotEnvironment(const std::map<std::string, std::string>& contract,
                                              const std::filesystem::path& python_bin_dir,
                                              const std::string& python_path,
                                              const std::vector<std::string>& base);

// The GPUs this runner may use (gpu_plan.h): the machine's (`nvidia-smi -L`, else /dev/nvidia<N>
// devices), narrowed by the runner's own CUDA_VISIBLE_DEVICES when it is set. InvalidArgument
// naming CUDA_VISIBLE_DEVICES when that names GPUs the machine does not have.
Status DetectMachineGpus(MachineGpus* out);

}  // namespace cadre::launch
