// The Open MPI backend: `cadre run --backend mpi --hostfile FILE`. mpirun starts the job's slots
// on the hostfile's hosts, one learner per host in order (--map-by ppr:<slots>:node), each as
// `cadre task --engine mpi`, which maps Open MPI's rank variables into the learner contract
// (task.h). mpirun reaches the hosts the way it always does (ssh, or its plm_rsh_agent), so
// nothing is asked of the user beyond what mpirun already uses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cadre/backends/backend.h"

namespace cadre::backends {

// mpirun's command line for the job.
std::vector<std::string> MpirunCommand(const launch::JobSpec& spec,
                                       const std::filesystem::path& job_dir,
                                       const std::filesystem::path& program, bool as_root);

// The rank mpirun's output says ended first and failed ("mpirun noticed that process rank 3 with
// PID ... exited on signal 9"); none when it does not say.
std::optional<int> FirstFailedRank(const std::string& mpirun_output);

std::unique_ptr<Backend> MakeMpiBackend(const BackendOptions& options);

}  // namespace cadre::backends
