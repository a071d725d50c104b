// The pipelined hierarchical allreduce (see LeveledOptions::pipeline_bytes).
//
// Calling thread (innermost level, e.g. the host's slots over shared memory):
//   RS(0) RS(1) ... RS(K-1) | wait X(0) AG(0) | wait X(1) AG(1) | ... | wait X(K-1) AG(K-1)
// Helper thread (the levels above, e.g. the exchange or ring across hosts):
//   X(0) X(1) ... X(K-1), each chunk's shard taken as soon as its RS is done
// The reduce-scatters come first because they need nothing from the network: the shards are
// ready long before the links could carry them, so the helper never waits on the host, and no
// rank ever waits for a transfer while holding up its host's slots (an allgather waits on the
// helper, the helper waits only on reduce-scatters, which wait on nothing). The host's
// allgather of chunk k overlaps the transfers of the chunks after it. Every group still sees
// its calls in one fixed order on every rank (the innermost RS(0..K-1), AG(0..K-1); the outer
// X(0), X(1), ...), so the collectives' ordering contract holds.
//
// With one level above the host, X is that level's StreamedAllreduce over all the chunks: a
// group that streams (two hosts over TCP) keeps several chunks on the wire at once, so the
// link's delay is paid once per message; others reduce chunk after chunk. With several levels
// above (a grid of hosts), each chunk runs OnePassAllreduce over them in turn.
//
// The links idle only while RS(0) runs, before the first transfer, and while AG(K-1) runs, after
// the last. So with three chunks or more the first and the last are smaller (1/(2K) of the
// message each, half an even share) and the ones in between share the rest: the pipeline fills
// and drains twice as fast, while a middle chunk's work inside the host (3x an edge chunk's at
// K = 4) still fits in the edge chunk's transfer time with a wide margin, even on emulated hosts
// that share their cores (measured: edges of 1/(4K) made 4 x 2 at 64 MiB erratic there).
#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "cadre/comm/hierarchical_pipeline.h"

namespace cadre::comm::internal {
namespace {

struct Chunk {
  size_t offset = 0;           // first element of the chunk in the message
  size_t count = 0;            // elements of the chunk
  std::vector<size_t> counts;  // how the innermost group splits the chunk
  size_t shard = 0;            // this rank's share: counts[rank]
  size_t shard_offset = 0;     // bytes into the scratch: the shard, reduced inside the host
  size_t result_offset = 0;    // and the shard reduced by the levels above
};

struct Plan {
  std::vector<Chunk> chunks;
  size_t shards_bytes = 0;  // the chunks' shards, then their results, one after the other
  size_t outer_bytes = 0;   // the helper's own scratch for the levels above, after the results
};

Plan MakePlan(std::span<HierarchyGroup* const> levels, size_t count, size_t esize, size_t chunks) {
  Plan p;
  std::vector<size_t> sizes;
  if (chunks < 3) {
    sizes = SplitCounts(count, static_cast<int>(chunks));
  } else {  // chunks <= count, so every chunk gets at least one element
    const size_t edge = std::max<size_t>(1, count / (2 * chunks));
    sizes = SplitCounts(count - 2 * edge, static_cast<int>(chunks - 2));
    sizes.insert(sizes.begin(), edge);
    sizes.push_back(edge);
  }
  const auto me = static_cast<size_t>(levels[0]->rank());
  size_t offset = 0, largest = 0;
  for (size_t k = 0; k < chunks; ++k) {
    Chunk c;
    c.offset = offset;
    c.count = sizes[k];
    c.counts = SplitCounts(c.count, levels[0]->size());
    c.shard = c.counts[me];
    c.shard_offset = p.shards_bytes;
    p.shards_bytes += c.shard * esize;
    largest = std::max(largest, c.shard);
    offset += c.count;
    p.chunks.push_back(std::move(c));
  }
  for (Chunk& c : p.chunks) c.result_offset = c.shard_offset + p.shards_bytes;
  p.shards_bytes *= 2;
  // The scratch a level's shard needs grows with the shard, so the largest shard's suffices.
  p.outer_bytes = OnePassScratchBytes(levels.subspan(1), largest, esize);
  return p;
}

// What the two threads share. The helper waits for `ready`, the caller for `done`; neither wait
// needs its own timeout: the other thread always advances or stops, since every collective it
// runs is bounded by its group's timeout and both threads stop at the first error.
class Handoff {
 public:
  // Caller: chunk k has been reduce-scattered.
  void MarkReady(size_t k) {
    std::lock_guard lock(mu_);
    ready_ = k + 1;
    cv_.notify_all();
  }
  // Caller, failing: why, for the helper's error (PieceStream::why_stopped).
  void StopBecause(const Status& why) {
    std::lock_guard lock(mu_);
    why_ = why;
    stop_ = true;
    cv_.notify_all();
  }
  Status why() {
    std::lock_guard lock(mu_);
    return why_;
  }
  // Caller, on leaving (normally or by an exception): the helper takes no further chunk.
  void Stop() {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  // Helper: whether chunk k is ready (PieceStream::ready): with `wait`, blocks until it is or
  // the caller stops, and false then means stop.
  bool Ready(size_t k, bool wait) {
    std::unique_lock lock(mu_);
    if (wait) cv_.wait(lock, [&] { return stop_ || ready_ > k; });
    return !stop_ && ready_ > k;
  }
  void Done(size_t k) {
    std::lock_guard lock(mu_);
    done_ = k + 1;
    cv_.notify_all();
  }
  void Failed(std::exception_ptr e) {
    std::lock_guard lock(mu_);
    error_ = std::move(e);
    cv_.notify_all();
  }
  // Caller: returns null when chunk k is reduced across the levels above, else the helper's
  // error. A chunk finished before the error still counts as done, so every rank of the host
  // stops at the same chunk (the one whose transfer failed), whenever it learns of the error.
  std::exception_ptr AwaitDone(size_t k) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return error_ != nullptr || done_ > k; });
    return done_ > k ? nullptr : error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  size_t ready_ = 0;          // GUARDED_BY(mu_)
  size_t done_ = 0;           // GUARDED_BY(mu_)
  bool stop_ = false;         // GUARDED_BY(mu_)
  Status why_;                // GUARDED_BY(mu_)
  std::exception_ptr error_;  // GUARDED_BY(mu_)
};

// Joins the helper however the caller leaves, after telling it to stop waiting for chunks.
class JoinOnExit {
 public:
  JoinOnExit(Handoff& h, std::thread& t) : h_(h), t_(t) {}
  ~JoinOnExit() {
    h_.Stop();
    if (t_.joinable()) t_.join();
  }
  JoinOnExit(const JoinOnExit&) = delete;
  JoinOnExit& operator=(const JoinOnExit&) = delete;

