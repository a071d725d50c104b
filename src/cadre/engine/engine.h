// Engine: Horovod's background engine as an object. Framework threads submit named operations
// on host buffers and get Handles; one background thread per Engine negotiates with the other
// ranks (controller.h), fuses small allreduces (operations.h) and completes the handles.
//
// Contracts:
// - Enqueue* and Join are thread-safe and never block on the network. A name may be pending only
//   once per rank: a second submission of a pending name throws Error(kAlreadyExists).
// - The caller's buffers must stay valid and untouched until the handle completes.
// - Mismatched submissions (same name, different op/dtype/shape/...) complete the handle with
//   Error(kMismatch) on every rank, with each rank's description; the engine stays usable.
// - A failure of the communicator (a dead or stalled rank) completes every pending handle with that
//   error (naming the rank) and breaks the engine: later submissions throw it at once.
// - A name pending on some ranks but not others for longer than stall_warning is logged (by rank
//   0) naming the missing ranks; after stall_shutdown (30 min by default, see
//   kDefaultStallShutdown) every rank's engine fails with that report: a rank that never submits
//   cannot hang the job. Only an explicit zero stall_shutdown waits forever.
// - A stall in which every rank that others wait for is itself waiting for a name that another
//   rank has not submitted (ranks submitted different names, e.g. an extra allreduce on one rank:
//   a deadlock unless a rank submits more without waiting) fails every rank once it has lasted
//   stall_deadlock (5 min by default, kDefaultStallDeadlock), well before stall_shutdown. A rank
//   that is merely slow (submitted nothing the others lack) does not make one.
// - Shutdown() (or destruction) on any rank stops every rank's engine: pending handles everywhere
//   complete with Error(kAborted).
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/comm/collective_options.h"
#include "cadre/comm/communicator.h"
#include "cadre/engine/batch_window.h"
#include "cadre/engine/controller.h"
#include "cadre/engine/handle.h"
#include "cadre/engine/operations.h"
#include "cadre/engine/request.h"
#include "cadre/engine/timeline.h"

