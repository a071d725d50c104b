// The supervision loop of a local job: output, child exits, signals, stopping, the summary.
#include <dirent.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <set>
#include <utility>
#include <vector>

#include "cadre/launch/local_job.h"

namespace cadre::launch {
namespace {

// How often the status line is redrawn and exits are double-checked.
constexpr int kTickMs = 1000;

std::string Seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

std::string SlotName(const SlotStatus& s) {
  return "learner-" + std::to_string(s.learner_id) + " slot " + std::to_string(s.local_rank);
}

// Children of this process that are not slots: orphans reparented to us as the subreaper.
std::set<pid_t> ChildrenOfSelf() {
  std::set<pid_t> pids;
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return pids;
  while (dirent* t = readdir(tasks)) {
    if (t->d_name[0] == '.') continue;
    std::ifstream in(std::string("/proc/self/task/") + t->d_name + "/children");
    for (pid_t pid; in >> pid;) pids.insert(pid);
  }
  closedir(tasks);
  return pids;
}

}  // namespace

size_t LocalJob::running_slots() const {
  size_t n = 0;
  for (const auto& s : status_.slots) n += s.running ? 1 : 0;
  return n;
}

void LocalJob::AbortStart(std::string reason) {
  status_.failure = std::move(reason);
  StopSlots(false);
}

void LocalJob::Fail(size_t slot, std::string reason) {
  if (!status_.failure.empty() || stop_signal_ != 0) return;  // the first cause is the cause
  status_.failure = std::move(reason);
  status_.failed_slot = slot;
  StopSlots(false);
}

void LocalJob::StopSlots(bool servers_only) {
  for (auto& s : status_.slots) {
    if (!s.running || s.stop_requested) continue;
    if (servers_only && !spec_.is_server(s.learner_id)) continue;
    s.stop_requested = true;
    SignalSlot(s, SIGTERM);
  }
  if (servers_only) {
    servers_stopping_ = true;
  } else {
    stopping_ = true;
  }
  if (!kill_deadline_) kill_deadline_.emplace(options_.grace);
  UpdateStatus();
}

// Only a slot whose keeper we have not reaped is signalled through its group: its pid, and so
// its group id, cannot have been reused. A slot that never started has no pid (and -0 would be
// our own group); a reaped one's leftovers are our children as subreaper (KillLeftovers).
void LocalJob::SignalSlot(const SlotStatus& s, int sig) {
  if (s.running && s.pid > 0) kill(-s.pid, sig);
}

void LocalJob::KillRunning() {
  for (auto& s : status_.slots) SignalSlot(s, SIGKILL);
}

void LocalJob::OnSignal(int sig) {
  if (sig == SIGCHLD) return;  // exits are collected by ReapExited
  if (stop_signal_ != 0 || stopping_) {
    mux_.Message("cadre: " + SignalName(sig) + " again: killing every slot now\n");
    KillRunning();
    kill_deadline_.emplace(Duration::zero());  // and give up on them in bounded time
    if (stop_signal_ == 0) stop_signal_ = sig;
    return;
  }
  stop_signal_ = sig;
  mux_.Message("cadre: stopping job " + layout_.training_id + " (" + SignalName(sig) + "); grace " +
               Seconds(options_.grace) + ", again to kill now\n");
  status_.failure = "stopped by " + SignalName(sig);
  StopSlots(false);
}

void LocalJob::OnChildExit(pid_t pid, int wait_status) {
  size_t index = 0;
  for (; index < status_.slots.size(); ++index) {
    if (status_.slots[index].pid == pid && status_.slots[index].running) break;
  }
  if (index == status_.slots.size()) return;  // an orphan we adopted as subreaper
  SlotStatus& s = status_.slots[index];
  s.running = false;
  s.end_time = WallClock::now();
  if (WIFEXITED(wait_status)) s.exit_code = WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) s.signal = WTERMSIG(wait_status);

