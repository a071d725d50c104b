// Ownership records for emulated networks, so that leftovers of a job whose runner died (SIGKILL,
// OOM, power cut of the container) are found and removed by the next run.
//
// Each NetworkEmulator writes `<state_dir>/<prefix>.state` BEFORE it creates anything, listing
// the network namespaces it is about to create and its owner process (pid plus the process start
// time from /proc, so a recycled pid is not mistaken for the owner). SweepStaleJobs removes the
// namespaces of every record whose owner is gone, then the record.
//
// Namespaces are matched only through records: a namespace nobody recorded is never touched, so
// a sweep cannot remove another tool's (or another state directory's) namespaces.
#pragma once

#include <sys/types.h>
#include <string>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre::netem {

// Where records live by default: tmpfs on most systems, emptied at boot like the namespaces.
inline constexpr const char* kDefaultStateDir = "/run/cadre/netem";
// Where `ip netns` keeps its named namespaces.
inline constexpr const char* kNetnsRunDir = "/run/netns";

struct JobState {
  pid_t owner_pid = 0;
  unsigned long long owner_start = 0;  // field 22 of /proc/<pid>/stat
  std::vector<std::string> namespaces;
};

// The start time of `pid` (clock ticks since boot), or 0 when the process does not exist.
unsigned long long ProcessStartTime(pid_t pid);

// True when `pid` exists and started at `start` (pid reuse makes pid alone unreliable).
bool OwnerAlive(pid_t pid, unsigned long long start);

// A record for the calling process.
JobState StateForThisProcess(std::vector<std::string> namespaces);

// Writes the record atomically (temp file + rename), creating `state_dir` if needed.
Status WriteJobState(const std::string& path, const JobState& state);

// Reads a record; kNotFound when the file does not exist, kInvalidArgument (naming the file and
// line) when it is malformed.
Status ReadJobState(const std::string& path, JobState* state);

// True when /run/netns/<name> exists.
bool NetnsExists(const std::string& name);

// Deletes the named namespaces that exist (`ip netns del`). Tries all of them and reports every
// failure in one Status.
Status DeleteNamespaces(const std::vector<std::string>& names, Deadline deadline);

// Removes the leftovers of every dead job whose record in `state_dir` has a file name starting
// with `prefix` (e.g. "cadre-" for all jobs). A malformed record is left alone with a warning
// (records are written atomically, so it is not one being written; its content is unknown).
// Appends the names of removed namespaces to *removed (may be null). A missing state_dir is not
// an error: there is nothing to sweep.
Status SweepStaleJobs(const std::string& state_dir, const std::string& prefix, Deadline deadline,
                      std::vector<std::string>* removed = nullptr);

// The short-lived namespace CheckNetnsSupport makes: "cadre-probe-<pid>". Its pid is its record.
std::string ProbeNamespaceName(pid_t pid);

// Removes probe namespaces whose process is gone (a probe killed midway). Appends their names to
// *removed (may be null).
Status SweepDeadProbes(Deadline deadline, std::vector<std::string>* removed = nullptr);

}  // namespace cadre::netem
