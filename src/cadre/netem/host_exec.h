// Running one command per emulated host: what `cadre netem exec` does, and a building block for
// benchmarks that need N processes on N emulated nodes without a full job runner.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/netem/network_emulator.h"

namespace cadre::netem {

// The variables a process on host i sees in addition to the caller's environment:
//   CADRE_NETEM_HOST       i (0-based)
//   CADRE_NETEM_HOSTS      the number of hosts
//   CADRE_NETEM_ADDRESS    this host's address
//   CADRE_NETEM_ADDRESSES  every host's address, comma-separated, in host order
//   CADRE_NETEM_SWITCH     the switch's address
//   CADRE_NETEM_LINK       the link spec, e.g. "1gbit,1ms"
std::vector<std::pair<std::string, std::string>> HostEnvironment(const NetworkEmulator& emu, int i);

struct HostExecOptions {
  // After a forwarded SIGINT/SIGTERM/SIGHUP, how long the processes get before SIGKILL.
  Duration grace = std::chrono::seconds(10);
  // The whole run; at the deadline every process is killed and the result is kTimeout.
  Deadline deadline = Deadline::Never();
};

// Starts `argv` (searched on PATH) once per host, each in its own process group inside its host
// (EnterHost), with HostEnvironment set, and waits for all. *exit_code is 0 when every process
// exited 0, otherwise the first failure in host order (128 + N for a death by signal N).
// While waiting, SIGINT, SIGTERM and SIGHUP sent to this process are forwarded to every process
// group and the call still waits for them (up to `grace`), so the caller can clean up after.
// The processes get SIGKILL if this process dies (PR_SET_PDEATHSIG), leaving the namespaces empty
// for a sweep. Must be called from a process whose other threads block those three signals
// (true of the single-threaded `cadre` CLI). Errors: kIo when a process cannot be started,
// kTimeout at options.deadline, kAborted when a forwarded signal ended the run, the relay's error
// when the emulated network stopped working (the processes then get SIGTERM, then SIGKILL after
// `grace`).
Status RunOnEveryHost(const NetworkEmulator& emu, const std::vector<std::string>& argv,
                      const HostExecOptions& options, int* exit_code);

}  // namespace cadre::netem