  bool server = spec_.is_server(s.learner_id);
  // Stopping at a commit for an announced rejoin is what the slot was asked to do.
  if (rejoin_announced_ && s.exit_code == kRejoinExitCode) s.stop_requested = true;
  if (!s.succeeded() && !s.stop_requested && !(server && servers_stopping_)) {
    Fail(index, SlotName(s) + (server ? " (parameter server) " : " ") + s.Describe() + " after " +
                    Seconds(Clock::now() - start_began_));
  }
  // PS mode: once every worker has succeeded, the servers' work is done.
  if (spec_.parameter_servers > 0 && !stopping_ && !servers_stopping_) {
    bool workers_done = true;
    for (const auto& w : status_.slots) {
      if (!spec_.is_server(w.learner_id)) workers_done = workers_done && w.succeeded();
    }
    if (workers_done) {
      // Said on the console: a learner that is still printing is about to stop, and a script run
      // in this mode by mistake (a flags-only job is PS mode) would otherwise end unexplained.
      std::string running;
      for (const auto& t : status_.slots) {
        if (t.running && spec_.is_server(t.learner_id)) {
          running += (running.empty() ? "" : ", ") + SlotName(t);
        }
      }
      if (!running.empty()) {
        mux_.Message("cadre: every worker has finished; stopping the parameter servers (" +
                     running + ")\n");
      }
      StopSlots(true);
    }
  }
  UpdateStatus();
}

void LocalJob::ReapExited() {
  std::vector<std::pair<pid_t, int>> exits;
  for (;;) {
    int wait_status = 0;
    pid_t pid = waitpid(-1, &wait_status, WNOHANG);
    if (pid <= 0) break;
    exits.emplace_back(pid, wait_status);
  }
  // Deaths by a signal first: when a killed learner's peers fail because of it in the same
  // moment, the job's failure (and the learner an elastic restart drops) is the killed one.
  std::stable_partition(exits.begin(), exits.end(),
                        [](const auto& e) { return WIFSIGNALED(e.second); });
  for (const auto& [pid, wait_status] : exits) OnChildExit(pid, wait_status);
}

void LocalJob::KillLeftovers() {
  // Whatever a running slot started in its process group, and orphans reparented to us.
  KillRunning();
  Deadline deadline(std::chrono::seconds(5));
  for (;;) {
    std::set<pid_t> orphans = ChildrenOfSelf();
    if (orphans.empty() || deadline.expired()) return;
    for (pid_t pid : orphans) kill(pid, SIGKILL);
    int wait_status = 0;
    while (waitpid(-1, &wait_status, WNOHANG) > 0) {
    }
    usleep(10000);
  }
}

std::string LocalJob::StatusLineText() const {
  size_t running = running_slots();
  size_t done = status_.slots.size() - running;
  return "cadre: " + layout_.training_id + "  " + std::to_string(running) + " running, " +
         std::to_string(done) + " finished of " + std::to_string(status_.slots.size()) +
         (status_.slots.size() == 1 ? " slot" : " slots") + "  elapsed " +
         std::to_string(
             std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - started_).count()) +
         " s" + (stopping_ ? "  (stopping)" : "");
}

// A slot that outlives SIGKILL this long (a process stuck in the kernel) is left behind, so that
// stopping a job always ends.
constexpr auto kAbandonAfter = std::chrono::seconds(10);

void LocalJob::AbandonRunning() {
  for (auto& s : status_.slots) {
    if (!s.running) continue;
    mux_.Message("cadre: warning: " + SlotName(s) + " (pid " + std::to_string(s.pid) +
                 ") did not end within " + Seconds(kAbandonAfter) +
                 " of SIGKILL; leaving it behind\n");
    s.running = false;
    s.end_time = WallClock::now();
  }
}

void LocalJob::SuperviseStart(int signal_fd) {
  std::optional<Deadline> abandon;
  while (running_slots() > 0) {
    int timeout = kTickMs;
    if (kill_deadline_) {
      if (kill_deadline_->expired()) {
        KillRunning();
        timeout = 100;
        if (!abandon) abandon.emplace(kAbandonAfter);
        if (abandon->expired()) {
          AbandonRunning();
          break;
        }
      } else {
        timeout = std::min(timeout, kill_deadline_->poll_timeout_ms());
      }
    }
    mux_.SetStatus(StatusLineText());
    bool signalled = false;
    mux_.Poll(timeout, signal_fd, &signalled);
    if (signalled) {
      signalfd_siginfo info;
      while (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        OnSignal(static_cast<int>(info.ssi_signo));
      }
    }
    // Cheap, and robust against coalesced SIGCHLDs.
    ReapExited();
    MaybeOfferRejoin();
    // A failed link relay moves no packet any more: fail the job rather than let learners wait.
    if (network_ && status_.failure.empty() && stop_signal_ == 0) {
      if (Status net = network_->health(); !net.ok()) {
        AbortStart("the emulated network failed: " + net.message());
      }
    }
  }
  KillLeftovers();
}

