// Hierarchical (topology-aware) allreduce, the algorithm of IBM DDL.
//
// The ranks are seen as a grid of levels, innermost first: the slots of one host (shared memory),
// then the hosts, optionally arranged themselves as a grid of several dimensions (DDL's
// "multi-ring"). An allreduce of n elements is then
//   1. reduce-scatter inside the level-0 group (the host): each slot ends with n/L0 reduced
//      elements of its own shard;
//   2. the same, level by level, on the shard left by the level below;
//   3. allreduce of the remaining shard in the outermost group;
//   4. allgather back down, outermost level first.
// With levels {slots, hosts} the inter-host step is one ring per local slot, all running at once,
// each carrying 1/L0 of the data, so every host link is busy and no byte crosses a host link that
// could have been reduced inside the host first.
//
// This file is the algorithm over an abstract group (HierarchyGroup), so it can be tested with no
// transport; hierarchical_allreduce.h binds it to a Communicator.
//
// Counts need not divide: a group of size p splits m elements into p blocks, the first m % p one
// element larger (SplitCounts). Works for every DataType and ReduceOp the group's collectives do.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "cadre/base/status.h"
#include "cadre/comm/piece_stream.h"
#include "cadre/comm/types.h"

namespace cadre::comm {

// One group of ranks as the algorithm uses it: the three collectives it is built from, with the
// contracts of collectives.h (every member calls them in the same order, they throw cadre::Error
// naming the faulty peer, count zero is allowed).
class HierarchyGroup {
 public:
  virtual ~HierarchyGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `in` holds sum(counts) elements; `out` receives the reduction of block rank() across members.
  virtual void ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts,
                             DataType dtype, ReduceOp op) = 0;
  // Member r contributes counts[r] elements; `out` holds all of them in member order.
  virtual void Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                         DataType dtype) = 0;
  // In place.
  virtual void Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) = 0;
  // The allreduce of a message handed over piece by piece (piece_stream.h), as the level above
  // a pipelined one gets it. The default allreduces the pieces one after another (Allreduce on
  // each output, after copying its input there); a group that keeps several pieces in flight
  // overrides it and says so in streams(), and the pipeline then cuts its chunks finer.
  virtual void StreamedAllreduce(const PieceStream& stream, DataType dtype, ReduceOp op);
  virtual bool streams() const { return false; }
};

// Splits `count` elements into `parts` (>= 1) blocks as evenly as possible; the first
// count % parts blocks hold one element more.
std::vector<size_t> SplitCounts(size_t count, int parts);

struct LeveledOptions {
  // Pipelining. A message of more than `pipeline_bytes` is cut into ceil(bytes / pipeline_bytes)
  // chunks, at most `max_chunks` (0: no limit); from three chunks on, the first and the last are
  // smaller than the others (hierarchical_pipeline.cc says why). The calling thread runs the
  // innermost level's reduce-scatters, chunk after chunk, then its allgathers, while a helper
  // thread runs the levels above on each chunk as soon as it is reduce-scattered: the
  // allgathers of the first chunks (shared memory) overlap the inter-host transfers of the later
  // ones. Where the one level above streams (HierarchyGroup::streams()) its transfers overlap
  // one another too. pipeline_bytes 0: no pipelining (one pass, every level in turn). Every
  // rank must pass the same values (they decide the chunks, hence the calls every group sees).
  // The groups of the levels above the innermost are then used from the helper thread (one
  // thread at a time per group, as before), concurrently with the innermost group: they must not
  // share state with it (distinct communicators do not).
  size_t pipeline_bytes = 0;
  size_t max_chunks = 0;
  // Holds the shards between levels; kept by callers that run many allreduces, so that large
  // ones do not allocate and fault in fresh pages every time. Null: a temporary.
  std::vector<unsigned char>* scratch = nullptr;
};

// output = reduction over every rank of the grid of `input` (count elements each). `levels` are
// this rank's groups, innermost first; every rank passes groups of the same sizes in the same
// order, and the groups must form a grid (the members of a level-i group agree on their groups of
// every other level above i). Groups of size 1 are skipped. `input` may equal `output` (partial
// overlap is not allowed).
// Throws cadre::Error from the groups' collectives (from the helper thread's too, after it has
// stopped); InvalidArgument for a null group.
void LeveledAllreduce(std::span<HierarchyGroup* const> levels, const void* input, void* output,
                      size_t count, DataType dtype, ReduceOp op,
                      const LeveledOptions& options = {});

// The arrangement of `hosts` hosts as a grid chosen from the topology: one ring ({hosts}) for
// fewer than kMinGridHosts hosts or a prime count; otherwise two dimensions {a, hosts / a} with a
// the largest divisor not above sqrt(hosts) — the same bandwidth as one ring, 2(a-1) +
// 2(hosts/a - 1) latency steps instead of 2(hosts - 1). The grid moves its data in more
// phases that each wait for their slowest stream, so at 4 hosts, where it saves only 2 latency
// steps, it reached less of the link than the ring (measurements: docs/benchmarks.md); it is
// chosen where it saves at least 6 (8 hosts: 14 steps against 8).
inline constexpr int kMinGridHosts = 8;
std::vector<int> ChooseHostGrid(int hosts);

// Parses a grid written "AxBxC" (innermost first, e.g. "2x2"). Every dimension must be >= 1;
// the error names the offending part.
Status ParseGrid(std::string_view spec, std::vector<int>* dims);

// "2x3"-style text of a grid, for messages.
std::string GridToString(const std::vector<int>& dims);

}  // namespace cadre::comm
