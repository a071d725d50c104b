// Collectives as options objects plus free functions (Gloo's shape). All of them:
// - are called by every rank of the communicator, in the same order;
// - accept in-place use where noted (input == output);
// - accept a count of zero (they still synchronise nothing and return at once);
// - throw cadre::Error (kTimeout, kIo, kProtocol, kMismatch) naming the faulty peer.
// Counts are in elements of `dtype`; buffers are plain host memory.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "cadre/base/deadline.h"
#include "cadre/base/status.h"
#include "cadre/comm/communicator.h"
#include "cadre/comm/piece_stream.h"
#include "cadre/comm/types.h"

namespace cadre::comm {

enum class AllreduceAlgorithm {
  kAuto,               // chosen by size and topology (ChooseAllreduceAlgorithm)
  kRing,               // reduce-scatter + allgather around a ring: bandwidth-optimal, large sizes
  kHalvingDoubling,    // recursive halving-doubling: 2 log(p) steps, small sizes
  kHierarchical,       // reduce-scatter inside hosts, ring across hosts, allgather inside
  kRecursiveDoubling,  // whole-vector exchanges: log(p) steps, tiny sizes and pairs of hosts
};

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
//   hosts with link delay the ring, which pipelines its steps, measured as fast as
//   halving-doubling from 512 KiB per host and more predictable below: at 4 hosts without
//   delay halving-doubling's 128 KiB shards took 3.4-6.4 ms by run, the ring's 3.2.)
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
// The shape of an allreduce of `bytes` on `comm`.
AllreduceShape ShapeOf(Communicator& comm, size_t bytes);

struct AllreduceOptions {
  const void* input = nullptr;  // may equal output
  void* output = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
  // Bytes per pipelined piece; 0 = the implementation's default. Tests set it tiny to force the
  // chunking paths.
  size_t segment_bytes = 0;
  std::optional<Duration> timeout;  // default: the communicator's
};
void Allreduce(Communicator& comm, const AllreduceOptions& options);

// The allreduce of a message handed over piece by piece (piece_stream.h). Between two ranks
// over TCP each piece's exchange starts as soon as the piece is ready, while the earlier ones
// are still on the wire, and a piece is done as soon as it is back (StreamsPieces() is true);
// otherwise the pieces are allreduced one after another, each as Allreduce would. Throws as
// Allreduce, and kAborted when the producer gives up; that breaks the communicator, so that the
// peers fail fast instead of waiting for the rest.
struct StreamedAllreduceOptions {
  PieceStream stream;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // Default: the communicator's; for the whole stream when streaming, else for each piece.
  std::optional<Duration> timeout;
};
void StreamedAllreduce(Communicator& comm, const StreamedAllreduceOptions& options);
bool StreamsPieces(Communicator& comm);

struct BroadcastOptions {
  void* buffer = nullptr;  // input on root, output elsewhere
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  std::optional<Duration> timeout;
};
void Broadcast(Communicator& comm, const BroadcastOptions& options);

// Every rank contributes counts[rank] elements; output holds all contributions in rank order
// (sum(counts) elements). Allgather is the case of equal counts.
struct AllgatherOptions {
  const void* input = nullptr;  // may point into output at this rank's slot
  void* output = nullptr;
  std::vector<size_t> counts;  // one per rank
  DataType dtype = DataType::kFloat32;
  std::optional<Duration> timeout;
};
void Allgather(Communicator& comm, const AllgatherOptions& options);

// input holds sum(counts) elements; rank r receives the reduction of block r (counts[r] elements).
struct ReduceScatterOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<size_t> counts;  // one per rank
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::optional<Duration> timeout;
};
void ReduceScatter(Communicator& comm, const ReduceScatterOptions& options);

// Rank r sends send_counts[j] elements to rank j (blocks in rank order) and receives
// recv_counts[j] from rank j. Every rank must agree: send_counts of j == recv_counts at j's peer.
struct AlltoallOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<size_t> send_counts;
  std::vector<size_t> recv_counts;
  DataType dtype = DataType::kFloat32;
  std::optional<Duration> timeout;
};
void Alltoall(Communicator& comm, const AlltoallOptions& options);

void Barrier(Communicator& comm, std::optional<Duration> timeout = std::nullopt);

}  // namespace cadre::comm
