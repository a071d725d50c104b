// Running a helper program (ip, tc) with an argument vector — never through a shell — with its
// output captured and a deadline after which it is killed. Errors quote the command and its
// stderr, so a failed `tc` call explains itself.
//
// Thread-safe: uses posix_spawn, so it may be called from any thread of a multi-threaded process.
#pragma once

#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre::netem {

struct CommandResult {
  int exit_code = -1;       // the exit status; 128 + N when killed by signal N
  std::string stdout_text;  // at most 1 MiB of each stream is kept
  std::string stderr_text;
};

// Runs argv[0] (found on PATH, then /usr/sbin and /sbin) with `argv`, stdin from /dev/null.
// Returns kNotFound when the program does not exist, kTimeout (after killing it) at the deadline,
// kIo when it cannot be started; otherwise Ok with the exit code in *result, whatever it is.
Status RunCommand(const std::vector<std::string>& argv, Deadline deadline, CommandResult* result);

// RunCommand, and a failure unless the exit code is 0: kIo with "`ip netns add x` failed (exit 1):
// <stderr>". `stdout_text` may be null.
Status RunChecked(const std::vector<std::string>& argv, Deadline deadline,
                  std::string* stdout_text = nullptr);

// "ip -n cadre-1-h0 link set lo up": for messages only (no quoting for a shell).
std::string FormatCommand(const std::vector<std::string>& argv);

}  // namespace cadre::netem
