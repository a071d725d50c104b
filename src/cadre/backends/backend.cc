#include "cadre/backends/backend.h"

#include <unistd.h>

#include <algorithm>

#include "cadre/backends/k8s_backend.h"
#include "cadre/backends/mpi_backend.h"
#include "cadre/backends/slurm_backend.h"

namespace cadre::backends {
namespace {

class LocalBackend : public Backend {
 public:
  std::string_view name() const override { return "local"; }
  Status CheckEngine() const override { return Status::Ok(); }
  // GPUs: a job that asks for more than this machine has is refused before anything starts.
  Status CheckJob(const launch::JobSpec& spec) const override {
    launch::MachineGpus gpus;
    return launch::CheckLocalGpus(spec, &gpus);
  }
  Status Run(const launch::JobSpec& spec, const launch::RunOptions& options,
             launch::JobOutcome* outcome) override {
    return launch::RunLocalJob(spec, options, outcome);
  }
};

bool OnPath(const std::string& program) {
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = std::min(dirs.find(':', start), dirs.size());
    std::string dir = dirs.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    if (access((dir + "/" + program).c_str(), X_OK) == 0) return true;
    start = colon + 1;
  }
  return false;
}

}  // namespace

Status ParseBackendKind(std::string_view name, BackendKind* kind) {
  // The short name of `cadre k8s render` and of kubectl's own users.
  if (name == "k8s") name = "kubernetes";
  for (BackendKind k :
       {BackendKind::kLocal, BackendKind::kSlurm, BackendKind::kMpi, BackendKind::kKubernetes}) {
    if (name == BackendName(k)) {
      *kind = k;
      return Status::Ok();
    }
  }
  return InvalidArgument("'" + std::string(name) +
                         "' is not a backend: local, slurm, mpi or kubernetes (k8s)");
}

std::vector<MisplacedFlag> FlagsForOtherEngines(BackendKind kind, const EngineFlagsGiven& given) {
  struct Rule {
    const char* flag;
    bool EngineFlagsGiven::*given;
    std::vector<BackendKind> engines;
  };
  const Rule rules[] = {
      {"--partition", &EngineFlagsGiven::partition, {BackendKind::kSlurm}},
      {"--time-limit", &EngineFlagsGiven::time_limit, {BackendKind::kSlurm}},
      {"--hostfile", &EngineFlagsGiven::hostfile, {BackendKind::kMpi}},
      {"--store-host", &EngineFlagsGiven::store_host, {BackendKind::kSlurm, BackendKind::kMpi}},
      {"--queue-timeout",
       &EngineFlagsGiven::queue_timeout,
       {BackendKind::kSlurm, BackendKind::kKubernetes}},
      {"--namespace", &EngineFlagsGiven::name_space, {BackendKind::kKubernetes}},
      {"--heartbeat-timeout",
       &EngineFlagsGiven::heartbeat_timeout,
       {BackendKind::kSlurm, BackendKind::kMpi}},
  };
  std::vector<MisplacedFlag> misplaced;
  for (const Rule& rule : rules) {
    if (!(given.*rule.given) ||
        std::find(rule.engines.begin(), rule.engines.end(), kind) != rule.engines.end()) {
      continue;
    }
    std::string engines;
    for (size_t i = 0; i < rule.engines.size(); ++i) {
      engines += (i == 0 ? "" : " or ") + std::string(BackendName(rule.engines[i]));
    }
    misplaced.push_back(
        {rule.flag, "is for --backend " + engines + ", not " + std::string(BackendName(kind))});
  }
  return misplaced;
}

Status ParseHeartbeatTimeout(double seconds, std::chrono::milliseconds* timeout) {
  if (!(seconds == 0 || (seconds >= 1 && seconds <= 86400))) {
    return InvalidArgument("must be 0 (no heartbeats) or 1..86400 seconds, got " +
                           std::to_string(seconds));
  }
  *timeout = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  return Status();
}

std::string_view BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kLocal:
      return "local";
    case BackendKind::kSlurm:
      return "slurm";
    case BackendKind::kMpi:
      return "mpi";
    case BackendKind::kKubernetes:
      return "kubernetes";
  }
  return "?";
}

Status RequirePrograms(std::string_view engine, std::initializer_list<const char*> programs) {
  for (const char* p : programs) {
    if (!OnPath(p)) {
      return {Code::kUnavailable, "the " + std::string(engine) + " backend needs `" +
                                      std::string(p) +
                                      "`, which is not on PATH: install the engine's client "
                                      "commands here, or choose another --backend"};
    }
  }
  return Status::Ok();
}

std::unique_ptr<Backend> MakeBackend(const BackendOptions& options) {
  switch (options.kind) {
    case BackendKind::kSlurm:
      return MakeSlurmBackend(options);
    case BackendKind::kMpi:
      return MakeMpiBackend(options);
    case BackendKind::kKubernetes:
      return MakeKubernetesBackend(options);
    case BackendKind::kLocal:
      break;
  }
  return std::make_unique<LocalBackend>();
}

}  // namespace cadre::backends
