// ServerState: the variables one parameter server holds, and the step bookkeeping of sync and
// async training. It knows nothing of gRPC: the service (service.cc) decodes requests into the
// plain structs below and encodes the Status it gets back as a gRPC status.
//
// Contracts:
// - Every call validates its whole request before changing anything; a failed call leaves the
//   state exactly as it was (no partial push, no half-declared variable).
// - Sync partitions: the gradients of step s are summed until every worker that has not said
//   done pushed once; then the update is applied exactly once (with the mean gradient, or the sum
//   for the "sum" optimizer) and the partition's step becomes s + 1. A push may carry the
//   learning rate and the other hyper-parameters per partition (schedules); every push of one
//   sync step must carry the same ones, which that step's update uses (a push without them means
//   the declared ones). A pull for
//   step s waits until the partition reached step s. A second push by the same worker for the same
//   step is refused.
// - Async partitions: each push is applied at once; pulls return the current values.
// - Every wait ends by the step timeout (an error naming the workers still missing) or by
//   Abort() (kAborted). Thread-safe: all methods may be called from many RPC threads at once.
// - Worker liveness: a worker that has not said done is presumed dead once it has had no call in
//   progress for `worker_timeout` (counted from construction for a worker never heard from);
//   WaitAllDone then fails (kIo) naming it, so a server whose workers died without saying done
//   does not wait forever.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/ps/optimizer.h"

namespace cadre::ps {

struct PartitionRef {
  std::string variable;
  int32_t index = 0;
  int64_t offset = 0;
  int64_t count = 0;
};

struct DeclareArgs {
  PartitionRef id;
  std::vector<int64_t> shape;  // of the whole variable
  std::string dtype;
  std::string_view initial;  // count float32 values, little-endian bytes
  OptimizerConfig optimizer;
  bool sync = true;
};

struct ChunkArgs {
  ChunkArgs() = default;
  ChunkArgs(PartitionRef i, std::string t, std::string_view d,
            std::optional<float> rate = std::nullopt,
            std::optional<OptimizerConfig> h = std::nullopt)
      : id(std::move(i)), dtype(std::move(t)), data(d), lr(rate), hyper(std::move(h)) {}
  PartitionRef id;
  std::string dtype;
  std::string_view data;    // count float32 values
  std::optional<float> lr;  // the learning rate of this update; none: hyper's, or the declared one
  // The other hyper-parameters of this update (its kind is ignored); none: the declared ones.
  std::optional<OptimizerConfig> hyper;
};

// One partition's optimizer state (checkpoints).
struct StateArgs {
  PartitionRef id;
  OptimizerState state;
};

// How long a worker may stay silent by default (see the liveness contract above): long enough for
// a worker's start-up, data loading or an evaluation pass between steps.
inline constexpr Duration kDefaultWorkerTimeout = std::chrono::seconds(600);
// The most value bytes one Pull may return by default (see Pull).
inline constexpr size_t kDefaultMaxReplyBytes = size_t{32} << 20;

class ServerState {
 public:
  ServerState(int num_workers, Duration step_timeout,
              Duration worker_timeout = kDefaultWorkerTimeout,
              size_t max_reply_bytes = kDefaultMaxReplyBytes);
  ~ServerState();

  int num_workers() const { return num_workers_; }

  // Creates the partitions that do not exist yet; an existing one keeps its value (the first
  // initial value wins) but must have been declared identically. created[i] tells which were new.
  Status Declare(int worker, const std::vector<DeclareArgs>& parts, std::vector<bool>* created);

  // Adds a worker's gradients for `step` (see the class contract).
  Status Push(int worker, int64_t step, const std::vector<ChunkArgs>& grads);

  // Calls `emit` for each requested partition, in order, with its values once it reached `step`
  // (sync) or at once (async). `emit` runs under the state's lock: it must only copy. A request
  // naming a partition twice, or asking for more than max_reply_bytes of values in all, is
  // refused (kInvalidArgument) before anything is emitted: a reply never grows past the bound.
  Status Pull(int worker, int64_t step, const std::vector<PartitionRef>& ids,
              const std::function<void(const PartitionRef&, std::span<const float>)>& emit);

