#include "cadre/backends/cluster_job.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "cadre/backends/task.h"
#include "cadre/launch/python_env.h"

namespace cadre::backends {
namespace {

namespace fs = std::filesystem;

// This machine's address as its own name resolves (what the nodes are likely to reach).
std::string OwnAddress() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (getaddrinfo(name, nullptr, &hints, &res) != 0 || res == nullptr) return "127.0.0.1";
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, text, sizeof(text));
  freeaddrinfo(res);
  return text;
}

// The last `count` lines of a text file; empty when it cannot be read.
std::vector<std::string> LastLines(const fs::path& path, size_t count) {
  std::vector<std::string> lines;
  bool ok = false;
  std::string text = ReadTextFile(path, &ok);
  size_t end = text.size();
  while (ok && lines.size() < count && end > 0) {
    size_t start = text.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    std::string line = text.substr(start, end - start);
    if (!line.empty() && line != "\n") lines.insert(lines.begin(), line);
    end = start == 0 ? 0 : start - 1;
  }
  return lines;
}

std::string Seconds(Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

namespace {

// The signals that stop a job: Ctrl-C, Ctrl-\ (left to its default, SIGQUIT dumped the
// runner's core and left the job running on the cluster), kill, a closed terminal.
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGQUIT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
  return set;
}

}  // namespace

BlockStopSignals::BlockStopSignals() {
  sigset_t set = StopSignals();
  pthread_sigmask(SIG_BLOCK, &set, &old_);
}

BlockStopSignals::~BlockStopSignals() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

ClusterJob::ClusterJob(const launch::JobSpec& spec, const launch::RunOptions& run,
                       const BackendOptions& backend)
    : spec_(spec), run_(run), backend_(backend), logs_(run.console_fd, run.quiet) {}

fs::path ClusterJob::cadre_program() const {
  if (!backend_.cadre_program.empty()) return fs::absolute(backend_.cadre_program);
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec);
}

void ClusterJob::Message(const std::string& text) const {
  std::string line = "cadre: " + text + "\n";
  if (write(run_.message_fd, line.data(), line.size()) < 0) {
    // Nothing to do: the message is also in status.json where it matters.
  }
}

Status ClusterJob::Prepare(const std::string& engine, const ClusterJobOptions& options) {
  engine_ = engine;
  layout_.training_id = run_.training_id.value_or(launch::NewTrainingId());
  layout_.job_dir = run_.output_dir ? fs::absolute(*run_.output_dir)
                                    : fs::absolute(spec_.results_dir / layout_.training_id);
  layout_.data_dir = spec_.data_dir.empty() ? layout_.job_dir / "data" : spec_.data_dir;
  layout_.job_token = launch::NewJobToken();
  layout_.python_path = launch::CadrePythonPath();
  layout_.name_prefix = options.name_prefix;
  // The engine places the learners; their names are known here, their addresses on the nodes.
  for (int id = 1; id <= spec_.nodes; ++id) {
    layout_.hosts.push_back({id, layout_.name_prefix + "-" + std::to_string(id), ""});
  }
  if (spec_.max_restarts > 0 || spec_.elastic()) {
    return InvalidArgument("max_restarts and min_nodes are the local backend's for now; the " +
                           engine + " backend runs a job once");
  }
  CADRE_RETURN_IF_ERROR(launch::MakeJobDirectory(layout_.job_dir));
  std::error_code ec;
  if (!run_.python.interpreter.empty() && options.runner_store_and_plan) {
    layout_.python_bin_dir = layout_.job_dir / "bin";
    fs::create_directories(layout_.python_bin_dir, ec);
    for (const char* name : {"python3", "python"}) {
      fs::create_symlink(run_.python.interpreter, layout_.python_bin_dir / name, ec);
      if (ec) return IoError("cannot create the job's " + std::string(name) + ": " + ec.message());
    }
  }
  CADRE_RETURN_IF_ERROR(launch::CreateJobDirectory(spec_, layout_));
  if (options.runner_store_and_plan) CADRE_RETURN_IF_ERROR(StartStoreAndWritePlan());

  for (int id = 1; id <= spec_.nodes; ++id) {
    const std::string learner = "learner-" + std::to_string(id);
    if (options.log_per_learner) {
      logs_.Add(learner, layout_.job_dir / learner / "pod.log");
    }
    for (int r = 0; r < spec_.slots_per_learner; ++r) {
      launch::SlotStatus s;
      s.learner_id = id;
      s.local_rank = r;
      s.rank = (id - 1) * spec_.slots_per_learner + r;
      s.running = true;
      if (options.log_per_learner) {
        s.log = fs::path(learner) / "pod.log";
        slot_stream_.push_back(static_cast<size_t>(id - 1));
      } else {
        s.log = fs::relative(launch::SlotLogPath(layout_, id, r), layout_.job_dir);
        slot_stream_.push_back(slot_stream_.size());
        logs_.Add(learner + "/" + std::to_string(r), launch::SlotLogPath(layout_, id, r));
      }
      status_.slots.push_back(s);
    }
  }
  return launch::WriteStatusFile(spec_, layout_, status_);
}