bool LocalJob::RestartWanted() const {
  // Only a learner's own failure: not a signal to the runner, a set-up failure or a dead network.
  return stop_signal_ == 0 && status_.failed_slot.has_value() &&
         status_.restarts < spec_.max_restarts;
}

void LocalJob::Restart() {
  const SlotStatus& failed = status_.slots[*status_.failed_slot];
  int nodes = requested_nodes_;
  std::string how = "starting all " + std::to_string(nodes) + " learners again";
  if (spec_.min_nodes < requested_nodes_) {
    // Elastic: the failed learner is lost; go on without it while enough remain, else start
    // every learner again. On this backend learners are alike, so the job goes on as learners
    // 1..nodes-1 (ranks stay contiguous).
    if (spec_.nodes - 1 >= spec_.min_nodes) {
      nodes = spec_.nodes - 1;
      how = "learner-" + std::to_string(failed.learner_id) + " is lost: going on with " +
            std::to_string(nodes) + " learners (min_nodes " + std::to_string(spec_.min_nodes) + ")";
    } else {
      how = "fewer than min_nodes (" + std::to_string(spec_.min_nodes) + ") would remain: " + how;
    }
  }
  // A rejoin is offered rejoin_after from the latest loss.
  if (nodes < requested_nodes_) {
    lost_at_ = Clock::now();
  } else {
    lost_at_.reset();
  }
  ++status_.restarts;
  status_.restart_causes.push_back(status_.failure);
  spec_.nodes = nodes;
  layout_.restart_count = status_.restarts + status_.rejoins;
  StartAgain("cadre: restart " + std::to_string(status_.restarts) + " of " +
             std::to_string(spec_.max_restarts) + " after " + status_.failure + "; " + how +
             " (CADRE_RESTART_COUNT=" + std::to_string(layout_.restart_count) + ")");
}

void LocalJob::MaybeOfferRejoin() {
  if (!lost_at_ || rejoin_announced_ || spec_.rejoin_after_s < 0 ||
      spec_.nodes >= requested_nodes_ || stopping_ || stop_signal_ != 0 ||
      !status_.failure.empty() ||
      Clock::now() - *lost_at_ < std::chrono::seconds(spec_.rejoin_after_s)) {
    return;
  }
  AnnounceRejoin(requested_nodes_);
  if (!rejoin_announced_) return;
  std::string text = "cadre: the lost learners may return: the job goes on with " +
                     std::to_string(requested_nodes_) +
                     " learners from the learners' next commit (rejoin_after " +
                     std::to_string(spec_.rejoin_after_s) + " s)";
  for (size_t i = 0; i < mux_.streams(); ++i) mux_.Note(i, text);
  mux_.Message(text + "\n");
}

void LocalJob::AnnounceRejoin(std::optional<int> learners) {
  if (layout_.elastic_updates_file.empty()) return;
  if (Status st = WriteFileAtomically(layout_.elastic_updates_file, ElasticUpdateJson(learners));
      !st.ok()) {
    Warn("cannot announce the elastic membership to the learners: " + st.message());
    return;
  }
  rejoin_announced_ = learners.has_value();
}

bool LocalJob::RejoinWanted() const {
  if (!rejoin_announced_ || stop_signal_ != 0 || !status_.failure.empty()) return false;
  // Every slot left for the rejoin: one that finished instead ends the job as completed.
  return std::all_of(status_.slots.begin(), status_.slots.end(),
                     [](const SlotStatus& s) { return s.exit_code == kRejoinExitCode; });
}

