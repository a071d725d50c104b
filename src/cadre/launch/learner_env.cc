#include "cadre/launch/learner_env.h"

#include <algorithm>

#include "cadre/launch/gpu_plan.h"
#include "cadre/launch/process.h"

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

std::string Str(int v) { return std::to_string(v); }

// TF_CONFIG for the parameter-server mode: servers are "ps", the rest "worker".
std::string TfConfig(const JobSpec& spec, const JobLayout& layout, int learner_id, bool use_names) {
  auto endpoint = [&](const LearnerHost& h) {
    return "\"" + (use_names ? h.name : h.address) + ":" + Str(kLearnerPort) + "\"";
  };
  std::string ps, workers;
  for (const auto& h : layout.hosts) {
    std::string& list = spec.is_server(h.id) ? ps : workers;
    if (!list.empty()) list += ",";
    list += endpoint(h);
  }
  bool server = spec.is_server(learner_id);
  int index = server ? learner_id - 1 : learner_id - 1 - spec.parameter_servers;
  return "{\"cluster\":{\"ps\":[" + ps + "],\"worker\":[" + workers + "]},\"task\":{\"type\":\"" +
         (server ? "ps" : "worker") + "\",\"index\":" + Str(index) + "}}";
}

}  // namespace

fs::path LearnerDir(const JobLayout& layout, int learner_id) {
  return layout.job_dir / ("learner-" + Str(learner_id));
}

fs::path SlotLogPath(const JobLayout& layout, int learner_id, int local_rank) {
  return LearnerDir(layout, learner_id) / ("slot-" + Str(local_rank) + ".log");
}

std::map<std::string, std::string> ContractEnv(const JobSpec& spec, const JobLayout& layout,
                                               int learner_id, int local_rank) {
  const int slots = spec.slots_per_learner;
  const int rank = (learner_id - 1) * slots + local_rank;
  const int size = spec.total_slots();
  const LearnerHost& me = layout.hosts.at(static_cast<size_t>(learner_id - 1));
  const LearnerHost& first = layout.hosts.front();
  // Names resolve through getaddrinfo only with a private /etc/hosts; otherwise hand out
  // addresses wherever a plain program would need to resolve.
  const bool names_resolve = layout.hosts_method != HostsMethod::kCadreHosts;
  const int gpus = layout.machine_gpus > 0 ? spec.compute.gpus : 0;

  std::map<std::string, std::string> env = {
      {"LEARNER_ID", Str(learner_id)},
      {"NUM_LEARNERS", Str(spec.nodes)},
      {"LEARNER_NAME_PREFIX", layout.name_prefix},
      {"GPU_COUNT", Str(gpus)},
      {"TRAINING_ID", layout.training_id},
      {"DATA_DIR", layout.data_dir.string()},
      {"RESULT_DIR", layout.job_dir.string()},
      {"LOG_DIR", LearnerDir(layout, learner_id).string()},
      {"CHECKPOINT_DIR", (layout.job_dir / "checkpoints").string()},
      {"MODEL_DIR", spec.work_dir.string()},
      {"JOB_STATE_DIR", (layout.job_dir / "state").string()},
      {"CADRE_HOST", me.name},
      {"CADRE_LEARNER_ADDRESS", me.address},
      {"CADRE_RANK", Str(rank)},
      {"CADRE_SIZE", Str(size)},
      {"CADRE_LOCAL_RANK", Str(local_rank)},
      {"CADRE_LOCAL_SIZE", Str(slots)},
      {"CADRE_CROSS_RANK", Str(learner_id - 1)},
      {"CADRE_CROSS_SIZE", Str(spec.nodes)},
      {"CADRE_STORE", layout.store_address},
      {"CADRE_JOB_TOKEN", layout.job_token},
      {"CADRE_FRAMEWORK", std::string(spec.framework.name)},
      {"CADRE_MODE", std::string(ModeName(spec.framework.mode))},
      {"HOROVOD_RANK", Str(rank)},
      {"HOROVOD_SIZE", Str(size)},
      {"HOROVOD_LOCAL_RANK", Str(local_rank)},
      {"HOROVOD_LOCAL_SIZE", Str(slots)},
      {"HOROVOD_CROSS_RANK", Str(learner_id - 1)},
      {"HOROVOD_CROSS_SIZE", Str(spec.nodes)},
      {"HOROVOD_HOSTNAME", me.name},
      {"RANK", Str(rank)},
      {"WORLD_SIZE", Str(size)},
      {"LOCAL_RANK", Str(local_rank)},
      {"LOCAL_WORLD_SIZE", Str(slots)},
      {"GROUP_RANK", Str(learner_id - 1)},
      {"MASTER_ADDR", names_resolve ? first.name : first.address},
      {"MASTER_PORT", Str(kMasterPort)},
      // Each slot gets an equal share of the cores, so N slots do not run N x cores threads.
      {"OMP_NUM_THREADS", Str(std::max(1, layout.machine_cores / std::max(1, size)))},
  };
  if (!names_resolve) env["CADRE_HOSTS"] = layout.hosts_file.string();
  if (spec.framework.mode == Mode::kParameterServer) {
    env["PS_HOSTS_COUNT"] = Str(spec.parameter_servers);
    env["CADRE_ROLE"] = spec.is_server(learner_id) ? "ps" : "worker";
    env["TF_CONFIG"] = TfConfig(spec, layout, learner_id, names_resolve);
  }
  // The learner's GPUs, slot k's own being device k (gpu_plan.h).
  if (auto visible = VisibleGpus(layout.machine_gpus, gpus, learner_id)) {
    env["CUDA_VISIBLE_DEVICES"] = *visible;
  }
  return env;
}

std::vector<std::string> SlotEnvironment(const JobSpec& spec, const JobLayout& layout,
                                         int learner_id, int local_rank,
                                         const std::vector<std::string>& base) {
  auto contract = ContractEnv(spec, layout, learner_id, local_rank);
  std::map<std::string, std::string> merged;
  for (const auto& entry : base) {
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    merged[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  auto prepend = [&](const std::string& key, const std::string& first) {
    if (first.empty()) return;
    auto it = merged.find(key);
    merged[key] = (it == merged.end() || it->second.empty()) ? first : first + ":" + it->second;
  };
  if (!merged.contains("PATH")) merged["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  prepend("PATH", layout.python_bin_dir.string());
  prepend("PYTHONPATH", layout.python_path);
  // A learner must not inherit another job's contract (cadre run inside a learner).
  if (!contract.contains("CADRE_HOSTS")) merged.erase("CADRE_HOSTS");
  for (const char* key : {"CUDA_VISIBLE_DEVICES", "TF_CONFIG", "PS_HOSTS_COUNT", "CADRE_ROLE"}) {
    if (!contract.contains(key)) merged.erase(key);
  }
  for (auto& [k, v] : contract) merged[k] = v;
  std::vector<std::string> out;
  out.reserve(merged.size());
  for (auto& [k, v] : merged) out.push_back(k + "=" + v);
  return out;
}

int CountMachineGpus() {
  CaptureResult result;
  if (RunAndCapture({"nvidia-smi", "-L"}, std::chrono::seconds(10), &result).ok() &&
      result.exit_code == 0) {
    return static_cast<int>(std::count(result.output.begin(), result.output.end(), '\n'));
  }
  int n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/dev", ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") &&
        std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      ++n;
    }
  }
  return n;
}

}  // namespace cadre::launch