Status ClusterJob::StartStoreAndWritePlan() {
  try {
    store::TcpStoreServerOptions o;
    o.host = "0.0.0.0";  // the nodes connect from their own addresses; the token keeps others out
    o.token = layout_.job_token;
    store_ = std::make_unique<store::TcpStoreServer>(o);
    std::string address = store_->address();
    std::string host = backend_.store_host.empty() ? OwnAddress() : backend_.store_host;
    layout_.store_address = host + address.substr(address.rfind(':'));
    if (backend_.heartbeat_timeout.count() > 0) {
      store::TcpStoreOptions c;
      c.host = "127.0.0.1";
      c.port = store_->port();
      c.token = layout_.job_token;
      c.identity = "cadre run (heartbeats)";
      c.connect_timeout = std::chrono::seconds(10);
      c.timeout = std::chrono::seconds(10);
      beats_ = std::make_unique<store::TcpStore>(c);
      watch_.emplace(backend_.heartbeat_timeout);
    }
  } catch (const Error& e) {
    return e.status().WithContext("starting the job's rendezvous store");
  }
  TaskPlan plan;
  plan.job = launch::JobContractOf(spec_, layout_);
  plan.job.hosts.clear();
  plan.job.cores = 0;
  plan.command = spec_.command;
  plan.command_argv = spec_.command_argv;
  plan.python_bin_dir = layout_.python_bin_dir;
  plan.python_path = layout_.python_path;
  plan.heartbeat_timeout = watch_ ? backend_.heartbeat_timeout : std::chrono::milliseconds(0);
  return WriteTaskPlan(plan);
}

