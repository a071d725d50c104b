// A job's runner: the `cadre run` process that supervises one job's learners. The service starts
// it detached (its own session, not the server's child), so that a job outlives the server, even
// one killed with SIGKILL; a restarted server finds it again by pid and start time.
//
// The runner writes the job's state into the job directory (status.json, kept current); its
// stdout and stderr (the learners' prefixed lines and its own messages) go to training.log in
// the service's work folder, beside runner.pid (written at start, before the runner runs).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"

namespace cadre::service {

struct RunnerLaunch {
  std::filesystem::path cadre;     // the cadre program
  std::filesystem::path manifest;  // the job's manifest
  std::filesystem::path job_dir;   // `cadre run -o`: must not exist yet, or be empty
  std::filesystem::path work_dir;  // training.log and runner.pid; the runner's cwd
  std::string training_id;
  std::chrono::milliseconds grace{10000};
  std::vector<std::string> extra_args;  // after the others: the backend's flags
  // The runner's CUDA_VISIBLE_DEVICES: the GPUs the scheduler gave the job ("" for none);
  // nullopt: the server's own environment is left as it is.
  std::optional<std::string> cuda_visible_devices;
};

struct RunnerProcess {
  pid_t pid = 0;
  int64_t start = 0;  // start time in clock ticks since boot; 0 when it could not be read
};

// Starts the runner; returns once its pid is known. The runner starts with SIGINT, SIGTERM and
// SIGHUP blocked, so one sent at once (a cancel right after admission) waits for `cadre run` to
// take it as a stop, rather than ending the runner before it records an outcome.
Status SpawnRunner(const RunnerLaunch& launch, RunnerProcess* runner);

// Whether that process still runs (a zombie does not; another process reusing the pid does not).
bool RunnerAlive(const RunnerProcess& runner);
// The start time of `pid`, or 0.
int64_t ProcessStartTime(pid_t pid);
// The pid recorded in work_dir/runner.pid, if any.
std::optional<pid_t> ReadRunnerPid(const std::filesystem::path& work_dir);

// What status.json says about the job's end.
struct RunnerOutcome {
  bool finished = false;  // the runner recorded an end
  std::string state;      // runner's state: running, completed, failed, stopped
  std::string failure;    // names the learner and how it ended
};
RunnerOutcome ReadOutcome(const std::filesystem::path& job_dir);

// For a runner that ended without recording an outcome: deletes what it left on a cluster engine
// it can no longer clean up after (Kubernetes: the objects in JOB_DIR/kubernetes/objects.yaml,
// in the namespace its `--namespace` flag in `runner_args` names). Returns a sentence for the
// job's failure saying what was done ("" when the runner used no such engine).
std::string RemoveRunnerLeftovers(const std::filesystem::path& job_dir,
                                  const std::vector<std::string>& runner_args);

// The last `lines` lines of a text file (for failure messages).
std::string TailOfFile(const std::filesystem::path& file, size_t lines);

}  // namespace cadre::service
