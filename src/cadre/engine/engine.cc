#include "cadre/engine/engine.h"

#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include "cadre/base/logging.h"
#include "cadre/comm/collectives.h"
#include "cadre/engine/dtype.h"

namespace cadre::engine {

namespace {

// Negotiation messages travel in fixed slots first; a rank whose message does not fit says so
// and a second, sized round carries every rank's full message.
constexpr size_t kSlotBytes = 1024;
constexpr size_t kSlotPayload = kSlotBytes - 4;

}  // namespace

Engine::Engine(std::unique_ptr<comm::Communicator> comm, EngineOptions options)
    : rank_(comm->rank()),
      size_(comm->size()),
      options_(std::move(options)),
      comm_(std::move(comm)),
      controller_(rank_, size_, options_.fusion_threshold_bytes, options_.cache_capacity,
                  options_.fusion_tensor_limit_bytes),
      executor_(*comm_, options_.fusion_segment_bytes, options_.allreduce_algorithm),
      idle_wait_(options_.cycle_time) {
  if (rank_ == 0 && !options_.batch_wait) {
    tuner_ = std::make_unique<BatchWindowTuner>(options_.batch_window_tuning);
  }
  // Until rank 0's first announcement (its first cycle), each rank starts with its own setting;
  // with the same options everywhere, that is already rank 0's.
  batch_window_us_ = options_.batch_wait.value_or(options_.batch_window_tuning.initial).count();
  if (!options_.timeline_path.empty() && rank_ == 0) {
    timeline_.Start(options_.timeline_path, options_.timeline_mark_cycles);
  }
  if (options_.stall_shutdown <= Duration::zero() && rank_ == 0) {
    CADRE_LOG(WARNING) << "stall shutdown is off (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=0): a rank "
                          "that never submits a tensor the others wait for hangs the job";
  }
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  Shutdown();
  if (thread_.joinable()) thread_.join();
  timeline_.Stop();
}

void Engine::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_requested_ = true;
  Wake();
}

std::shared_ptr<Handle> Engine::Enqueue(Request request, void* data, bool batchable) {
  if (request.name.empty()) throw Error(InvalidArgument("an operation needs a non-empty name"));
  if (request.op == OpType::kJoin) throw Error(InvalidArgument("use Engine::Join()"));
  const std::string what = std::string(OpTypeName(request.op)) + " '" + request.name + "'";
  if (request.num_elements() < 0) throw Error(InvalidArgument(what + ": negative dimension"));
  if (request.external && request.op != OpType::kAllreduce) {
    throw Error(InvalidArgument(what + ": only an allreduce may move its data outside the engine"));
  }
  if (request.op != OpType::kBarrier && !request.external && request.num_elements() > 0 &&
      data == nullptr) {
    throw Error(InvalidArgument(what + ": null data"));
  }
  if (request.prescale != 1.0 || request.postscale != 1.0) {
    if (request.op != OpType::kAllreduce && request.op != OpType::kReducescatter) {
      throw Error(InvalidArgument(what + ": scale factors apply to allreduce and reducescatter"));
    }
    if (!IsScalable(request.dtype)) {
      throw Error(InvalidArgument(what + ": " + std::string(comm::DataTypeName(request.dtype)) +
                                  " tensors cannot be scaled (prescale " +
                                  std::to_string(request.prescale) + ", postscale " +
                                  std::to_string(request.postscale) + ")"));
    }
  }
  if (request.op == OpType::kBroadcast && (request.root < 0 || request.root >= size_)) {
    throw Error(InvalidArgument(what + ": root " + std::to_string(request.root) +
                                " is not a rank of a group of " + std::to_string(size_)));
  }
  if (request.op == OpType::kAlltoall) {
    if (request.splits.empty()) {
      if (request.rows() % size_ != 0) {
        throw Error(InvalidArgument(what + ": first dimension " + std::to_string(request.rows()) +
                                    " is not divisible by " + std::to_string(size_) +
                                    " ranks; pass splits"));
      }
    } else {
      int64_t sum = 0;
      for (int64_t s : request.splits) {
        if (s < 0) throw Error(InvalidArgument(what + ": negative split"));
        sum += s;
      }
      if (static_cast<int>(request.splits.size()) != size_ || sum != request.rows()) {
        throw Error(InvalidArgument(what + ": splits must have " + std::to_string(size_) +
                                    " entries summing to the first dimension " +
                                    std::to_string(request.rows())));
      }
    }
  }
  if (request.op != OpType::kAllreduce && request.op != OpType::kReducescatter) {
    request.reduce_op = ReduceOp::kSum;  // not part of the agreement for other operations
  }
  auto handle = std::make_shared<Handle>(options_.spin);
  const std::string name = request.name;
  const OpType op = request.op;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) throw Error(broken_);
    if (shutdown_requested_) throw Error(AbortedError("the engine is shut down"));
    if (pending_.count(request.name)) {
      throw Error(Code::kAlreadyExists,
                  "a " + std::string(OpTypeName(pending_[request.name].request.op)) + " named '" +
                      request.name +
                      "' is already pending on this rank; names must be unique until complete");
    }
    const size_t bytes =
        static_cast<size_t>(request.num_elements()) * comm::ElementSize(request.dtype);
    std::vector<uint8_t> payload;
    if (request.op == OpType::kAllreduce && !request.external && bytes > 0 &&
        bytes <= options_.inline_bytes) {
      const auto* p = static_cast<const uint8_t*>(data);
      payload.assign(p, p + bytes);
    }
    // Before the engine thread can see the request, so that its negotiation ends after it starts.
    timeline_.NegotiateStart(name, op);
    TensorEntry entry{request, data, handle};
    pending_.emplace(request.name, std::move(entry));
    fresh_.push_back(std::move(request));
    fresh_payloads_.push_back(std::move(payload));
    if (!batchable) ++fresh_urgent_;
  }
  Wake();
  return handle;
}

