// The runner's side of a job that a cluster engine starts (Slurm, Open MPI, Kubernetes):
// everything but the engine. Lays the job out (directory, token, rendezvous store reachable from
// the nodes, the task plan for `cadre task`), then follows the engine until the job ends: the
// slots' (or learners') logs on the console, stop signals turned into the engine's cancel, the
// failed learner named from the slots' exit records or the engine's view of its learners,
// status.json kept, cadre run's exit code (0, 1, 128+signal).
#pragma once

#include <signal.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cadre/backends/backend.h"
#include "cadre/backends/heartbeat.h"
#include "cadre/backends/log_follow.h"
#include "cadre/backends/task.h"
#include "cadre/base/deadline.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/learner_env.h"
#include "cadre/store/tcp_store.h"

namespace cadre::backends {

// How one learner ended, for engines that see learners rather than slots (Kubernetes's pods).
struct LearnerEnd {
  int learner_id = 0;
  bool succeeded = false;  // every slot succeeded (a parameter server: the workers did)
  std::string failure;     // how it failed ("exited with code 3 (Error)"); empty if it did not
  double end_time = 0;     // seconds since the epoch, to name the first failure
};

// What the engine says about the job, polled.
struct EngineState {
  bool pending = false;     // queued, nothing started
  bool finished = false;    // every task has ended
  bool succeeded = false;   // with `finished`: the engine counts the job a success
  std::string description;  // "Slurm job 12 RUNNING", "FAILED (ExitCode=1:0)"
  // The engine cannot tell (Slurm's controller out of reach): the job may run on. The runner
  // then ends it by the slots' own exit records and heartbeats, once every slot has ended.
  bool unreachable = false;
  // With `finished`, from engines whose slots' records stay on the nodes (Kubernetes): the
  // learners' ends. Empty: the records in the job directory tell (task.h).
  std::vector<LearnerEnd> learners;
  // The engine's own output (mpirun's, the batch script's): its last lines end a failure that no
  // slot's record explains.
  std::filesystem::path engine_log;
  // The rank the engine saw end first, when it says (mpirun: "process rank 3 ... exited on
  // signal 9"): the slot to name when several left no exit record.
  std::optional<int> first_failed_rank;
};

// What the engine needs of the runner's side.
struct ClusterJobOptions {
  // A rendezvous store on this machine, and the plan and token in the shared job directory
  // (Slurm, Open MPI). Kubernetes: learner 1 serves the store and the plan is in the objects.
  bool runner_store_and_plan = true;
  // One log stream per learner, <job dir>/learner-K/pod.log shown as "[learner-K]" (a pod's
  // output, all its slots), rather than one per slot.
  bool log_per_learner = false;
  // LEARNER_NAME_PREFIX when the engine names the learners (Kubernetes: the objects' name).
  std::string name_prefix = "learner";
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual Status Start() = 0;  // submit / launch
  virtual EngineState Poll() = 0;
  // Asks the engine to stop every task; `now`: kill without grace (a second Ctrl-C).
  virtual void Stop(bool now) = 0;
};

// Blocks SIGINT, SIGQUIT, SIGTERM and SIGHUP in this thread for its lifetime, so that threads
// started meanwhile (the store's) leave them to ClusterJob::Run; restores the mask at the end.
class BlockStopSignals {
 public:
  BlockStopSignals();
  ~BlockStopSignals();
  BlockStopSignals(const BlockStopSignals&) = delete;
  BlockStopSignals& operator=(const BlockStopSignals&) = delete;

 private:
  sigset_t old_;
};

class ClusterJob {
 public:
  ClusterJob(const launch::JobSpec& spec, const launch::RunOptions& run,
             const BackendOptions& backend);

  // Everything before the engine starts; `engine` names it in messages.
  Status Prepare(const std::string& engine, const ClusterJobOptions& options = {});
  // Starts `engine` and follows it to the end; returns cadre run's exit code.
  Status Run(Engine& engine, launch::JobOutcome* outcome);

  const launch::JobLayout& layout() const { return layout_; }
  const launch::JobSpec& spec() const { return spec_; }
  const BackendOptions& backend() const { return backend_; }
  std::filesystem::path cadre_program() const;
  void Message(const std::string& text) const;
  // The log streams (LogFollower::Watch); with log_per_learner, stream K-1 is learner K's.
  LogFollower& logs() { return logs_; }

 private:
  Status StartStoreAndWritePlan();
  // Whether a slot's exit record says it failed (rather than was stopped, or served until the
  // workers were done).
  bool FailedByItself(const SlotExit& e) const;
  // The first slot in the job directory's records that failed by itself, described; "" if none.
  std::string RecordedFailure() const;
  // The slots whose heartbeats stopped while they left no exit record (their node lost or cut
  // off), described with their learners and nodes; "" if none. Reads the store as often as the
  // slots beat, at most once a second.
  std::string LostSlots();
  // Whether every slot has ended: left its exit record, or was found lost (LostSlots).
  bool AllSlotsEnded() const;
  // Ends the job's record: the state, the failure (naming the learner) and the exit code.
  int Finish(const EngineState& end, int stop_signal, const std::string& stop_reason);
  size_t SlotIndex(int learner_id, int local_rank) const {
    return static_cast<size_t>((learner_id - 1) * spec_.slots_per_learner + local_rank);
  }

  const launch::JobSpec& spec_;
  launch::RunOptions run_;
  BackendOptions backend_;
  std::string engine_;
  launch::JobLayout layout_;
  launch::JobStatus status_;
  std::unique_ptr<store::TcpStoreServer> store_;
  std::unique_ptr<store::TcpStore> beats_;  // this runner's client of its own store
  std::optional<HeartbeatWatch> watch_;
  HeartbeatWatch::Clock::time_point beats_read_{};
  std::string lost_;                 // LostSlots' description, once found
  std::optional<size_t> lost_slot_;  // the first lost slot
  LogFollower logs_;
  std::vector<size_t> slot_stream_;  // the log stream of each slot
};

}  // namespace cadre::backends