namespace cadre::engine {

// How long a name may be pending on some ranks but not on others before every rank fails with
// the stall report. A rank that is merely slow must not be killed: the common case is rank 0
// evaluating a model alone while the others wait at the next allreduce. 30 minutes is
// torch.distributed's default collective timeout, the bound PyTorch users already plan around;
// a real hang ends then instead of never. HOROVOD_STALL_SHUTDOWN_TIME_SECONDS overrides it.
inline constexpr Duration kDefaultStallShutdown = std::chrono::minutes(30);

// How long a deadlocked stall (see the header comment: every rank waited for waits itself) may
// last before every rank fails with the stall report. A rank evaluating alone has nothing
// pending, so it never makes one; ranks whose submissions cross (gradients in different orders)
// untangle within a cycle. Five checks' worth of warnings at the default check time.
inline constexpr Duration kDefaultStallDeadlock = std::chrono::minutes(5);

// The engine's tunables, as values with their defaults here. The HOROVOD_*/CADRE_* variables that
// set them are read at the edges only (config::EngineOptionsFromEnv, docs/environment.md).
struct EngineOptions {
  // How long the background thread sleeps between negotiation cycles when nothing is submitted;
  // a submission wakes it at once. Microseconds: Horovod's HOROVOD_CYCLE_TIME (milliseconds)
  // may be fractional.
  std::chrono::microseconds cycle_time = std::chrono::milliseconds(5);
  // When only batchable submissions are queued (Enqueue's `batchable`: gradients from backward
  // hooks), wait this long for more before negotiating, so one cycle fuses them; any other
  // submission or a Flush() ends the wait. Unset (the default): measured, rank 0's
  // BatchWindowTuner (batch_window.h) tries batch_window_tuning's candidates over the first
  // steps and keeps the fastest. A value: that fixed window (zero disables). Either way rank 0's
  // window is every rank's (controller.h, step 6). CADRE_BATCH_WAIT_MS: `auto` or milliseconds.
  std::optional<std::chrono::microseconds> batch_wait;
  BatchWindowTuner::Options batch_window_tuning;
  // When non-empty, rank 0 writes the measured window's samples there as CSV once it has chosen
  // (HOROVOD_AUTOTUNE_LOG).
  std::string batch_window_log;
  // Consecutive idle cycles (nothing submitted or pending anywhere) sleep longer, up to this.
  std::chrono::microseconds idle_cycle_time_max = std::chrono::milliseconds(50);
  size_t fusion_threshold_bytes = size_t{64} << 20;
  // Fused allreduces are packed, reduced and unpacked in pieces of this size (cache-sized; one
  // collective over a whole 64 MiB buffer measured several times slower on CPUs).
  size_t fusion_segment_bytes = size_t{4} << 20;
  // Larger allreduces skip the fusion buffer (reduced in place, no copies): on CPUs the copies
  // of a large tensor cost more than the per-collective latency fusion saves.
  size_t fusion_tensor_limit_bytes = size_t{1} << 20;
  size_t cache_capacity = 1024;
  // Allreduces of at most this many bytes travel inside the negotiation message and are reduced
  // locally (Controller): one exchange instead of two. Each message carries at most
  // inline_message_bytes of them so it still fits its slot. CADRE_INLINE_BYTES; 0 disables.
  size_t inline_bytes = 256;
  size_t inline_message_bytes = 512;
  // After a cycle with work, the engine thread polls for the next submission this long before
  // it sleeps, and callers poll a handle this long before they sleep on it (CADRE_SPIN_US; 0
  // disables). Waking a sleeping thread costs about as much as a small collective between two
  // processes, and a small allreduce crosses two such hand-offs (caller to engine and back).
  // Polling yields the core at every check, so it only takes time no other thread wants.
  std::chrono::microseconds spin{50};
  Duration stall_warning = std::chrono::seconds(60);
  Duration stall_shutdown = kDefaultStallShutdown;  // zero: never fail stalled tensors
  Duration stall_deadlock = kDefaultStallDeadlock;  // zero: only stall_shutdown applies
  // Horovod's timeline file, written by rank 0 when non-empty (timeline.h); with
  // timeline_mark_cycles every negotiation cycle is marked.
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  // The algorithm of every allreduce the engine runs (comm::Allreduce): kAuto lets comm choose
  // by size and topology (hierarchical when hosts hold several slots each).
  comm::AllreduceAlgorithm allreduce_algorithm = comm::AllreduceAlgorithm::kAuto;
};

class Engine {
 public:
  // The engine owns `comm` and is its only user (its background thread).
  Engine(std::unique_ptr<comm::Communicator> comm, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const EngineOptions& options() const { return options_; }

  // `data` is the input (and, for allreduce and broadcast, the output) of request.num_elements()
  // elements. Throws Error(kInvalidArgument) on a malformed request, Error(kAlreadyExists) on a
  // pending name, the engine's failure when it is broken.
  // `batchable`: latency does not matter for this one (see EngineOptions::batch_wait).
  std::shared_ptr<Handle> Enqueue(Request request, void* data, bool batchable = false);
  // Completes when every rank has joined; handle->join_rank() is the rank that joined last.
  std::shared_ptr<Handle> Join();

  // Ends the batch wait: batchable submissions queued so far are negotiated in the next cycle
  // without waiting for more (DistributedOptimizer calls it once backward has submitted every
  // gradient and step() starts waiting for them). Also the end of a training step for the
  // measured batch window: call it once per step.
  void Flush();

  // The batching window this rank uses now: rank 0's, from the cycle it was announced in.
  std::chrono::microseconds batch_window() const {
    return std::chrono::microseconds(batch_window_us_.load(std::memory_order_relaxed));
  }

  // Stops this engine and, through the next negotiation, every rank's. Idempotent.
  void Shutdown();

  // Horovod's timeline of rank 0's view of the operations (a no-op on other ranks, as in
  // Horovod, whose coordinator alone writes it); an empty path stops it.
  void StartTimeline(const std::string& path, bool mark_cycles);
  void StopTimeline();

  // Pending names with their missing ranks ("" when none): what the stall inspector would log.
  std::string StallReport() const;

 private:
  void Loop();
  // One negotiation cycle; throws cadre::Error when the communicator fails. False after shutdown.
  bool RunCycle();
  // Tells the engine thread that something it waits for has changed: sets wake_ (its polling)
  // and notifies cv_ (its sleep).
  void Wake();
  std::vector<Message> Exchange(const Message& mine);
  void Execute(const Response& response);
  void FailAll(const Status& status);
  void CheckStalls();
  // Rank 0: the window to announce in this cycle's message (nullopt when unchanged), after
  // feeding the tuner the ends of steps since the last cycle.
  std::optional<std::chrono::microseconds> NextAnnouncement(
      const std::vector<Clock::time_point>& step_ends);
  void WriteBatchWindowLog() const;

  const int rank_;
  const int size_;
  const EngineOptions options_;
  std::unique_ptr<comm::Communicator> comm_;  // engine thread only
  Controller controller_;                     // engine thread only
  Executor executor_;                         // engine thread only

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Request> fresh_;                            // GUARDED_BY(mu_): not yet negotiated
  std::vector<std::vector<uint8_t>> fresh_payloads_;      // GUARDED_BY(mu_): inline inputs
  std::unordered_map<std::string, TensorEntry> pending_;  // GUARDED_BY(mu_)
  std::shared_ptr<Handle> join_handle_;                   // GUARDED_BY(mu_)
  int fresh_urgent_ = 0;  // GUARDED_BY(mu_): non-batchable in fresh_
  // Set with any change the engine thread waits for (a submission, flush, join, shutdown), for
  // its polling before it sleeps (EngineOptions::spin); cleared by it under mu_.
  std::atomic<bool> wake_{false};
  bool flush_requested_ = false;              // GUARDED_BY(mu_): see Flush()
  std::vector<Clock::time_point> step_ends_;  // GUARDED_BY(mu_): Flush() times, for tuner_
  bool shutdown_requested_ = false;           // GUARDED_BY(mu_)
  Status broken_;                             // GUARDED_BY(mu_)
  std::string stall_report_;                  // GUARDED_BY(mu_)
  Timeline timeline_;                         // thread-safe itself
  Clock::time_point last_stall_log_{};        // engine thread only
  std::chrono::microseconds idle_wait_;       // engine thread only
  int64_t next_external_ = 0;                 // engine thread only (Request::external)
  Status abort_;                              // engine thread only: sent to every rank, then stop
  Clock::time_point last_stall_check_{};      // engine thread only
  std::optional<Clock::time_point> deadlocked_since_;  // engine thread only (CheckStalls)
  // Rank 0 with a measured window only (else null): engine thread only.
  std::unique_ptr<BatchWindowTuner> tuner_;
  std::optional<std::chrono::microseconds> announced_;  // engine thread only (rank 0)
  bool tuner_reported_ = false;                         // engine thread only (rank 0)
  // Written by the engine thread, read by it and by batch_window().
  std::atomic<int64_t> batch_window_us_{0};
  std::thread thread_;
};

}  // namespace cadre::engine
