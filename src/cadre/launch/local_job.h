// Internal to the local backend: one running job. Set-up lives in local_backend.cc, the
// supervision loop (signals, exits, stopping, summary) in supervisor.cc.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cadre/launch/learner_env.h"
#include "cadre/launch/local_backend.h"
#include "cadre/launch/log_mux.h"
#include "cadre/netem/network_emulator.h"
#include "cadre/store/tcp_store.h"

namespace cadre::launch {

class LocalJob {
 public:
  LocalJob(const JobSpec& spec, const RunOptions& options);

  // Job directory, addresses, hosts file, rendezvous store; nothing started yet. When it fails
  // after making the job directory, status.json there says `failed` and why.
  Status Prepare();
  // Prepare's part for emulated nodes: the network, and learner addresses on it.
  Status StartNetwork();
  // Starts every slot; on a failure the slots already started are stopped by Supervise.
  Status StartSlots();
  // Records a start-up failure and stops the slots that did start.
  void AbortStart(std::string reason);
  // Runs until every slot has ended, restarting the job after a learner failure while
  // spec.max_restarts allows; returns cadre run's exit code.
  int Supervise(int signal_fd);

  const JobLayout& layout() const { return layout_; }

 private:
  void Warn(const std::string& text);
  // Prepare's steps from the job directory on.
  Status PrepareJobDirectory();
  // The rendezvous store of one start of the job (a restart gets a fresh one: no stale keys).
  Status StartStore();
  // status_.slots for learners 1..spec_.nodes, none started.
  void MakeSlots();
  // Supervises the current start until every slot has ended.
  void SuperviseStart(int signal_fd);
  bool RestartWanted() const;
  // Starts the job again after a learner failed: on fewer learners when elastic.
  void Restart();
  // Elastic, after losing learners: once rejoin_after has passed, announces that they may come
  // back (ElasticUpdatesPath); the learners stop at their next commit.
  void MaybeOfferRejoin();
  // Every slot stopped for the announced rejoin, and nothing else ended the start.
  bool RejoinWanted() const;
  // Starts the job again on every requested learner (not counted against max_restarts).
  void Rejoin();
  // The shared part of Restart and Rejoin: a new start on spec_.nodes learners. `text` is
  // written into every slot's log and the runner's output.
  void StartAgain(const std::string& text);
  // Writes ElasticUpdateJson(learners) for the learners of the current start.
  void AnnounceRejoin(std::optional<int> learners);
  void OnSignal(int sig);
  void OnChildExit(pid_t pid, int wait_status);
  void Fail(size_t slot, std::string reason);
  // SIGTERM to every running slot (or only the parameter servers); arms the SIGKILL deadline.
  void StopSlots(bool servers_only);
  void SignalSlot(const SlotStatus& s, int sig);
  void KillRunning();
  // Gives up on slots that survive SIGKILL (stuck in the kernel), so that stopping ends.
  void AbandonRunning();
  void ReapExited();
  void KillLeftovers();
  void UpdateStatus();
  void PrintSummary();
  std::string StatusLineText() const;
  size_t running_slots() const;

  JobSpec spec_;  // as requested, but nodes is the current start's (fewer when elastic)
  int requested_nodes_;
  RunOptions options_;
  JobLayout layout_;
  JobStatus status_;
  LogMux mux_;
  std::unique_ptr<netem::NetworkEmulator> network_;  // with RunOptions::emulate_network
  std::unique_ptr<store::TcpStoreServer> store_;
  std::optional<Deadline> kill_deadline_;
  int stop_signal_ = 0;    // the signal that stopped the job, if one did
  bool stopping_ = false;  // every slot has been asked to stop
  bool servers_stopping_ = false;
  Clock::time_point started_ = Clock::now();
  Clock::time_point start_began_ = started_;  // of the current start (restarts begin anew)
  std::optional<Clock::time_point> lost_at_;  // elastic: when the job last lost learners
  bool rejoin_announced_ = false;             // in the current start
  bool status_unwritable_ = false;            // the last write of status.json failed (warned)
};

}  // namespace cadre::launch
