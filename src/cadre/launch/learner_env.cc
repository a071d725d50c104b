#include "cadre/launch/learner_env.h"

#include <algorithm>
#include <cstdlib>

#include "cadre/launch/process.h"

namespace cadre::launch {
namespace {

namespace fs = std::filesystem;

std::string Str(int v) { return std::to_string(v); }

}  // namespace

fs::path LearnerDir(const JobLayout& layout, int learner_id) {
  return layout.job_dir / ("learner-" + Str(learner_id));
}

fs::path SlotLogPath(const JobLayout& layout, int learner_id, int local_rank) {
  return LearnerDir(layout, learner_id) / ("slot-" + Str(local_rank) + ".log");
}

std::string ElasticUpdateJson(std::optional<int> learners) {
  if (!learners) return "{}\n";
  return "{\"learners\": " + Str(*learners) + ", \"exit_code\": " + Str(kRejoinExitCode) + "}\n";
}

JobContract JobContractOf(const JobSpec& spec, const JobLayout& layout) {
  JobContract job;
  job.training_id = layout.training_id;
  job.name_prefix = layout.name_prefix;
  job.framework = std::string(spec.framework.name);
  job.mode = std::string(ModeName(spec.framework.mode));
  job.learners = spec.nodes;
  job.slots_per_learner = spec.slots_per_learner;
  job.parameter_servers = spec.parameter_servers;
  job.gpus_per_learner = spec.compute.gpus;
  job.store_address = layout.store_address;
  job.job_token = layout.job_token;
  job.job_dir = layout.job_dir;
  job.data_dir = layout.data_dir;
  job.model_dir = spec.work_dir;
  // The learners of this start: fewer than the layout's after an elastic restart.
  job.hosts.assign(layout.hosts.begin(),
                   layout.hosts.begin() + std::min<ptrdiff_t>(spec.nodes, layout.hosts.size()));
  // Names resolve through getaddrinfo only with a private /etc/hosts; otherwise hand out
  // addresses wherever a plain program would need to resolve.
  job.names_resolve = layout.hosts_method != HostsMethod::kCadreHosts;
  job.hosts_file = layout.hosts_file;
  job.cores = layout.machine_cores;
  job.restart_count = layout.restart_count;
  job.max_restarts = spec.max_restarts;
  job.elastic_updates_file = layout.elastic_updates_file;
  return job;
}

std::map<std::string, std::string> ContractEnv(const JobSpec& spec, const JobLayout& layout,
                                               int learner_id, int local_rank) {
  // Every learner of the local backend is on this machine: learner k owns its k-th GPU share,
  // counted after the parameter servers, which take none (gpu_plan.h).
  SlotFacts slot;
  slot.learner_id = learner_id;
  slot.local_rank = local_rank;
  slot.node_gpus = layout.gpus.count;
  slot.node_gpu_ids = layout.gpus.ids;
  slot.learner_on_node = spec.is_server(learner_id) ? 1 : learner_id - spec.parameter_servers;
  LearnerContract contract;
  ThrowIfError(MakeLearnerContract(JobContractOf(spec, layout), slot, &contract));
  auto env = ContractToEnv(contract);
  // The runner's own CUDA_VISIBLE_DEVICES hides every GPU: so it does for the slots.
  if (layout.gpus.hidden_by) env["CUDA_VISIBLE_DEVICES"] = *layout.gpus.hidden_by;
  return env;
}

std::vector<std::string> SlotEnvironment(const JobSpec& spec, const JobLayout& layout,
                                         int learner_id, int local_rank,
                                         const std::vector<std::string>& base) {
  return MergeSlotEnvironment(ContractEnv(spec, layout, learner_id, local_rank),
                              layout.python_bin_dir, layout.python_path, base);
}

std::vector<std::string> MergeSlotEnvironment(const std::map<std::string, std::string>& contract,
                                              const std::filesystem::path& python_bin_dir,
                                              const std::string& python_path,
                                              const std::vector<std::string>& base) {
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
  prepend("PATH", python_bin_dir.string());
  prepend("PYTHONPATH", python_path);
  // Python buffers print() into a pipe: a learner's lines would reach its log late, in 8 KiB
  // blocks, and be lost whenever the runner stops it (SIGTERM ends Python without flushing).
  // The user's own setting stands.
  if (!merged.contains("PYTHONUNBUFFERED")) merged["PYTHONUNBUFFERED"] = "1";
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

Status DetectMachineGpus(MachineGpus* out) {
  int physical = 0;
  std::string source = "nvidia-smi -L";
  CaptureResult result;
  if (RunAndCapture({"nvidia-smi", "-L"}, std::chrono::seconds(10), &result).ok() &&
      result.exit_code == 0) {
    physical = CountNvidiaSmiGpus(result.output);
  } else {
    source = "/dev/nvidia<N>";
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator("/dev", ec)) {
      std::string name = entry.path().filename().string();
      if (name.size() > 6 && name.starts_with("nvidia") &&
          std::all_of(name.begin() + 6, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        ++physical;
      }
    }
  }
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  return UsableGpus(physical, source,
                    visible != nullptr ? std::optional<std::string_view>(visible) : std::nullopt,
                    out);
}

}  // namespace cadre::launch