Status ClusterJob::Run(Engine& engine, launch::JobOutcome* outcome) {
  outcome->training_id = layout_.training_id;
  outcome->job_dir = layout_.job_dir;
  // Stop signals are read here, between polls; the store's threads were started with them
  // blocked by the caller (BlockStopSignals).
  sigset_t set = StopSignals();
  if (Status st = engine.Start(); !st.ok()) {
    // Never started: the job's record says so, rather than "running" for ever.
    for (auto& s : status_.slots) s.running = false;
    status_.end_time = launch::WallClock::now();
    status_.failure = st.message();
    status_.state = launch::JobState::kFailed;
    status_.exit_code = 1;
    if (Status written = launch::WriteStatusFile(spec_, layout_, status_); !written.ok()) {
      Message("warning: " + written.message());
    }
    return st;
  }
  const auto started = Clock::now();
  const auto poll = std::chrono::duration_cast<std::chrono::nanoseconds>(backend_.poll_interval);
  int stop_signal = 0;
  std::string stop_reason;
  EngineState state;
  bool stopping = false;  // a stop was asked of the engine
  for (;;) {
    state = engine.Poll();
    logs_.Poll();
    // An engine that cannot be asked (Slurm's controller down) is not needed to know the job has
    // ended: every slot records its end in the job directory, and a lost one is found by its
    // heartbeats. The records tell the outcome (Finish).
    if (!state.finished && state.unreachable && AllSlotsEnded()) {
      Message("every slot of job " + layout_.training_id + " has ended (" + state.description +
              "): taking the outcome from their exit records");
      state.finished = true;
      state.succeeded = true;
    }
    if (state.finished) break;
    // A failed slot ends the job (cadre run's rule). The engine usually sees to that itself
    // (srun --kill-on-bad-exit, mpirun), but not when a node does not answer: srun then waits
    // for that node's tasks until Slurm declares it down, minutes later.
    if (!stopping && stop_signal == 0) {
      if (std::string failure = RecordedFailure(); !failure.empty()) {
        Message("ending the job: " + failure);
        engine.Stop(false);
        stopping = true;
      }
    }
    // A node lost without a slot failing (nothing runs into the loss, or the learners' own
    // timeouts are long) is otherwise noticed only when the engine gives up on the node.
    if (!stopping && stop_signal == 0 && !state.pending) {
      if (std::string lost = LostSlots(); !lost.empty()) {
        Message("ending the job: " + lost);
        engine.Stop(false);
        stopping = true;
      }
    }
    if (state.pending && backend_.queue_timeout.count() > 0 && stop_reason.empty() &&
        Clock::now() - started > backend_.queue_timeout) {
      stop_reason = "still pending after " + Seconds(backend_.queue_timeout) +
                    " (--queue-timeout): " + state.description + "; cancelled";
      Message(stop_reason);
      engine.Stop(false);
      stopping = true;
    }
    timespec tick{static_cast<time_t>(poll.count() / 1000000000),
                  static_cast<long>(poll.count() % 1000000000)};
    siginfo_t info;
    int sig = sigtimedwait(&set, &info, &tick);
    if (sig > 0) {
      Message((stop_signal != 0 ? "cancelling job " + layout_.training_id + " now ("
                                : "cancelling job " + layout_.training_id + " (") +
              launch::SignalName(sig) + ")" + (stop_signal != 0 ? "" : "; again to kill now"));
      engine.Stop(stop_signal != 0);
      stopping = true;
      if (stop_signal == 0) stop_signal = sig;
    }
  }
  logs_.Poll(true);
  outcome->exit_code = Finish(state, stop_signal, stop_reason);
  outcome->state = status_.state;
  return Status::Ok();
}

bool ClusterJob::FailedByItself(const SlotExit& e) const {
  const bool ok = e.succeeded() || (spec_.is_server(e.learner_id) && e.stop_requested);
  // A slot that stopped because it could not hear from this runner, which is alive, failed.
  return (!ok && !e.stop_requested) || !e.runner_lost.empty();
}

std::string ClusterJob::RecordedFailure() const {
  for (const auto& e : ReadSlotExits(layout_.job_dir, spec_.nodes, spec_.slots_per_learner)) {
    if (FailedByItself(e)) {
      return "learner-" + std::to_string(e.learner_id) + " slot " + std::to_string(e.local_rank) +
             " " + e.Describe();
    }
  }
  return "";
}

bool ClusterJob::AllSlotsEnded() const {
  std::vector<bool> ended(status_.slots.size());
  for (size_t i = 0; i < ended.size(); ++i) ended[i] = status_.slots[i].lost;
  for (const auto& e : ReadSlotExits(layout_.job_dir, spec_.nodes, spec_.slots_per_learner)) {
    ended[SlotIndex(e.learner_id, e.local_rank)] = true;
  }
  return std::find(ended.begin(), ended.end(), false) == ended.end();
}