 private:
  Handoff& h_;
  std::thread& t_;
};

}  // namespace

size_t PipelinedScratchBytes(std::span<HierarchyGroup* const> levels, size_t count, size_t esize,
                             size_t chunks) {
  const Plan p = MakePlan(levels, count, esize, chunks);
  // Also enough for the one-pass fallback when no helper thread can be started.
  return std::max(p.shards_bytes + p.outer_bytes, OnePassScratchBytes(levels, count, esize));
}

void PipelinedAllreduce(std::span<HierarchyGroup* const> levels, const void* input, void* output,
                        size_t count, DataType dtype, ReduceOp op, size_t chunks,
                        unsigned char* scratch) {
  const size_t esize = ElementSize(dtype);
  const Plan plan = MakePlan(levels, count, esize, chunks);
  HierarchyGroup* inner = levels[0];
  const std::span<HierarchyGroup* const> outer = levels.subspan(1);
  unsigned char* outer_scratch = scratch + plan.shards_bytes;
  const auto* in = static_cast<const unsigned char*>(input);
  auto* out = static_cast<unsigned char*>(output);

  Handoff handoff;
  std::thread helper;
  auto shard = [&](const Chunk& c) { return scratch + c.shard_offset; };
  auto result = [&](const Chunk& c) { return scratch + c.result_offset; };
  auto work = [&] {
    try {
      if (outer.size() == 1) {
        PieceStream stream;
        for (const Chunk& c : plan.chunks) {
          stream.inputs.push_back(shard(c));
          stream.outputs.push_back(result(c));
          stream.counts.push_back(c.shard);
        }
        stream.ready = [&](size_t k, bool wait) { return handoff.Ready(k, wait); };
        stream.done = [&](size_t k) { handoff.Done(k); };
        stream.why_stopped = [&] { return handoff.why(); };
        outer[0]->StreamedAllreduce(stream, dtype, op);
        return;
      }
      for (size_t k = 0; k < plan.chunks.size(); ++k) {
        if (!handoff.Ready(k, /*wait=*/true)) return;
        const Chunk& c = plan.chunks[k];
        OnePassAllreduce(outer, shard(c), result(c), c.shard, dtype, op, outer_scratch);
        handoff.Done(k);
      }
    } catch (...) {
      handoff.Failed(std::current_exception());
    }
  };
  try {
    helper = std::thread(work);
  } catch (const std::system_error&) {
    // No thread to be had (resource limits): the same result in one pass, only slower.
    OnePassAllreduce(levels, input, output, count, dtype, op, scratch);
    return;
  }
  JoinOnExit join(handoff, helper);

  try {
    for (size_t k = 0; k < plan.chunks.size(); ++k) {
      const Chunk& c = plan.chunks[k];
      inner->ReduceScatter(in + c.offset * esize, shard(c), c.counts, dtype, op);
      handoff.MarkReady(k);
    }
  } catch (const Error& e) {
    handoff.StopBecause(e.status());
    throw;
  }
  for (size_t k = 0; k < plan.chunks.size(); ++k) {
    if (std::exception_ptr e = handoff.AwaitDone(k)) std::rethrow_exception(e);
    const Chunk& c = plan.chunks[k];
    inner->Allgather(result(c), out + c.offset * esize, c.counts, dtype);
  }
}

}  // namespace cadre::comm::internal
