// Starting processes for a job: slots (a learner's processes) and short probes.
//
// A slot is started with fork+exec so that everything between the two is under our control. The
// forked child is the slot's keeper: it leads the slot's process group (so the job can signal
// everything it started), gets a private /etc/hosts in a mount namespace when asked, points
// stdout and stderr into one pipe (so lines keep their order), then runs the command as its own
// child and exits the way the command does (same code or signal). When the runner dies, even by
// SIGKILL, the keeper learns it (PR_SET_PDEATHSIG) and kills the whole group, so no learner
// outlives its runner. A stop signal sent to the slot's group before the keeper has started the
// command is handed on to it, so a job stopped at once does not wait for its grace period. Only
// async-signal-safe calls run after fork: every string is prepared before, because the runner
// has threads.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/netem/network_emulator.h"

namespace cadre::launch {

// How a learner gets its private /etc/hosts.
enum class HostsMethod {
  kMountNamespace,  // unshare(CLONE_NEWNS) and bind-mount the job's hosts file (needs root)
  kUserNamespace,   // the same inside a new user namespace (unprivileged, `unshare -Urm` style)
  kCadreHosts,      // no namespace: CADRE_HOSTS names the job's hosts file (cadre's resolver)
};

const char* HostsMethodName(HostsMethod method);

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is a path
  std::vector<std::string> env;   // "KEY=VALUE", the whole environment
  std::filesystem::path cwd;
  int output_fd = -1;  // becomes the child's stdout and stderr; stdin is /dev/null
  HostsMethod hosts_method = HostsMethod::kCadreHosts;
  std::filesystem::path hosts_file;  // bind-mounted over /etc/hosts in the namespace methods
  // When set, the child first joins emulated host `network_host` (its network namespace and
  // host name; see netem::NetworkEmulator::EnterHost). The emulator must outlive the call.
  const netem::NetworkEmulator* network = nullptr;
  int network_host = -1;
  // When not empty, the slot's processes run on these CPUs only (cpu_binding.h).
  std::vector<int> cpus;
};

// Starts the slot; *pid is its keeper's pid, which is also the slot's process-group id. A failure
// after fork (mount, chdir, exec) is written to output_fd, and the slot exits with 127.
Status SpawnSlot(const SpawnOptions& options, pid_t* pid);

// Whether `method` works here: a throwaway child tries it with `hosts_file` and exits.
bool HostsMethodWorks(HostsMethod method, const std::filesystem::path& hosts_file);

struct CaptureResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string output;  // stdout only
};

// Runs argv (searched on PATH) with stdin and stderr on /dev/null, collects stdout, and kills it
// when `timeout` passes (kTimeout). kNotFound when it cannot be executed.
Status RunAndCapture(const std::vector<std::string>& argv, Duration timeout, CaptureResult* out);

}  // namespace cadre::launch
