// The learner contract (docs/manifest.md, "The learner contract") as one value.
//
// Every backend builds a slot's contract the same way: the job-wide part (JobContract) is decided
// once by the runner and shipped to wherever the slots start (in memory for the local backend, a
// file in the job directory for Slurm and Open MPI, pod environment for Kubernetes); the slot's
// own facts (which learner, which local rank, which GPUs the node has) come from the engine that
// started it. MakeLearnerContract joins the two; ContractToEnv is the one writer of the
// environment a training script sees, ReadContract the one reader of it. Pure functions.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/launch/hosts.h"

namespace cadre::launch {

// What every slot of a job shares.
struct JobContract {
  std::string training_id;
  std::string name_prefix = "learner";
  std::string framework;  // "pytorch-horovod"
  std::string mode;       // "horovod", "ddl", "parameter-server" (ModeName)
  int learners = 1;
  int slots_per_learner = 1;
  int parameter_servers = 0;
  int gpus_per_learner = 0;  // the compute configuration's
  std::string store_address;
  std::string job_token;
  std::filesystem::path job_dir;    // RESULT_DIR
  std::filesystem::path data_dir;   // DATA_DIR
  std::filesystem::path model_dir;  // MODEL_DIR: where the command runs
  // Every learner's name and address; hosts[i].id == i + 1. Empty until the engine has placed
  // the learners (Slurm, Open MPI): the slot fills it from its engine's facts.
  std::vector<LearnerHost> hosts;
  // Names resolve for every program (a private /etc/hosts or real DNS); otherwise only through
  // the hosts file (CADRE_HOSTS), and plain programs are handed addresses.
  bool names_resolve = true;
  std::filesystem::path hosts_file;
  int cores = 1;  // cores of the machine the learners share (OMP_NUM_THREADS = cores / slots)
  // Which start of the job this is (CADRE_RESTART_COUNT) and the job's restart budget.
  int restart_count = 0;
  int max_restarts = 0;
  // Elastic jobs only (CADRE_ELASTIC_UPDATES): where the runner announces that lost learners
  // may return; hvd.elastic's commit reads it (ElasticUpdateJson). Empty otherwise.
  std::filesystem::path elastic_updates_file;

  bool is_server(int learner_id) const { return learner_id <= parameter_servers; }
  int total_slots() const { return learners * slots_per_learner; }
};

// What only the slot knows, from the engine that started it.
struct SlotFacts {
  int learner_id = 1;  // 1-based
  int local_rank = 0;
  // GPUs of the machine the slot runs on, and which of its learners this is there (1-based):
  // learner k of a machine owns GPUs (k-1)*G..k*G-1 (gpu_plan.h).
  int node_gpus = 0;
  int learner_on_node = 1;
  // GPU ids the engine handed the node (Slurm's CUDA_VISIBLE_DEVICES); empty: 0..node_gpus-1.
  std::vector<std::string> node_gpu_ids;
  // Cores the slot's share is taken from; 0: the job's `cores` split over every slot.
  int node_cores = 0;
};

struct LearnerContract {
  JobContract job;
  int learner_id = 1;
  int local_rank = 0;
  int gpu_count = 0;                        // GPU_COUNT
  std::optional<std::string> visible_gpus;  // CUDA_VISIBLE_DEVICES; nullopt: unset
  int omp_threads = 1;                      // OMP_NUM_THREADS

  int rank() const { return (learner_id - 1) * job.slots_per_learner + local_rank; }
  int size() const { return job.total_slots(); }
  const LearnerHost& me() const { return job.hosts.at(static_cast<size_t>(learner_id - 1)); }
};

// Joins the job's contract and a slot's facts; InvalidArgument when they do not fit together
// (a learner id or local rank out of range, hosts missing), naming the field.
Status MakeLearnerContract(const JobContract& job, const SlotFacts& slot, LearnerContract* out);

// The one writer: the contract's environment variables.
std::map<std::string, std::string> ContractToEnv(const LearnerContract& contract);

// The one reader: the contract back from a slot's environment. InvalidArgument naming the
// variable that is missing or malformed.
Status ReadContract(const std::map<std::string, std::string>& env, LearnerContract* out);

// The job's contract as JSON and back, for engines that start slots elsewhere.
std::string JobContractJson(const JobContract& job);
Status ParseJobContractJson(const std::string& text, JobContract* out);

// "learner-1" + address lines for /etc/hosts-style files.
std::vector<LearnerHost> NamedHosts(const std::string& prefix,
                                    const std::vector<std::string>& addresses);

}  // namespace cadre::launch
