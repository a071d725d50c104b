// The Slurm backend: `cadre run --backend slurm`. One sbatch job per cadre job: one node per
// learner, --ntasks-per-node = slots, --gres=gpu:G from the compute configuration, the job's name
// and time limit; its one step is `srun cadre task --engine slurm`, so every slot maps Slurm's
// facts into the learner contract (task.h). Followed with `scontrol show job` (no accounting
// needed), cancelled with `scancel`.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cadre/backends/backend.h"

namespace cadre::backends {

// The batch script for the job: `program` is the cadre binary the nodes run.
std::string SlurmBatchScript(const launch::JobSpec& spec, const BackendOptions& options,
                             const std::filesystem::path& job_dir,
                             const std::filesystem::path& program);

// A --time-limit as sbatch's --time takes it: "minutes", "minutes:seconds",
// "hours:minutes:seconds", "days-hours", "days-hours:minutes", "days-hours:minutes:seconds", or
// 0, "UNLIMITED", "INFINITE" (no limit) -> whole minutes (seconds round up, so a limit is never
// 0), at most a year. InvalidArgument saying the forms otherwise ("must be 0 ..." when negative).
Status ParseTimeLimit(std::string_view text, int* minutes);

// Fields of `scontrol show job -o` output ("JobState=RUNNING ..."): the value of `key`, "" when
// absent.
std::string ScontrolField(const std::string& line, const std::string& key);

// Which of `job_nodes` (learner K on the K-th) failed, for a job that ended NODE_FAIL: those that
// `scontrol show node -o` output shows down or not responding ("node node2 (learner-2) is DOWN
// (Reason=...)"), and those srun's lines in the batch output name ("srun: error: Node failure on
// node2": a node that failed and has come back since); several joined by "; ".
std::string LostNodes(const std::string& scontrol_nodes, const std::string& batch_output,
                      const std::vector<std::string>& job_nodes);

std::unique_ptr<Backend> MakeSlurmBackend(const BackendOptions& options);

// The CPUs of the cluster's nodes (`sinfo -h -o %C`: allocated/idle/other/total), for a job
// service that shares the cluster: what it may admit at once.
Status SlurmClusterCpus(int64_t* cpus);
// The total of one `sinfo -o %C` line; InvalidArgument when it is not A/I/O/T.
Status ParseSinfoCpus(const std::string& line, int64_t* total);

}  // namespace cadre::backends
