#include "cadre/launch/cpu_binding.h"

#include <sched.h>

#include <cerrno>
#include <string>

#include "cadre/base/env.h"

namespace cadre::launch {

Status ParseCpuBind(std::string_view text, CpuBind* bind) {
  if (text.empty() || text == "auto") {
    *bind = CpuBind::kAuto;
  } else if (text == "none") {
    *bind = CpuBind::kNone;
  } else {
    return InvalidArgument("CADRE_CPU_BIND=\"" + std::string(text) + "\": use auto or none");
  }
  return Status::Ok();
}

std::vector<std::vector<int>> PlanCpuBinding(int slots, const std::vector<int>& usable,
                                             CpuBind bind) {
  const int cpus = static_cast<int>(usable.size());
  if (bind == CpuBind::kNone || slots < 1 || slots > cpus) return {};
  std::vector<std::vector<int>> plan(static_cast<size_t>(slots));
  for (int i = 0; i < slots; ++i) {
    // Share i is [i*C/S, (i+1)*C/S): sizes differ by at most one, together they cover C.
    for (int c = i * cpus / slots; c < (i + 1) * cpus / slots; ++c) {
      plan[static_cast<size_t>(i)].push_back(usable[static_cast<size_t>(c)]);
    }
  }
  return plan;
}

std::vector<int> UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

Status PlanCpuBindingFromEnv(int slots, std::vector<std::vector<int>>* plan) {
  CpuBind bind = CpuBind::kAuto;
  CADRE_RETURN_IF_ERROR(ParseCpuBind(GetEnv("CADRE_CPU_BIND").value_or(""), &bind));
  *plan = PlanCpuBinding(slots, UsableCpus(), bind);
  return Status::Ok();
}

int BindToCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  return sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : errno;
}

}  // namespace cadre::launch