void Engine::Flush() {
  const auto now = Clock::now();
  std::lock_guard<std::mutex> lock(mu_);
  flush_requested_ = true;
  // tuner_ is set before the engine thread starts and never changes; the tuner itself is the
  // engine thread's (it ignores steps once it has decided).
  if (tuner_) step_ends_.push_back(now);
  Wake();
}

std::shared_ptr<Handle> Engine::Join() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) throw Error(broken_);
  if (shutdown_requested_) throw Error(AbortedError("the engine is shut down"));
  if (join_handle_) throw Error(Code::kAlreadyExists, "join() is already pending on this rank");
  join_handle_ = std::make_shared<Handle>(options_.spin);
  Wake();
  return join_handle_;
}

void Engine::StartTimeline(const std::string& path, bool mark_cycles) {
  if (rank_ != 0) return;
  if (path.empty()) {
    timeline_.Stop();
  } else {
    timeline_.Start(path, mark_cycles);
  }
}

void Engine::StopTimeline() { timeline_.Stop(); }

std::string Engine::StallReport() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stall_report_;
}

void Engine::Loop() {
  // Named so that top, perf and /proc show the engine's CPU apart from the training thread's.
  pthread_setname_np(pthread_self(), "cadre-engine");
  try {
    while (RunCycle()) {
    }
  } catch (const Error& e) {
    CADRE_LOG(ERROR) << "rank " << rank_ << ": engine stopped: " << e.what();
    FailAll(e.status());
  } catch (const std::exception& e) {
    FailAll(InternalError(std::string("engine thread: ") + e.what()));
  }
}

