#include "cadre/launch/gpu_plan.h"

#include <algorithm>
#include <charconv>
#include <set>

#include "cadre/base/printable.h"

namespace cadre::launch {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

int CountNvidiaSmiGpus(std::string_view output) {
  int n = 0;
  size_t start = 0;
  while (start < output.size()) {
    size_t end = std::min(output.find('\n', start), output.size());
    if (output.substr(start, end - start).starts_with("GPU ")) ++n;
    start = end + 1;
  }
  return n;
}

Status UsableGpus(int physical, std::string_view source, std::optional<std::string_view> visible,
                  MachineGpus* out) {
  MachineGpus gpus;
  gpus.count = std::max(physical, 0);
  gpus.source = std::string(source);
  if (gpus.count == 0 || !visible) {
    *out = std::move(gpus);
    return Status::Ok();
  }
  const std::string shown = "CUDA_VISIBLE_DEVICES=" + QuotedText(*visible);
  std::vector<std::string> ids;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= visible->size()) {
    size_t comma = std::min(visible->find(',', start), visible->size());
    std::string_view entry = Trim(visible->substr(start, comma - start));
    start = comma + 1;
    if (entry.empty()) continue;  // "" lists none: it hides every GPU
    if (entry == "-1") break;     // CUDA's list ends there
    int index = -1;
    auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), index);
    bool is_index = ec == std::errc() && end == entry.data() + entry.size();
    if (is_index ? (index < 0 || index >= gpus.count)
                 : !(entry.starts_with("GPU-") || entry.starts_with("MIG-"))) {
      return InvalidArgument(shown + ": " + QuotedText(entry) + " names no GPU of this machine (" +
                             std::to_string(gpus.count) + " GPU(s) by " + gpus.source +
                             "; entries are 0.." + std::to_string(gpus.count - 1) +
                             " or GPU-/MIG- UUIDs)");
    }
    std::string id(is_index ? std::to_string(index) : std::string(entry));
    if (!seen.insert(id).second) {
      return InvalidArgument(shown + ": GPU " + QuotedText(id) + " is listed twice");
    }
    ids.push_back(std::move(id));
  }
  gpus.count = static_cast<int>(ids.size());
  gpus.ids = std::move(ids);
  gpus.source = shown;
  if (gpus.count == 0) gpus.hidden_by = std::string(*visible);
  *out = std::move(gpus);
  return Status::Ok();
}

Status CheckMachineGpus(const MachineGpus& machine, int gpus_per_learner, int gpu_learners,
                        std::string_view compute_name, int parameter_servers) {
  const long wanted = static_cast<long>(gpus_per_learner) * gpu_learners;
  if (machine.count <= 0 || wanted <= machine.count) return Status::Ok();
  const std::string servers = parameter_servers > 0 ? " (the " + std::to_string(parameter_servers) +
                                                          " parameter server(s) take none)"
                                                    : "";
  return InvalidArgument("compute configuration '" + std::string(compute_name) + "' asks for " +
                         std::to_string(gpus_per_learner) + " GPU(s) per learner x " +
                         std::to_string(gpu_learners) + " learner(s)" + servers + " = " +
                         std::to_string(wanted) + " GPUs, but this machine has " +
                         std::to_string(machine.count) + " (" + machine.source +
                         "): run fewer learners, a configuration with fewer "
                         "GPUs per learner, or a cpu configuration");
}

std::optional<std::string> VisibleGpus(int machine_gpus, int gpus_per_learner, int learner_id) {
  if (machine_gpus <= 0) return std::nullopt;
  std::string devices;
  for (int i = 0; i < gpus_per_learner; ++i) {
    if (!devices.empty()) devices += ",";
    devices += std::to_string((learner_id - 1) * gpus_per_learner + i);
  }
  return devices;
}

}  // namespace cadre::launch
