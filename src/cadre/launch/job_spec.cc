#include "cadre/launch/job_spec.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "cadre/base/printable.h"

namespace cadre::launch {
namespace {

// Names appear in status.json, log headers and the dashboard: one short line each.
constexpr size_t kMaxJobNameBytes = 256;
// A path in a problem is shown whole up to this (a value is cut at Quoted's 80 bytes).
constexpr size_t kMaxShownPathBytes = 1024;

std::string OriginOr(const std::string& origin, const char* fallback) {
  return origin.empty() ? fallback : origin;
}

// "1.13.0a0" -> "1.13"; "1.13.1-py3" -> "1.13"; "1" -> "1".
std::string MajorMinor(std::string_view version) {
  size_t first = version.find('.');
  if (first == std::string_view::npos) return std::string(version);
  size_t end = first + 1;
  while (end < version.size() && version[end] >= '0' && version[end] <= '9') ++end;
  return std::string(version.substr(0, end));
}

std::filesystem::path Resolve(const std::filesystem::path& base, const std::string& path) {
  std::filesystem::path p(path);
  return (p.is_absolute() ? p : base / p).lexically_normal();
}

}  // namespace

std::optional<JobSpec> BuildJobSpec(const JobRequest& request, const Installed& installed,
                                    Problems* problems) {
  size_t problems_before = problems->size();
  JobSpec spec;
  spec.manifest_text = request.manifest_text;
  spec.name = request.name.has_value() ? *request.name : "job";
  if (request.backend.has_value()) spec.backend = *request.backend;
  if (request.image.has_value()) spec.image = *request.image;
  if (spec.name.empty()) {
    problems->Add(request.name.origin, "must not be empty");
  } else if (spec.name.size() > kMaxJobNameBytes) {
    problems->Add(request.name.origin, "is " + std::to_string(spec.name.size()) +
                                           " bytes; at most " + std::to_string(kMaxJobNameBytes) +
                                           " are allowed");
  } else if (std::any_of(spec.name.begin(), spec.name.end(),
                         [](unsigned char c) { return c < 0x20 || c == 0x7f; })) {
    problems->Add(request.name.origin,
                  "must be one line of printable text (it holds a control character)");
  } else if (!IsUtf8(spec.name)) {
    problems->Add(request.name.origin, "must be UTF-8 text, got " + QuotedText(spec.name));
  }

  // Framework and its version.
  std::optional<Framework> framework;
  if (request.framework.unreadable) {
    // Already reported where it was read.
  } else if (!request.framework.has_value()) {
    problems->Add("framework.name", "missing (valid: " + FrameworkNames() + ")");
  } else if (!(framework = FindFramework(*request.framework))) {
    std::string hint = DidYouMean(*request.framework, FrameworkNameList());
    problems->Add(request.framework.origin,
                  "unknown framework " + QuotedText(*request.framework) +
                      (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                      "; valid: " + FrameworkNames());
  } else {
    spec.framework = *framework;
  }
  if (request.framework_version.has_value()) {
    spec.framework_version = *request.framework_version;
    if (framework && framework->torch) {
      std::string wanted = MajorMinor(*request.framework_version);
      if (!installed.torch_version) {
        problems->Add(request.framework_version.origin,
                      "PyTorch " + wanted +
                          " requested, but no python3 here can import torch (set CADRE_PYTHON "
                          "to an interpreter that has it)");
      } else if (MajorMinor(*installed.torch_version) != wanted) {
        problems->Add(request.framework_version.origin, QuotedText(*request.framework_version) +
                                                            " does not match the installed torch " +
                                                            MajorMinor(*installed.torch_version) +
                                                            " (" + installed.python + ")");
      }
    }
  }

  // Compute configuration: a name (WML, flags) or a GPU count (FfDL); default one CPU slot.
  std::optional<ComputeConfig> compute = FindComputeConfig("cpu");
  if (request.compute.has_value()) {
    compute = FindComputeConfig(*request.compute);
    if (!compute) {
      std::string hint = DidYouMean(*request.compute, ComputeConfigNameList());
      problems->Add(request.compute.origin,
                    "unknown compute configuration " + QuotedText(*request.compute) +
                        (hint.empty() ? "" : " (did you mean '" + hint + "'?)") +
                        "; valid: " + ComputeConfigNames());
    }
    if (request.gpus.has_value() && compute && compute->gpus != *request.gpus) {
      problems->Add(request.gpus.origin, "says " + std::to_string(*request.gpus) +
                                             " GPUs per learner but " + request.compute.origin +
                                             " " + QuotedText(*request.compute) + " has " +
                                             std::to_string(compute->gpus));
    }
  } else if (request.gpus.has_value()) {
    // Range first: a count past int would otherwise narrow to a small one (2^32 + 1 -> 1).
    compute = *request.gpus >= 0 && *request.gpus <= 64
                  ? ComputeConfigForGpus(static_cast<int>(*request.gpus))
                  : std::nullopt;
    if (!compute) {
      problems->Add(
          request.gpus.origin,
          std::to_string(*request.gpus) + " GPUs per learner is not offered (valid: 0, 1, 2, 4)");
    }
  }
  if (compute) spec.compute = *compute;
  if (request.compute.has_value()) {
    spec.compute_origin = request.compute.origin;
  } else if (request.gpus.has_value()) {
    spec.compute_origin = request.gpus.origin;
  }

  // Learners.
  int64_t nodes = request.nodes.has_value() ? *request.nodes : 1;
  std::string nodes_path = OriginOr(request.nodes.origin, "execution.compute_configuration.nodes");
  // A count that could not be read is reported already; checked against the default of 1 it
  // would only add wrong problems ("needs at least 2 learners, got 1").
  bool nodes_known = !request.nodes.unreadable;
  if (!nodes_known) {
    // Reported where it was read.
  } else if (nodes < 1) {
    problems->Add(nodes_path, "must be at least 1, got " + std::to_string(nodes));
  } else if (nodes > kMaxLearners) {
    problems->Add(nodes_path, "at most " + std::to_string(kMaxLearners) +
                                  " learners on the local backend, got " + std::to_string(nodes));
  } else if (framework && framework->mode != Mode::kParameterServer && nodes < 2) {
    problems->Add(nodes_path, "framework '" + std::string(framework->name) +
                                  "' is distributed and needs at least 2 learners, got " +
                                  std::to_string(nodes));
  }
  spec.nodes = static_cast<int>(std::clamp<int64_t>(nodes, 1, kMaxLearners));

  // Parameter servers: PS mode only; default 1 when there is room for a worker.
  bool ps_mode = framework && framework->mode == Mode::kParameterServer;
  if (request.parameter_servers.has_value()) {
    int64_t ps = *request.parameter_servers;
    if (framework && !ps_mode) {
      problems->Add(request.parameter_servers.origin,
                    "only for the parameter-server frameworks (pytorch, tensorflow), not '" +
                        std::string(framework->name) + "'");
    } else if (ps < 0) {
      problems->Add(request.parameter_servers.origin, "must not be negative");
    } else if (nodes_known && ps >= nodes) {
      problems->Add(request.parameter_servers.origin,
                    std::to_string(ps) + " parameter servers need more than " + std::to_string(ps) +
                        " learners (" + nodes_path + " is " + std::to_string(nodes) +
                        "), so that at least one is a worker");
    } else {
      spec.parameter_servers = static_cast<int>(ps);
    }
  } else if (ps_mode && nodes >= 2) {
    spec.parameter_servers = 1;
  }
  spec.slots_per_learner = ps_mode ? 1 : spec.compute.slots;

  // Restarts and elastic membership.
  if (request.max_restarts.has_value()) {
    int64_t n = *request.max_restarts;
    if (n < 0 || n > kMaxRestarts) {
      problems->Add(request.max_restarts.origin,
                    "must be 0.." + std::to_string(kMaxRestarts) + ", got " + std::to_string(n));
    } else {
      spec.max_restarts = static_cast<int>(n);
    }
  }
  spec.min_nodes = spec.nodes;
  if (request.min_nodes.has_value()) {
    int64_t m = *request.min_nodes;
    bool horovod = framework && framework->mode == Mode::kHorovod;
    if (!nodes_known) {
      // Its range is not known.
    } else if (m < 1 || m > nodes) {
      problems->Add(request.min_nodes.origin, "must be 1.." + std::to_string(nodes) + " (" +
                                                  nodes_path + "), got " + std::to_string(m));
    } else if (framework && m < nodes && !horovod) {
      problems->Add(request.min_nodes.origin,
                    "going on with fewer learners needs a Horovod framework (hvd.elastic), not '" +
                        std::string(framework->name) + "'");
    } else if (framework && framework->mode != Mode::kParameterServer && m < 2) {
      problems->Add(request.min_nodes.origin, "framework '" + std::string(framework->name) +
                                                  "' is distributed and needs at least 2 "
                                                  "learners, got " +
                                                  std::to_string(m));
    } else {
      spec.min_nodes = static_cast<int>(m);
      if (spec.elastic() && spec.max_restarts == 0 && !request.max_restarts.unreadable) {
        problems->Add(request.min_nodes.origin,
                      "going on with fewer learners is a restart: set max_restarts (or "
                      "--max-restarts) to at least 1");
      }
    }
  }

  if (request.rejoin_after.has_value()) {
    int64_t s = *request.rejoin_after;
    if (s < -1 || s > kMaxRejoinAfterS) {
      problems->Add(request.rejoin_after.origin, "must be -1 (never) or 0.." +
                                                     std::to_string(kMaxRejoinAfterS) +
                                                     " seconds, got " + std::to_string(s));
    } else if (!spec.elastic() && !request.min_nodes.unreadable && nodes_known) {
      problems->Add(request.rejoin_after.origin,
                    "taking a lost learner back needs an elastic job: set min_nodes (or "
                    "--min-nodes) below nodes");
    } else {
      spec.rejoin_after_s = static_cast<int>(s);
    }
  }

  // Command.
  if (request.command.unreadable) {
    // Already reported where it was read.
  } else if (!request.command.has_value() ||
             request.command->find_first_not_of(" \t\n") == std::string::npos) {
    problems->Add(OriginOr(request.command.origin, "execution.command"),
                  "missing: the command every learner runs");
  } else {
    spec.command = *request.command;
    spec.command_argv = request.command_argv;
  }

  spec.work_dir = request.base_dir.empty() ? std::filesystem::current_path() : request.base_dir;
  if (request.data_path.has_value()) {
    spec.data_dir = Resolve(spec.work_dir, *request.data_path);
    std::error_code ec;
    if (!std::filesystem::is_directory(spec.data_dir, ec)) {
      problems->Add(request.data_path.origin,
                    QuotedText(spec.data_dir.string(), kMaxShownPathBytes) + " is not a folder");
    }
  }
  spec.results_dir = request.results_path.has_value()
                         ? Resolve(spec.work_dir, *request.results_path)
                         : std::filesystem::current_path() / "runs";
  // Created when missing; a file there (or above it) failed only once the job was being set up,
  // as an I/O error naming neither the field nor the flag.
  for (std::filesystem::path p = spec.results_dir; !p.empty(); p = p.parent_path()) {
    std::error_code ec;
    const auto status = std::filesystem::status(p, ec);
    if (!std::filesystem::exists(status)) {
      if (p == p.parent_path()) break;
      continue;
    }
    if (!std::filesystem::is_directory(status)) {
      problems->Add(OriginOr(request.results_path.origin, "training_results_reference"),
                    QuotedText(p.string(), kMaxShownPathBytes) +
                        " is not a folder; job directories are created under it");
    }
    break;
  }

  if (problems->size() != problems_before) return std::nullopt;
  return spec;
}

}  // namespace cadre::launch