bool Engine::RunCycle() {
  std::vector<Request> fresh;
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<Clock::time_point> step_ends;
  bool shutdown, joined;
  if (idle_wait_ == options_.cycle_time) PollFlag(wake_, options_.spin);  // the last had work
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, idle_wait_, [&] { return !fresh_.empty() || shutdown_requested_; });
    wake_.store(false, std::memory_order_relaxed);
    const std::chrono::microseconds batch_wait(batch_window_us_.load(std::memory_order_relaxed));
    if (!fresh_.empty() && fresh_urgent_ == 0 && !flush_requested_ &&
        batch_wait > std::chrono::microseconds::zero()) {
      // Only batchable work (gradients from backward hooks) is queued: let the next gradients
      // of the pass join this cycle so they are negotiated and fused together. An urgent
      // submission or a Flush() ends the wait.
      cv_.wait_for(lock, batch_wait,
                   [&] { return shutdown_requested_ || fresh_urgent_ > 0 || flush_requested_; });
    }
    fresh_urgent_ = 0;
    flush_requested_ = false;
    fresh.swap(fresh_);
    payloads.swap(fresh_payloads_);
    step_ends.swap(step_ends_);
    shutdown = shutdown_requested_;
    joined = join_handle_ != nullptr;
  }
  timeline_.MarkCycle();
  // Inline inputs beyond the message budget are left out: those names run as normal
  // allreduces (every rank sees which payloads arrived, so all decide alike).
  size_t budget = options_.inline_message_bytes;
  for (auto& p : payloads) {
    if (p.size() > budget) p.clear();
    budget -= p.size();
  }
  Message mine = controller_.MakeMessage(fresh, shutdown, joined, abort_, std::move(payloads));
  if (rank_ == 0) mine.batch_window = NextAnnouncement(step_ends);
  controller_.set_record_arrivals(timeline_.active());
  const std::vector<Response> responses = controller_.Process(Exchange(mine));
  if (auto w = controller_.announced_batch_window()) {
    batch_window_us_.store(w->count(), std::memory_order_relaxed);
  }
  for (const auto& [name, rank] : controller_.arrivals()) {
    timeline_.NegotiateRankReady(name, rank);
  }
  for (const Response& r : responses) {
    if (r.kind == Response::Kind::kShutdown) {
      FailAll(r.error);
      return false;
    }
    Execute(r);
  }
  // Idle cycles back off (doubling up to idle_cycle_time_max) so that an idle job does not keep
  // every rank's thread exchanging messages; any local or remote work restores cycle_time. A
  // rank that submits still wakes at once, and its peers wake on their own submissions.
  // A rank that has submitted every pending name goes straight into the next exchange, where
  // it blocks until a peer cycles with the missing submissions: sleeping a cycle time here
  // instead would make every peer that cycles meanwhile wait for this rank's timer (that wait
  // was most of a training step's communication time).
  const bool busy = !fresh.empty() || joined || !responses.empty() || controller_.has_pending();
  if (controller_.waiting_only_for_others() || !abort_.ok()) {
    idle_wait_ = std::chrono::microseconds::zero();
  } else {
    idle_wait_ = busy ? options_.cycle_time
                      : std::min(std::max(idle_wait_ * 2, std::chrono::microseconds(1000)),
                                 std::max(options_.cycle_time, options_.idle_cycle_time_max));
  }
  CheckStalls();
  return true;
}

std::optional<std::chrono::microseconds> Engine::NextAnnouncement(
    const std::vector<Clock::time_point>& step_ends) {
  std::chrono::microseconds window;
  if (tuner_) {
    for (const auto& t : step_ends) tuner_->StepEnded(t);
    window = tuner_->window();
    if (tuner_->decided() && !tuner_reported_) {
      tuner_reported_ = true;
      CADRE_LOG(INFO) << "rank 0: " << tuner_->Report();
      WriteBatchWindowLog();
    }
  } else {
    window = *options_.batch_wait;
  }
  if (announced_ == window) return std::nullopt;
  announced_ = window;
  return window;
}

void Engine::WriteBatchWindowLog() const {
  if (options_.batch_window_log.empty()) return;
  std::ofstream out(options_.batch_window_log, std::ios::trunc);
  // Horovod's autotune log is a CSV of the tried settings and their scores; here the setting is
  // the window and the score each scored step's time (the choice is the lowest median).
  out << "batch_wait_ms,step_ms\n";
  for (const auto& s : tuner_->samples()) {
    out << std::chrono::duration<double, std::milli>(s.window).count() << ","
        << std::chrono::duration<double, std::milli>(s.step).count() << "\n";
  }
  out.flush();
  if (!out) {
    CADRE_LOG(WARNING) << "could not write the batch window log " << options_.batch_window_log
                       << " (HOROVOD_AUTOTUNE_LOG)";
  }
}

void Engine::Wake() {
  wake_.store(true, std::memory_order_release);
  cv_.notify_all();
}

