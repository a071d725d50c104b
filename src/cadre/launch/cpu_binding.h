// Binding a job's slots to CPUs on one machine, as mpirun does by default (--bind-to core for
// two processes or fewer) and as Horovod's docs advise.
//
// With S slots on a machine whose usable CPUs are C (this process's affinity mask), S <= C, slot
// i runs on the i-th of S equal, contiguous shares of C (mpirun's --map-by slot:PE=C/S): every
// core stays usable, and a slot's threads (the framework's, the engine's) never queue behind
// another slot's. That matters for the engine's short polling waits (engine.h, spin): a thread
// that yields its core to another process's busy thread waits for that thread's whole time
// slice. With more slots than CPUs no binding is made (it could only add contention).
//
// CADRE_CPU_BIND chooses: "auto" (the default, as above) or "none".
#pragma once

#include <string_view>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::launch {

enum class CpuBind { kAuto, kNone };

// Parses CADRE_CPU_BIND's value; the error names the variable and the accepted values.
Status ParseCpuBind(std::string_view text, CpuBind* bind);

// The CPUs of each slot, in slot order; empty when the slots are not bound.
std::vector<std::vector<int>> PlanCpuBinding(int slots, const std::vector<int>& usable,
                                             CpuBind bind);

// The CPUs this process may run on (sched_getaffinity), ascending; empty if that fails.
std::vector<int> UsableCpus();

// The plan for `slots` slots on this machine, by CADRE_CPU_BIND (unset or empty: auto) and this
// process's CPUs; InvalidArgument naming the variable for a bad value.
Status PlanCpuBindingFromEnv(int slots, std::vector<std::vector<int>>* plan);

// Restricts the calling thread (and the threads and processes it starts later) to `cpus`.
// Uses only a system call, so it may run between fork and exec. Returns errno, 0 on success.
int BindToCpus(const std::vector<int>& cpus);

}  // namespace cadre::launch
