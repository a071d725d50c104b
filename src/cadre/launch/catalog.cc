#include "cadre/launch/catalog.h"

#include <array>

namespace cadre::launch {
namespace {

// TensorFlow names select the same three modes: the runner is framework-agnostic.
constexpr std::array kFrameworks = {
    Framework{"pytorch", Mode::kParameterServer, true},
    Framework{"pytorch-ddl", Mode::kDdl, true},
    Framework{"pytorch-horovod", Mode::kHorovod, true},
    Framework{"tensorflow", Mode::kParameterServer, false},
    Framework{"tensorflow-ddl", Mode::kDdl, false},
    Framework{"tensorflow-horovod", Mode::kHorovod, false},
};

// The seed service's GPU configurations, plus CPU-only ones for machines without GPUs.
constexpr std::array kComputeConfigs = {
    ComputeConfig{"k80", 1, 1},    ComputeConfig{"k80x2", 2, 2},  ComputeConfig{"k80x4", 4, 4},
    ComputeConfig{"p100", 1, 1},   ComputeConfig{"p100x2", 2, 2}, ComputeConfig{"v100", 1, 1},
    ComputeConfig{"v100x2", 2, 2}, ComputeConfig{"cpu", 0, 1},    ComputeConfig{"cpux2", 0, 2},
    ComputeConfig{"cpux4", 0, 4},
};

template <typename Table>
std::string JoinNames(const Table& table) {
  std::string out;
  for (const auto& entry : table) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

}  // namespace

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kParameterServer:
      return "parameter-server";
    case Mode::kDdl:
      return "ddl";
    case Mode::kHorovod:
      return "horovod";
  }
  return "unknown";
}

std::optional<Framework> FindFramework(std::string_view name) {
  for (const auto& f : kFrameworks) {
    if (f.name == name) return f;
  }
  return std::nullopt;
}

std::optional<ComputeConfig> FindComputeConfig(std::string_view name) {
  for (const auto& c : kComputeConfigs) {
    if (c.name == name) return c;
  }
  return std::nullopt;
}

std::optional<ComputeConfig> ComputeConfigForGpus(int gpus) {
  for (const auto& c : kComputeConfigs) {
    if (c.gpus == gpus && (gpus > 0 ? c.name.starts_with("k80") : c.name == "cpu")) return c;
  }
  return std::nullopt;
}

std::vector<std::string_view> FrameworkNameList() {
  std::vector<std::string_view> names;
  for (const auto& f : kFrameworks) names.push_back(f.name);
  return names;
}

std::vector<std::string_view> ComputeConfigNameList() {
  std::vector<std::string_view> names;
  for (const auto& c : kComputeConfigs) names.push_back(c.name);
  return names;
}

std::string FrameworkNames() { return JoinNames(kFrameworks); }
std::string ComputeConfigNames() { return JoinNames(kComputeConfigs); }

}  // namespace cadre::launch