std::vector<Message> Engine::Exchange(const Message& mine) {
  const std::vector<uint8_t> bytes = mine.Encode();
  std::vector<uint8_t> slot(kSlotBytes, 0);
  const uint32_t len = static_cast<uint32_t>(bytes.size());
  std::memcpy(slot.data(), &len, 4);
  if (bytes.size() <= kSlotPayload) std::memcpy(slot.data() + 4, bytes.data(), bytes.size());
  std::vector<uint8_t> all(kSlotBytes * size_);
  comm::AllgatherOptions fixed;
  fixed.input = slot.data();
  fixed.output = all.data();
  fixed.counts.assign(static_cast<size_t>(size_), kSlotBytes);
  fixed.dtype = DataType::kUInt8;
  comm::Allgather(*comm_, fixed);
  std::vector<size_t> lens(size_);
  bool overflow = false;
  for (int r = 0; r < size_; ++r) {
    uint32_t l;
    std::memcpy(&l, all.data() + r * kSlotBytes, 4);
    lens[r] = l;
    overflow = overflow || l > kSlotPayload;
  }
  std::vector<Message> messages;
  if (!overflow) {
    for (int r = 0; r < size_; ++r) {
      messages.push_back(Message::Decode(all.data() + r * kSlotBytes + 4, lens[r], r));
    }
    return messages;
  }
  size_t total = 0;
  for (size_t l : lens) total += l;
  std::vector<uint8_t> full(total);
  comm::AllgatherOptions sized;
  sized.input = bytes.data();
  sized.output = full.data();
  sized.counts = lens;
  sized.dtype = DataType::kUInt8;
  comm::Allgather(*comm_, sized);
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    messages.push_back(Message::Decode(full.data() + offset, lens[r], r));
    offset += lens[r];
  }
  return messages;
}

void Engine::Execute(const Response& response) {
  if (response.kind == Response::Kind::kJoin) {
    std::shared_ptr<Handle> join;
    {
      std::lock_guard<std::mutex> lock(mu_);
      join.swap(join_handle_);
    }
    if (join) {
      join->set_join_rank(response.join_rank);
      join->Complete(Status::Ok());
    }
    return;
  }
  // Entries stay in pending_ (so their names stay reserved) until their handles complete.
  std::vector<TensorEntry*> local;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : response.names) {
      auto it = pending_.find(name);
      local.push_back(it == pending_.end() ? nullptr : &it->second);
    }
  }
  Status status = response.error;
  const bool run = response.kind == Response::Kind::kRun;
  const std::string op_name = run ? Timeline::Upper(OpTypeName(response.op)) : "ERROR";
  for (const std::string& name : response.names) {
    timeline_.NegotiateEnd(name);
    timeline_.Start(name, op_name);
    if (run) {
      timeline_.ActivityStart(name,
                              (response.inline_inputs.empty() ? "CADRE_" : "INLINE_") + op_name);
    }
  }
  if (run)
    executor_.Run(response, local);  // a communicator failure propagates, breaking the engine
  std::vector<std::shared_ptr<Handle>> done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& name : response.names) {
      auto it = pending_.find(name);
      if (it == pending_.end()) continue;
      // Every rank runs the same responses in the same order, and no rank can have joined
      // (Controller), so each external operation gets the same number everywhere.
      if (run && it->second.request.external) {
        it->second.handle->set_external_sequence(next_external_++);
      }
      done.push_back(it->second.handle);
      pending_.erase(it);
    }
  }
  for (size_t i = 0; i < response.names.size(); ++i) {
    const auto& mine = response.per_rank[i][rank_];
    timeline_.End(response.names[i], mine ? &*mine : nullptr);
  }
  for (auto& h : done) h->Complete(status);
}

void Engine::FailAll(const Status& status) {
  std::vector<std::shared_ptr<Handle>> handles;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (broken_.ok()) broken_ = status;
    for (auto& [name, entry] : pending_) handles.push_back(entry.handle);
    pending_.clear();
    fresh_.clear();
    fresh_payloads_.clear();
    if (join_handle_) handles.push_back(std::move(join_handle_));
    join_handle_.reset();
  }
  for (auto& h : handles) h->Complete(status);
}

