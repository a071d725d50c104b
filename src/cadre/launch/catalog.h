// The names a manifest may use: frameworks (and the distribution mode each selects) and compute
// configurations (slots and GPUs per learner). These tables are the single source of truth for
// validation messages ("valid: ...") and for docs/manifest.md.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cadre::launch {

// How a job distributes training; it decides the slots per learner and the aliases in the env.
enum class Mode {
  kParameterServer,  // `pytorch`: one process per learner, the first learners serve parameters
  kDdl,              // `pytorch-ddl`: GPU_COUNT slots per learner, hierarchical allreduce
  kHorovod,          // `pytorch-horovod`: GPU_COUNT slots per learner, ring allreduce
};

std::string_view ModeName(Mode mode);

struct Framework {
  std::string_view name;  // as written in a manifest
  Mode mode;
  bool torch;  // PyTorch: framework.version is checked against the installed torch
};

struct ComputeConfig {
  std::string_view name;
  int gpus;   // GPUs per learner (0 for the cpu configurations)
  int slots;  // processes per learner in the allreduce modes
};

// Exact-name lookups; nullopt for an unknown name.
std::optional<Framework> FindFramework(std::string_view name);
std::optional<ComputeConfig> FindComputeConfig(std::string_view name);

// The compute configuration with `gpus` GPUs per learner, as the FfDL shape's `gpus:` selects
// ("k80"-family names are used for GPU counts, "cpu" for 0). nullopt when no config has that many.
std::optional<ComputeConfig> ComputeConfigForGpus(int gpus);

// Every valid name, in table order (for "did you mean").
std::vector<std::string_view> FrameworkNameList();
std::vector<std::string_view> ComputeConfigNameList();

// "pytorch, pytorch-ddl, ..." for error messages.
std::string FrameworkNames();
std::string ComputeConfigNames();

}  // namespace cadre::launch
