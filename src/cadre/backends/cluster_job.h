// The runner's side of a job that a cluster engine starts (Slurm, Open MPI): everything but the
// engine. Lays the job out (directory, token, rendezvous store reachable from the nodes, the
// task plan for `cadre task`), then follows the engine until the job ends: the slots' logs on the
// console, stop signals turned into the engine's cancel, the failed learner named from the
// slots' exit records, status.json kept, cadre run's exit code (0, 1, 128+signal).
#pragma once

#include <signal.h>

#include <memory>
#include <optional>
#include <string>

#include "cadre/backends/backend.h"
#include "cadre/backends/log_follow.h"
#include "cadre/base/deadline.h"
#include "cadre/launch/job_status.h"
#include "cadre/launch/learner_env.h"
#include "cadre/store/tcp_store.h"

namespace cadre::backends {

// What the engine says about the job, polled.
struct EngineState {
  bool pending = false;     // queued, nothing started
  bool finished = false;    // every task has ended
  bool succeeded = false;   // with `finished`: the engine counts the job a success
  std::string description;  // "Slurm job 12 RUNNING", "FAILED (ExitCode=1:0)"
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual Status Start() = 0;  // submit / launch
  virtual EngineState Poll() = 0;
  // Asks the engine to stop every task; `now`: kill without grace (a second Ctrl-C).
  virtual void Stop(bool now) = 0;
};

// Blocks SIGINT, SIGTERM and SIGHUP in this thread for its lifetime, so that threads started
// meanwhile (the store's) leave them to ClusterJob::Run; restores the mask at the end.
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
  Status Prepare(const std::string& engine);
  // Starts `engine` and follows it to the end; returns cadre run's exit code.
  Status Run(Engine& engine, launch::JobOutcome* outcome);

  const launch::JobLayout& layout() const { return layout_; }
  const launch::JobSpec& spec() const { return spec_; }
  const BackendOptions& backend() const { return backend_; }
  std::filesystem::path cadre_program() const;
  void Message(const std::string& text) const;

 private:
  // Ends the job's record: the state, the failure (naming the learner) and the exit code.
  int Finish(const EngineState& end, int stop_signal, const std::string& stop_reason);

  const launch::JobSpec& spec_;
  launch::RunOptions run_;
  BackendOptions backend_;
  std::string engine_;
  launch::JobLayout layout_;
  launch::JobStatus status_;
  std::unique_ptr<store::TcpStoreServer> store_;
  LogFollower logs_;
};

}  // namespace cadre::backends
