// Collectives as options objects plus free functions (Gloo's shape). All of them:
// - are called by every rank of the communicator, in the same order;
// - accept in-place use where noted (input == output);
// - accept a count of zero (they still synchronise nothing and return at once);
// - throw cadre::Error (kTimeout, kIo, kProtocol, kMismatch) naming the faulty peer.
// Counts are in elements of `dtype`; buffers are plain host memory.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/comm/collective_options.h"
#include "cadre/comm/communicator.h"

namespace cadre::comm {

// What kAuto runs, given what the communicator is made of. Messages over shared memory (every
// rank on one host) always take shared memory's own algorithm, so this is about TCP:
// - kHierarchical when it is possible: hosts holding several ranks each (the same number), shared
//   memory on, more than one host;
// - kRecursiveDoubling for two ranks on two hosts, at any size: one exchange moves the ring's
//   bytes in half its steps, and over a network the extra reduction (the whole vector instead of
//   half) costs far less than a link's latency;
// - otherwise by size: kRecursiveDoubling up to kRecursiveDoublingMaxBytes (log p steps),
//   kHalvingDoubling up to kHalvingDoublingMaxBytes (2 log p steps, ring's bytes; not at p = 3,
//   where its fold makes it as many steps as the ring with more bytes), kRing above. (Across
//   hosts with link delay the ring, which pipelines its steps, is as fast as halving-doubling
//   for large messages and more predictable for smaller ones: docs/benchmarks.md.)
// A requested algorithm other than kAuto is kept, except kHierarchical where it is not possible,
// which becomes kRing (the flat ring is what it would degenerate to).
inline constexpr size_t kRecursiveDoublingMaxBytes = 16 << 10;
inline constexpr size_t kHalvingDoublingMaxBytes = 64 << 10;
struct AllreduceShape {
  int size = 1;                        // ranks
  size_t bytes = 0;                    // of the message
  bool hierarchical_possible = false;  // as above
  bool one_rank_per_host = false;      // every rank on its own host
};
AllreduceAlgorithm ChooseAllreduceAlgorithm(AllreduceAlgorithm requested,
                                            const AllreduceShape& shape);
// "auto", "ring", "halving_doubling", "recursive_doubling", "hierarchical"; kInvalidArgument
// listing them otherwise.
Status ParseAllreduceAlgorithm(std::string_view text, AllreduceAlgorithm* out);

// The shape of an allreduce of `bytes` on `comm`.
AllreduceShape ShapeOf(Communicator& comm, size_t bytes);

// The one entrance to every allreduce algorithm, the hierarchical one included (run with the
// communicator's HierarchyOptions over subgroups it creates on first use and keeps).
void Allreduce(Communicator& comm, const AllreduceOptions& options);

// See StreamedAllreduceOptions. StreamsPieces: whether `comm` keeps several pieces in flight.
void StreamedAllreduce(Communicator& comm, const StreamedAllreduceOptions& options);
bool StreamsPieces(Communicator& comm);

void Broadcast(Communicator& comm, const BroadcastOptions& options);

void Allgather(Communicator& comm, const AllgatherOptions& options);

void ReduceScatter(Communicator& comm, const ReduceScatterOptions& options);

void Alltoall(Communicator& comm, const AlltoallOptions& options);

void Barrier(Communicator& comm, std::optional<Duration> timeout = std::nullopt);

}  // namespace cadre::comm
