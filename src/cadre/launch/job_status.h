// The job's machine-readable record, <job dir>/status.json, rewritten atomically (tmp + rename)
// whenever something changes, so a reader never sees half a file. Also the job directory's other
// set-up: training ids, job tokens, the manifest as run.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/launch/learner_env.h"

namespace cadre::launch {

using WallClock = std::chrono::system_clock;

enum class JobState { kRunning, kCompleted, kFailed, kStopped };
const char* JobStateName(JobState state);
// "SIGTERM"; "signal 99" for a number without a name.
std::string SignalName(int sig);
// How a slot's process ended, for messages: "exited with code 3", "was killed by SIGKILL"; a
// code of 128 + N names signal N too (a shell's code for a command that N killed). Empty when
// neither is known.
std::string DescribeExit(std::optional<int> exit_code, std::optional<int> signal);

struct SlotStatus {
  int learner_id = 0;
  int local_rank = 0;
  int rank = 0;
  pid_t pid = 0;
  bool running = false;
  bool stop_requested = false;   // the runner signalled it (failure elsewhere, Ctrl-C, PS end)
  std::optional<int> exit_code;  // when it exited
  std::optional<int> signal;     // when a signal ended it
  std::optional<WallClock::time_point> end_time;
  std::filesystem::path log;  // relative to the job directory
  // Its node stopped answering (a cluster backend's heartbeats) before it left an exit record:
  // it may have run, and nobody knows how it ended. `node` names the node when it is known.
  bool lost = false;
  std::string node;

  bool succeeded() const { return exit_code && *exit_code == 0; }
  // "exited with code 3", "was killed by SIGKILL", "is running", "was lost with node n2".
  std::string Describe() const;
};

struct JobStatus {
  JobState state = JobState::kRunning;
  WallClock::time_point start_time = WallClock::now();
  std::optional<WallClock::time_point> end_time;
  std::string failure;                      // why the job failed or stopped; empty otherwise
  std::optional<size_t> failed_slot;        // index into slots of the slot that failed the job
  std::optional<int> exit_code;             // cadre run's exit code, once finished
  std::vector<SlotStatus> slots;            // the current start's (learners 1..nodes of it)
  int restarts = 0;                         // restarts so far (CADRE_RESTART_COUNT of the slots)
  std::vector<std::string> restart_causes;  // why each restart happened, in order
  int rejoins = 0;  // elastic: starts that took lost learners back (not counted as restarts)
};

// "training-20261130-204512-3f9a" (UTC time plus random suffix: unique and sortable).
std::string NewTrainingId();
// 32 random bytes, hex: the job's CADRE_JOB_TOKEN.
std::string NewJobToken();

// Creates the job directory and its folders (learner-<id>/, checkpoints/, state/, data/ when
// DATA_DIR is the default) and writes manifest.yaml (the job as run, with every default
// resolved) and, when the job came from a file, manifest.original.yaml.
Status CreateJobDirectory(const JobSpec& spec, const JobLayout& layout);

// status.json's contents.
std::string StatusJson(const JobSpec& spec, const JobLayout& layout, const JobStatus& status);
Status WriteStatusFile(const JobSpec& spec, const JobLayout& layout, const JobStatus& status);

// Creates the job directory itself (its parents as needed). An existing empty folder is taken;
// anything else there (a previous job, a symlink, a file) is refused with kAlreadyExists.
Status MakeJobDirectory(const std::filesystem::path& dir);

// For a runner refused before its job started: records in `dir` (its --output-dir) a
// status.json saying the job failed and why (`reason`), so that whoever started it (the job
// service, which cannot see the runner's exit status) reports the real reason. A folder that
// already holds a status.json (the job's own record), or that holds anything else and no
// manifest.yaml (not this job's folder), is left untouched.
Status RecordRefusal(const std::filesystem::path& dir, const std::string& training_id,
                     const std::string& reason, int exit_code);

// Writes `text` to `path` through a fresh temporary file (O_EXCL, never through a symlink),
// fsync and rename(2): readers see the old file or the new one, also after a crash.
Status WriteFileAtomically(const std::filesystem::path& path, const std::string& text);

}  // namespace cadre::launch
