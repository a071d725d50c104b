// What every collective takes: the algorithm choice and one options struct per collective
// (Gloo's shape). The contracts of the calls themselves are in collectives.h; the options of a
// communicator's hierarchical allreduce (HierarchyOptions) are here too, as they travel in
// CommunicatorOptions.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "cadre/base/deadline.h"
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

struct BroadcastOptions {
  void* buffer = nullptr;  // input on root, output elsewhere
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  std::optional<Duration> timeout;
};

// Every rank contributes counts[rank] elements; output holds all contributions in rank order
// (sum(counts) elements). Allgather is the case of equal counts.
struct AllgatherOptions {
  const void* input = nullptr;  // may point into output at this rank's slot
  void* output = nullptr;
  std::vector<size_t> counts;  // one per rank
  DataType dtype = DataType::kFloat32;
  std::optional<Duration> timeout;
};

// input holds sum(counts) elements; rank r receives the reduction of block r (counts[r] elements).
struct ReduceScatterOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<size_t> counts;  // one per rank
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::optional<Duration> timeout;
};

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

// Pipelining of the hierarchical allreduce (hierarchical.h's LeveledOptions): messages are cut
// into chunks of at least kDefaultPipelineBytes times the number of hosts, at most
// kDefaultPipelineChunks. Every chunk's ring across the hosts pays its 2(hosts-1) steps' latency
// again, so a chunk must carry enough per step to hide it. Between two hosts the level across
// them streams (StreamsPieces): its chunks overlap on the wire and add no latency of their own,
// so they are cut finer. The measurements behind these defaults: docs/benchmarks.md.
inline constexpr size_t kDefaultPipelineBytes = 1 << 20;
inline constexpr size_t kDefaultPipelineChunks = 4;
inline constexpr size_t kDefaultStreamedPipelineBytes = 128 << 10;
inline constexpr size_t kDefaultStreamedPipelineChunks = 16;

// How a communicator runs AllreduceAlgorithm::kHierarchical. Every rank must pass the same.
struct HierarchyOptions {
  // How the hosts are arranged, innermost dimension first; the product must be the number of
  // hosts (else the first hierarchical allreduce throws kInvalidArgument naming both). Empty:
  // ChooseHostGrid(hosts). {hosts} forces one ring across the hosts.
  std::vector<int> host_grid;
  // Chunks of at least pipeline_bytes x hosts (LeveledOptions::pipeline_bytes), at most
  // pipeline_chunks (max_chunks); where the level across the hosts streams, of at least
  // streamed_pipeline_bytes, at most streamed_pipeline_chunks. pipeline_bytes 0 turns
  // pipelining off. A call's AllreduceOptions::segment_bytes, when not 0, sets its number of
  // chunks instead (bytes / segment_bytes, rounded up, no limit).
  size_t pipeline_bytes = kDefaultPipelineBytes;
  size_t pipeline_chunks = kDefaultPipelineChunks;
  size_t streamed_pipeline_bytes = kDefaultStreamedPipelineBytes;
  size_t streamed_pipeline_chunks = kDefaultStreamedPipelineChunks;
};

}  // namespace cadre::comm