  // Calls `emit` for each requested partition, in order, with its optimizer's state once it
  // reached `step` (sync; as Pull) or at once (async). Refuses as Pull does; `emit` runs under
  // the state's lock.
  Status GetState(int worker, int64_t step, const std::vector<PartitionRef>& ids,
                  const std::function<void(const PartitionRef&, const Optimizer&)>& emit);

  // Replaces the optimizer state of each partition named (a checkpoint's), all or nothing: every
  // entry is checked (existence, extent, the optimizer's kind and size) before any changes.
  Status SetState(int worker, std::vector<StateArgs> states);

  // A checkpoint across several servers and requests, all or nothing: the client stages every
  // piece on every server, then commits on all of them once every server accepted its pieces,
  // or discards on all of them when one refused. StageState checks the entries as SetState does
  // and keeps them for `worker`, changing nothing else (a later piece for the same partition
  // replaces an earlier one); CommitState applies everything `worker` staged (`commit`) or drops
  // it. A commit cannot be refused: what it applies was checked when staged.
  Status StageState(int worker, std::vector<StateArgs> states);
  Status CommitState(int worker, bool commit);

  // Marks `worker` done; sync steps stop waiting for it. Idempotent. *remaining = workers not done.
  Status WorkerDone(int worker, int* remaining);

  // Waits until every worker said done; kTimeout at the deadline, kAborted after Abort(), kIo
  // naming the workers presumed dead (see the liveness contract).
  Status WaitAllDone(const Deadline& deadline);

  // Wakes every waiter with kAborted; later waits fail at once. Called at shutdown.
  void Abort();

  // For tests and logs: the step a partition has reached, or -1 when it does not exist.
  int64_t PartitionStep(const std::string& variable, int32_t index) const;

 private:
  struct Part;
  class Activity;  // marks a worker's call in progress (liveness), RAII
  Status CheckWorker(int worker) const;
  // Workers not done, with no call in progress, silent since before `silent_since`. Needs mu_.
  std::vector<int> SilentWorkers(Clock::time_point silent_since) const;
  // Finds and checks a chunk's partition (existence, dtype, extent, payload size). Needs mu_.
  Status Lookup(const PartitionRef& id, const std::string& dtype, size_t bytes, Part** out) const;
  // Finds the partitions `ids` name, refusing unknown or repeated ones and replies past
  // max_reply_bytes (each partition counted `bytes_per_value` bytes per element), then waits
  // until each sync one reached `step`. Needs mu_ held by `lock`.
  Status Collect(const char* what, int64_t step, const std::vector<PartitionRef>& ids,
                 size_t bytes_per_value, std::unique_lock<std::mutex>& lock,
                 std::vector<Part*>* out);
  // Checks a checkpoint's entries (see SetState) and restores them onto copies of their
  // partitions' optimizers, changing nothing. Needs mu_.
  Status CheckStates(std::vector<StateArgs> states, std::vector<Part*>* targets,
                     std::vector<Optimizer>* restored) const;
  // Applies a sync partition's pending step when every live worker contributed. Needs mu_.
  void MaybeApply(Part& part);
  std::string MissingWorkers(const Part& part) const;
  static std::string Key(const std::string& variable, int32_t index);

  const int num_workers_;
  const Duration step_timeout_;
  const Duration worker_timeout_;
  const size_t max_reply_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::unique_ptr<Part>> parts_;  // GUARDED_BY(mu_)
  std::vector<bool> done_;                              // GUARDED_BY(mu_)
  int live_workers_;                                    // GUARDED_BY(mu_)
  std::vector<int> calls_in_progress_;                  // GUARDED_BY(mu_), per worker
  std::vector<Clock::time_point> last_seen_;            // GUARDED_BY(mu_), per worker
  // Per worker: checked optimizers staged by StageState, by partition key, until CommitState.
  std::vector<std::map<std::string, std::pair<Part*, Optimizer>>> staged_;  // GUARDED_BY(mu_)
  bool aborted_ = false;                                                    // GUARDED_BY(mu_)
};

}  // namespace cadre::ps
