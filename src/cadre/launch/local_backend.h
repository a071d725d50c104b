// The local backend: runs a job's learners as processes on this machine.
//
// N learners x slots processes, each slot its own process group, each learner its own loopback
// address and name (see hosts.h), the learner contract in their environment (learner_env.h), a
// rendezvous TcpStoreServer in this process, output through the LogMux, status.json kept
// current. Outcomes: the job succeeds when every slot exits 0. When a slot fails the others get
// SIGTERM, then SIGKILL after the grace period. SIGINT/SIGTERM/SIGHUP to the runner stop the
// job the same way (a second one kills at once). In parameter-server mode the servers are
// stopped once every worker has exited 0, and their own exit does not fail the job. Nothing is
// left behind: the runner is a child subreaper and kills whatever its slots started.
//
// RunLocalJob blocks SIGCHLD, SIGINT, SIGTERM and SIGHUP in the calling thread (reading them
// through a signalfd) and restores the mask on return; call it before starting other threads,
// or with those signals blocked in them, so that no other thread takes the signals.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/launch/gpu_plan.h"
#include "cadre/launch/job_spec.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/python_env.h"
#include "cadre/netem/link_spec.h"

namespace cadre::launch {

struct RunOptions {
  bool quiet = false;        // no slot output on the console
  bool status_line = false;  // a live status line (set when stdout is a terminal)
  Duration grace = std::chrono::seconds(10);
  // The job directory itself; default <spec.results_dir>/<training id>.
  std::optional<std::filesystem::path> output_dir;
  // The job's TRAINING_ID; default a new one (NewTrainingId). The job service passes its own.
  std::optional<std::string> training_id;
  PythonInfo python;  // the interpreter the learners' `python3` means
  int console_fd = 1;
  int message_fd = 2;
  // Emulated nodes (root only): each learner in its own network namespace with a link of this
  // spec to a virtual switch, 198.18.x addresses, and the store on the switch; see docs/netem.md.
  std::optional<netem::LinkSpec> emulate_network;
  bool require_delay_loss = false;  // fail rather than warn when delay/loss cannot be emulated
};

struct JobOutcome {
  int exit_code = 1;  // 0 completed, 1 failed, 128+signal when stopped by a signal
  JobState state = JobState::kFailed;
  std::string training_id;
  std::filesystem::path job_dir;
};

// The GPUs this machine gives the job (DetectMachineGpus), checked against what it asks for:
// InvalidArgument naming the field that chose the compute configuration (or
// CUDA_VISIBLE_DEVICES) when the machine does not have them.
Status CheckLocalGpus(const JobSpec& spec, MachineGpus* gpus);

// Runs the job to its end. A failed Status means the job could not be set up (nothing was
// started, or what was started has been stopped); the job's own failure is in *outcome.
Status RunLocalJob(const JobSpec& spec, const RunOptions& options, JobOutcome* outcome);

}  // namespace cadre::launch
