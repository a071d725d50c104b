// What an engine tells each process it starts, turned into the slot's place in the job: which
// learner (one node each), which local rank, and the nodes in learner order. Pure functions of
// the process's environment, so the mapping is tested without a cluster.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::backends {

using EnvMap = std::map<std::string, std::string>;

struct EngineSlot {
  int learner_index = 0;  // 0-based: LEARNER_ID - 1
  int local_rank = 0;
  int tasks_per_node = 0;
  std::vector<std::string> nodes;    // node names; nodes[i] runs learner i + 1
  std::vector<std::string> gpu_ids;  // GPUs the engine gave this node (CUDA_VISIBLE_DEVICES)
};

// Slurm: SLURM_NODEID (the node's index in the job), SLURM_LOCALID, SLURM_NTASKS_PER_NODE,
// SLURM_JOB_NODELIST (Slurm's host list, expanded in order; zero padding kept) and the
// CUDA_VISIBLE_DEVICES Slurm sets for --gres=gpu:N. InvalidArgument naming the variable.
Status SlurmSlotFromEnv(const EnvMap& env, EngineSlot* out);

// Open MPI, mapped one learner per host with --map-by ppr:<slots>:node: OMPI_COMM_WORLD_RANK,
// OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE; the node names are the hostfile's
// hosts, in order.
Status MpiSlotFromEnv(const EnvMap& env, const std::vector<std::string>& hosts, EngineSlot* out);

// The hosts of an Open MPI hostfile, in order ("node1 slots=2" -> node1); comments and blank
// lines skipped. InvalidArgument naming the line for a malformed one, or for a host listed twice
// (one learner runs on each host).
Status ParseHostfile(const std::string& text, std::vector<std::string>* hosts);

}  // namespace cadre::backends