std::string ClusterJob::LostSlots() {
  const auto now = HeartbeatWatch::Clock::now();
  // As often as the slots beat (at least a second apart): one store round trip per slot.
  if (!watch_ || !beats_ ||
      now - beats_read_ < std::max<std::chrono::milliseconds>(std::chrono::seconds(1),
                                                              HeartbeatPeriod(watch_->timeout()))) {
    return "";
  }
  beats_read_ = now;
  try {
    for (size_t i = 0; i < status_.slots.size(); ++i) {
      // add(key, 0) reads the counter (a slot not started yet has 0).
      watch_->Observe(static_cast<int>(i), beats_->add(HeartbeatKey(static_cast<int>(i)), 0), now);
    }
  } catch (const std::exception& e) {
    return "";  // its own store: judged again at the next poll
  }
  std::vector<bool> recorded(status_.slots.size());
  for (const auto& e : ReadSlotExits(layout_.job_dir, spec_.nodes, spec_.slots_per_learner)) {
    recorded[SlotIndex(e.learner_id, e.local_rank)] = true;
  }
  std::vector<int> silent;
  for (int rank : watch_->Silent(now)) {
    if (!recorded[static_cast<size_t>(rank)]) silent.push_back(rank);
  }
  // By learner: "learner-2 (node node2) slots 0, 1".
  std::map<int, std::vector<int>> lost;
  for (int rank : watch_->Settled(std::move(silent))) {
    const auto& s = status_.slots[static_cast<size_t>(rank)];
    lost[s.learner_id].push_back(s.local_rank);
    if (!lost_slot_) lost_slot_ = static_cast<size_t>(rank);
  }
  if (lost.empty()) return "";
  std::string text;
  for (const auto& [learner, slots] : lost) {
    std::string node;
    try {
      const int rank = static_cast<int>(SlotIndex(learner, slots[0]));
      if (beats_->check({HeartbeatNodeKey(rank)})) {
        store::Bytes b = beats_->get(HeartbeatNodeKey(rank));
        node = std::string(b.begin(), b.end());
      }
    } catch (const std::exception&) {
      // Named without its node.
    }
    // In status.json as lost, not as never started: their heartbeats may show they ran.
    for (int slot : slots) {
      auto& s = status_.slots[SlotIndex(learner, slot)];
      s.lost = true;
      s.node = node;
    }
    text += std::string(text.empty() ? "" : "; ") + "learner-" + std::to_string(learner) +
            (node.empty() ? "" : " (node " + node + ")") + (slots.size() == 1 ? " slot" : " slots");
    for (size_t i = 0; i < slots.size(); ++i) {
      text += std::string(i == 0 ? " " : ", ") + std::to_string(slots[i]);
    }
  }
  lost_ = text + ": not heard from for " + Seconds(watch_->timeout()) +
          " (--heartbeat-timeout) and no exit record: the node is down or cut off from this "
          "machine";
  return lost_;
}