void Engine::CheckStalls() {
  const auto now = Clock::now();
  if (now - last_stall_check_ < std::chrono::seconds(1)) return;
  last_stall_check_ = now;
  const std::vector<PendingName> pending = controller_.Pending();
  // Deadlocked: some rank is waited for, and every rank waited for has itself submitted a
  // pending name that another rank has not (so it is waiting too, unless it submits more without
  // waiting on its handles). Since when, across checks.
  std::vector<bool> waiting(static_cast<size_t>(size_), false), waited_for(waiting);
  for (const PendingName& p : pending) {
    if (p.missing_ranks.empty()) continue;
    std::vector<bool> missing(static_cast<size_t>(size_), false);
    for (int r : p.missing_ranks)
      missing[static_cast<size_t>(r)] = waited_for[static_cast<size_t>(r)] = true;
    for (int r = 0; r < size_; ++r) {
      if (!missing[static_cast<size_t>(r)]) waiting[static_cast<size_t>(r)] = true;
    }
  }
  bool deadlocked = false;
  for (int r = 0; r < size_; ++r) {
    if (!waited_for[static_cast<size_t>(r)]) continue;
    deadlocked = waiting[static_cast<size_t>(r)];
    if (!deadlocked) break;
  }
  if (!deadlocked) {
    deadlocked_since_.reset();
  } else if (!deadlocked_since_) {
    deadlocked_since_ = now;
  }
  const Duration deadlocked_for =
      deadlocked_since_ ? std::chrono::duration_cast<Duration>(now - *deadlocked_since_)
                        : Duration::zero();
  const bool deadlock_applies = options_.stall_deadlock > Duration::zero() && deadlocked_since_;
  std::string report;
  Duration oldest{};
  // A shutdown time below the warning time still applies: report from the earlier of the two.
  Duration report_after = options_.stall_warning;
  if (options_.stall_shutdown > Duration::zero()) {
    report_after = std::min(report_after, options_.stall_shutdown);
  }
  if (options_.stall_deadlock > Duration::zero()) {
    report_after = std::min(report_after, options_.stall_deadlock);
  }
  for (const PendingName& p : pending) {
    if (p.age < report_after || p.missing_ranks.empty()) continue;
    std::string missing, submitted;
    for (int r = 0, m = 0; r < size_; ++r) {
      const bool is_missing = m < static_cast<int>(p.missing_ranks.size()) &&
                              p.missing_ranks[static_cast<size_t>(m)] == r;
      if (is_missing) ++m;
      std::string& list = is_missing ? missing : submitted;
      list += (list.empty() ? "" : ", ") + std::to_string(r);
    }
    report += (report.empty() ? "" : "; ") + std::string("'") + p.name + "' (waiting " +
              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(p.age).count()) +
              " s) submitted by rank(s) " + submitted + ", missing from rank(s) " + missing;
    oldest = std::max(oldest, p.age);
  }
  if (!report.empty() && deadlock_applies) {
    report +=
        " (every rank waited for waits itself for a tensor another rank has not submitted: "
        "the ranks submitted different tensors)";
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stall_report_ = report;
  }
  if (report.empty()) return;
  if (rank_ == 0 && oldest >= options_.stall_warning &&
      now - last_stall_log_ >= options_.stall_warning) {
    Duration fails_at = options_.stall_shutdown;
    if (deadlock_applies && (fails_at <= Duration::zero() || options_.stall_deadlock < fails_at)) {
      fails_at = options_.stall_deadlock;
    }
    CADRE_LOG(WARNING)
        << "stalled tensors: some ranks submitted them and others did not: " << report
        << (fails_at > Duration::zero()
                ? "; every rank fails once stalled for " +
                      std::to_string(
                          std::chrono::duration_cast<std::chrono::seconds>(fails_at).count()) +
                      " s"
                : std::string());
    last_stall_log_ = now;
  }
  const bool past_shutdown =
      options_.stall_shutdown > Duration::zero() && oldest >= options_.stall_shutdown;
  const bool past_deadlock = deadlock_applies && deadlocked_for >= options_.stall_deadlock &&
                             oldest >= options_.stall_deadlock;
  if ((past_shutdown || past_deadlock) && abort_.ok()) {
    // Sent in the next exchange: every rank stops with this same error (Controller::Process).
    constexpr size_t kMaxReport = 4000;
    if (report.size() > kMaxReport) report = report.substr(0, kMaxReport) + " ...";
    abort_ =
        TimeoutError("rank " + std::to_string(rank_) + ": stalled past the " +
                     (past_deadlock && !past_shutdown ? "deadlock time" : "stall shutdown time") +
                     ": " + report);
  }
}

}  // namespace cadre::engine
