#include "cadre/backends/engine_facts.h"

#include <charconv>
#include <sstream>

#include "cadre/backends/hostlist.h"

namespace cadre::backends {
namespace {

Status Int(const EnvMap& env, const char* key, int* out) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) {
    return InvalidArgument(std::string(key) + " is not set: was this started by the engine?");
  }
  const std::string& v = it->second;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *out);
  if (ec != std::errc() || end != v.data() + v.size() || *out < 0) {
    return InvalidArgument(std::string(key) + "='" + v + "' is not a count");
  }
  return Status::Ok();
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

}  // namespace

Status SlurmSlotFromEnv(const EnvMap& env, EngineSlot* out) {
  EngineSlot slot;
  CADRE_RETURN_IF_ERROR(Int(env, "SLURM_NODEID", &slot.learner_index));
  CADRE_RETURN_IF_ERROR(Int(env, "SLURM_LOCALID", &slot.local_rank));
  CADRE_RETURN_IF_ERROR(Int(env, "SLURM_NTASKS_PER_NODE", &slot.tasks_per_node));
  auto list = env.find("SLURM_JOB_NODELIST");
  if (list == env.end() || list->second.empty()) {
    return InvalidArgument("SLURM_JOB_NODELIST is not set: was this started by srun?");
  }
  CADRE_RETURN_IF_ERROR(
      ExpandHostlist(list->second, &slot.nodes).WithContext("SLURM_JOB_NODELIST"));
  if (static_cast<size_t>(slot.learner_index) >= slot.nodes.size()) {
    return InvalidArgument("SLURM_NODEID=" + std::to_string(slot.learner_index) + " but " +
                           "SLURM_JOB_NODELIST names " + std::to_string(slot.nodes.size()) +
                           " nodes");
  }
  if (slot.local_rank >= slot.tasks_per_node) {
    return InvalidArgument(
        "SLURM_LOCALID=" + std::to_string(slot.local_rank) +
        " is not below SLURM_NTASKS_PER_NODE=" + std::to_string(slot.tasks_per_node));
  }
  if (auto gpus = env.find("CUDA_VISIBLE_DEVICES"); gpus != env.end()) {
    slot.gpu_ids = SplitCommas(gpus->second);
  }
  *out = std::move(slot);
  return Status::Ok();
}

Status MpiSlotFromEnv(const EnvMap& env, const std::vector<std::string>& hosts, EngineSlot* out) {
  EngineSlot slot;
  int rank = 0;
  CADRE_RETURN_IF_ERROR(Int(env, "OMPI_COMM_WORLD_RANK", &rank));
  CADRE_RETURN_IF_ERROR(Int(env, "OMPI_COMM_WORLD_LOCAL_RANK", &slot.local_rank));
  CADRE_RETURN_IF_ERROR(Int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", &slot.tasks_per_node));
  if (slot.tasks_per_node == 0 || slot.local_rank >= slot.tasks_per_node) {
    return InvalidArgument(
        "OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(slot.local_rank) +
        " is not below OMPI_COMM_WORLD_LOCAL_SIZE=" + std::to_string(slot.tasks_per_node));
  }
  // Ranks fill each node in turn (--map-by ppr:<slots>:node), so the node is rank / slots.
  slot.learner_index = rank / slot.tasks_per_node;
  if (rank % slot.tasks_per_node != slot.local_rank) {
    return InvalidArgument("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) +
                           " and OMPI_COMM_WORLD_LOCAL_RANK=" + std::to_string(slot.local_rank) +
                           " do not fit one node per learner (mpirun --map-by ppr:N:node)");
  }
  slot.nodes = hosts;
  if (static_cast<size_t>(slot.learner_index) >= slot.nodes.size()) {
    return InvalidArgument("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + " is on node " +
                           std::to_string(slot.learner_index + 1) + " but the hostfile lists " +
                           std::to_string(hosts.size()));
  }
  if (auto gpus = env.find("CUDA_VISIBLE_DEVICES"); gpus != env.end()) {
    slot.gpu_ids = SplitCommas(gpus->second);
  }
  *out = std::move(slot);
  return Status::Ok();
}

Status ParseHostfile(const std::string& text, std::vector<std::string>* hosts) {
  std::vector<std::string> out;
  std::map<std::string, int> line_of;  // each host's line
  std::stringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::stringstream words(line);
    std::string host, word;
    if (!(words >> host)) continue;
    while (words >> word) {
      if (!word.starts_with("slots=") && !word.starts_with("max_slots=") &&
          !word.starts_with("max-slots=")) {
        return InvalidArgument("hostfile line " + std::to_string(number) + ": '" + word +
                               "' is not slots=N or max_slots=N");
      }
    }
    // Open MPI would add the lines' slots together; cadre runs one learner on each host.
    if (auto [at, added] = line_of.emplace(host, number); !added) {
      return InvalidArgument("hostfile line " + std::to_string(number) + ": host " + host +
                             " is listed again (first on line " + std::to_string(at->second) +
                             "); each learner needs a host of its own, listed once");
    }
    out.push_back(host);
  }
  if (out.empty()) return InvalidArgument("the hostfile lists no hosts");
  *hosts = std::move(out);
  return Status::Ok();
}

}  // namespace cadre::backends