int ClusterJob::Finish(const EngineState& end, int stop_signal, const std::string& stop_reason) {
  size_t succeeded = 0;
  std::optional<size_t> failed_slot;  // the first failure's
  std::string failure;
  double failure_time = 0;
  bool explained = true;  // by a record of the failed slot's own (or a stop)
  auto failed = [&](size_t slot, std::string how, double time) {
    if (failed_slot && time >= failure_time) return;
    failed_slot = slot;
    failure = std::move(how);
    failure_time = time;
  };
  if (end.learners.empty()) {
    const auto exits = ReadSlotExits(layout_.job_dir, spec_.nodes, spec_.slots_per_learner);
    for (const auto& e : exits) {
      const size_t index = SlotIndex(e.learner_id, e.local_rank);
      auto& s = status_.slots[index];
      s.exit_code = e.exit_code;
      s.signal = e.signal;
      s.stop_requested = e.stop_requested;
      succeeded += e.succeeded() || (spec_.is_server(e.learner_id) && e.stop_requested) ? 1 : 0;
      if (FailedByItself(e)) {
        failed(index,
               "learner-" + std::to_string(e.learner_id) + " slot " + std::to_string(e.local_rank) +
                   " " + e.Describe(),
               e.end_time);
      }
    }
    // A node lost (heartbeats stopped) is named as such, rather than as records missing.
    if (!failed_slot && !lost_.empty() && lost_slot_) failed(*lost_slot_, lost_, 0);
    // A slot that left no record at all, while others did, was not ended by its `cadre task`:
    // the task was killed (SIGKILL, the OOM killer), or its node was lost. The engine may say
    // which went first; the others may have been killed after it.
    if (!failed_slot && !end.succeeded && !exits.empty()) {
      std::vector<bool> recorded(status_.slots.size());
      for (const auto& e : exits) recorded[SlotIndex(e.learner_id, e.local_rank)] = true;
      std::vector<size_t> missing;
      for (size_t i = 0; i < recorded.size(); ++i) {
        if (!recorded[i]) missing.push_back(i);
      }
      if (end.first_failed_rank && *end.first_failed_rank >= 0 &&
          static_cast<size_t>(*end.first_failed_rank) < recorded.size() &&
          !recorded[static_cast<size_t>(*end.first_failed_rank)]) {
        missing = {static_cast<size_t>(*end.first_failed_rank)};
      }
      std::string names;
      for (size_t i = 0; i < missing.size(); ++i) {
        const auto& s = status_.slots[missing[i]];
        names += std::string(i == 0                    ? ""
                             : i + 1 == missing.size() ? " and "
                                                       : ", ") +
                 "learner-" + std::to_string(s.learner_id) + " slot " +
                 std::to_string(s.local_rank);
      }
      if (!missing.empty()) {
        failed(missing[0],
               names + " left no exit record (its `cadre task` did not start or was killed, or " +
                   "its node was lost); " + end.description,
               0);
        explained = false;
      }
    }
  } else {
    for (const auto& l : end.learners) {
      for (int r = 0; r < spec_.slots_per_learner && l.succeeded; ++r) {
        status_.slots[SlotIndex(l.learner_id, r)].exit_code = 0;
        ++succeeded;
      }
      if (!l.failure.empty()) {
        failed(SlotIndex(l.learner_id, 0),
               "learner-" + std::to_string(l.learner_id) + " " + l.failure, l.end_time);
      }
    }
  }
  for (auto& s : status_.slots) s.running = false;
  status_.end_time = launch::WallClock::now();
  if (failed_slot && stop_signal == 0) {
    status_.failure = failure;
    status_.failed_slot = failed_slot;
    status_.state = launch::JobState::kFailed;
    status_.exit_code = 1;
  } else if (stop_signal != 0) {
    status_.failure = "stopped by " + launch::SignalName(stop_signal);
    status_.state = launch::JobState::kStopped;
    status_.exit_code = 128 + stop_signal;
  } else if (!stop_reason.empty()) {
    status_.failure = stop_reason;
    status_.state = launch::JobState::kFailed;
    status_.exit_code = 1;
  } else if (end.succeeded && succeeded == status_.slots.size()) {
    status_.state = launch::JobState::kCompleted;
    status_.exit_code = 0;
  } else {
    status_.failure = end.description + " (" + std::to_string(succeeded) + " of " +
                      std::to_string(status_.slots.size()) + " slots succeeded)";
    status_.state = launch::JobState::kFailed;
    status_.exit_code = 1;
    explained = false;
  }
  Status st = launch::WriteStatusFile(spec_, layout_, status_);
  if (!st.ok()) Message("warning: " + st.message());
  const std::string where = layout_.job_dir.string();
  if (status_.state == launch::JobState::kCompleted) {
    const size_t n = status_.slots.size();
    Message("job " + layout_.training_id + " completed (" + std::to_string(n) +
            (n == 1 ? " slot on " : " slots on ") + engine_ + "); results in " + where);
  } else {
    std::string text = "job " + layout_.training_id + " " + launch::JobStateName(status_.state) +
                       ": " + status_.failure;
    if (status_.failed_slot) {
      text += "\ncadre: last lines of " +
              (layout_.job_dir / status_.slots[*status_.failed_slot].log).string() + ":";
      const auto& tail = logs_.tail(slot_stream_[*status_.failed_slot]);
      if (tail.empty()) text += "\n    (no output)";
      for (const auto& line : tail) text += "\n    " + line;
    }
    const auto engine_lines = LastLines(end.engine_log, 10);
    if (!explained && status_.state == launch::JobState::kFailed && !engine_lines.empty()) {
      text += "\ncadre: last lines of " + end.engine_log.string() + ":";
      for (const auto& line : engine_lines) text += "\n    " + line;
    }
    Message(text + "\ncadre: status and logs in " + where);
  }
  return *status_.exit_code;
}

}  // namespace cadre::backends
