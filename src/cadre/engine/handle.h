// Handle: the asynchronous result of one operation submitted to the engine (c10d's Work).
//
// The engine's background thread completes a handle exactly once, with OK or with the error that
// stopped the operation; framework threads poll or wait on it. Operations whose output size is
// only known after negotiation (allgather, alltoall, reducescatter) leave their result in the
// handle's output buffer with its shape; the others write into the caller's buffer.
// Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"

namespace cadre::engine {

// Polls `flag` for up to `budget`, yielding the core at every check (to the thread that will set
// it, when they share a core); true once it is set. The engine's waits poll like this before
// they sleep (EngineOptions::spin).
bool PollFlag(const std::atomic<bool>& flag, std::chrono::microseconds budget);

class Handle {
 public:
  // `spin`: how long Wait() polls before it sleeps (EngineOptions::spin).
  explicit Handle(std::chrono::microseconds spin = {}) : spin_(spin) {}
  bool done() const;
  // Waits up to `timeout`; true when the handle is complete. Polls (yielding the core) for up
  // to the spin time first: most small collectives end within it, and a thread woken from a
  // futex sleep takes as long to run again as a small collective takes to complete.
  bool Wait(Duration timeout) const;
  // The stored result; meaningful once done().
  Status status() const;

  // Engine-owned output (see above). Read only after done().
  std::vector<uint8_t>& output() { return output_; }
  std::vector<int64_t>& output_shape() { return output_shape_; }
  // alltoall: rows received from each rank.
  std::vector<int64_t>& received_splits() { return received_splits_; }
  // join(): the rank that joined last. Read only after done().
  int join_rank() const { return join_rank_; }
  void set_join_rank(int rank) { join_rank_ = rank; }
  // Request::external: 0, 1, 2, ... in the order the engine completed its external operations,
  // the same on every rank; -1 for other operations and failed ones. Read only after done().
  int64_t external_sequence() const { return external_sequence_; }
  void set_external_sequence(int64_t n) { external_sequence_ = n; }

  void Complete(Status status);

 private:
  const std::chrono::microseconds spin_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  // Set once, under mu_ (so that cv_'s waiters cannot miss it), with release after status_ is
  // stored; read without the lock by done() and Wait()'s polling.
  std::atomic<bool> done_{false};
  Status status_;  // GUARDED_BY(mu_)
  // Written by the engine thread before Complete(), read by others after done(): done_'s
  // release store and acquire loads order the accesses.
  std::vector<uint8_t> output_;
  std::vector<int64_t> output_shape_;
  std::vector<int64_t> received_splits_;
  int join_rank_ = -1;
  int64_t external_sequence_ = -1;
};

}  // namespace cadre::engine