void LocalJob::Rejoin() {
  int back = requested_nodes_ - spec_.nodes;
  ++status_.rejoins;
  lost_at_.reset();
  spec_.nodes = requested_nodes_;
  layout_.restart_count = status_.restarts + status_.rejoins;
  StartAgain("cadre: " + std::to_string(back) + (back == 1 ? " learner is" : " learners are") +
             " back: starting the job again on all " + std::to_string(spec_.nodes) +
             " learners from their last commit (CADRE_RESTART_COUNT=" +
             std::to_string(layout_.restart_count) + ")");
}

void LocalJob::StartAgain(const std::string& text) {
  mux_.Drain(1000);  // the stopped slots' last lines, before the marker
  for (size_t i = 0; i < mux_.streams(); ++i) mux_.Note(i, text);
  mux_.Message(text + "\n");

  status_.failure.clear();
  status_.failed_slot.reset();
  stopping_ = false;
  servers_stopping_ = false;
  kill_deadline_.reset();
  start_began_ = Clock::now();
  AnnounceRejoin(std::nullopt);
  MakeSlots();
  // Emulated nodes: a link that went down (the failure, often) is back for the new start.
  for (int i = 0; network_ && i < requested_nodes_; ++i) {
    if (Status st = network_->ReconnectHost(i); !st.ok()) {
      Warn("cannot bring learner-" + std::to_string(i + 1) + "'s link back up: " + st.message());
    }
  }
  if (Status st = StartStore(); !st.ok()) {
    AbortStart("start " + std::to_string(layout_.restart_count + 1) + ": " + st.message());
    return;
  }
  UpdateStatus();
  Status st;
  try {
    st = StartSlots();
  } catch (const Error& e) {
    st = e.status();
  }
  if (!st.ok())
    AbortStart("start " + std::to_string(layout_.restart_count + 1) + ": " + st.message());
}

int LocalJob::Supervise(int signal_fd) {
  for (;;) {
    SuperviseStart(signal_fd);
    if (RestartWanted()) {
      Restart();
    } else if (RejoinWanted()) {
      Rejoin();
    } else {
      break;
    }
  }
  mux_.Drain(1000);
  if (size_t lost = mux_.lost_log_lines(); lost > 0) {
    Warn(std::to_string(lost) + " lines of the slots' output could not be written to their logs");
  }
  mux_.ClearStatus();

  status_.end_time = WallClock::now();
  if (stop_signal_ != 0) {
    status_.state = JobState::kStopped;
    status_.exit_code = 128 + stop_signal_;
  } else if (!status_.failure.empty()) {
    status_.state = JobState::kFailed;
    status_.exit_code = 1;
  } else {
    status_.state = JobState::kCompleted;
    status_.exit_code = 0;
  }
  UpdateStatus();
  PrintSummary();
  return *status_.exit_code;
}

void LocalJob::PrintSummary() {
  std::string elapsed = Seconds(Clock::now() - started_);
  std::string where = layout_.job_dir.string();
  std::string restarts;
  if (status_.restarts > 0) {
    restarts = " after " + std::to_string(status_.restarts) +
               (status_.restarts == 1 ? " restart" : " restarts");
  }
  if (status_.state == JobState::kCompleted) {
    mux_.Message("cadre: job " + layout_.training_id + " completed in " + elapsed + " (" +
                 std::to_string(status_.slots.size()) +
                 (status_.slots.size() == 1 ? " slot" : " slots") + restarts + "); results in " +
                 where + "\n");
    return;
  }
  std::string text = "cadre: job " + layout_.training_id + " " + JobStateName(status_.state) +
                     restarts + ": " + status_.failure + "\n";
  if (status_.failed_slot) {
    const SlotStatus& s = status_.slots[*status_.failed_slot];
    const auto& tail = mux_.tail(*status_.failed_slot);
    text += "cadre: last lines of " + (layout_.job_dir / s.log).string() + ":\n";
    if (tail.empty()) text += "    (no output)\n";
    for (const auto& line : tail) text += "    " + line + "\n";
  }
  text += "cadre: status and logs in " + where + "\n";
  mux_.Message(text);
}

}  // namespace cadre::launch
