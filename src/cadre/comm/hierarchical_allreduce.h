// Hierarchical allreduce on a Communicator: the levels of hierarchical.h made of the
// communicator's own groups — the slots of this host (Local(), shared memory), then one ring per
// local slot across the hosts (Cross(), TCP), optionally split into a grid of hosts.
//
// Two entry points:
// - HierarchicalAllreduce(comm, options): what Allreduce() runs for
//   AllreduceAlgorithm::kHierarchical. Two levels (slots, hosts); no state besides the
//   communicator's cached Local()/Cross(); pipelined with the default HierarchyOptions.
// - Hierarchy: an object built once per communicator that also owns the subgroups of a host grid
//   (DDL's multi-ring), for callers that keep it (cadre.ddl, benchmarks).
//
// Both pipeline large messages (a helper thread runs the transfers between hosts while the calling
// thread works inside the host, see LeveledOptions). A call's AllreduceOptions::segment_bytes,
// when not 0, sets its number of pipeline chunks (bytes / segment_bytes, rounded up, no limit)
// ("bytes per pipelined piece"; tests set it tiny to run many chunks), as well as the segment
// size of the ring between hosts.
//
// Topologies where hosts hold different numbers of ranks cannot be cut into equal levels: both
// fall back to the flat ring over the whole communicator (logged once by Hierarchy).
//
// Thread-safety: as Communicator — one thread at a time, every rank in the same order.
#pragma once

#include <memory>
#include <vector>

#include "cadre/comm/collectives.h"
#include "cadre/comm/communicator.h"
#include "cadre/comm/hierarchical.h"

namespace cadre::comm {

void HierarchicalAllreduce(Communicator& comm, const AllreduceOptions& options);

// Pipelining (LeveledOptions): messages are cut into chunks of at least kDefaultPipelineBytes
// times the number of hosts, at most kDefaultPipelineChunks. Every chunk's ring across the hosts
// pays its 2(hosts-1) steps' latency again, so a chunk must carry enough per step to hide it:
// per host link, a step moves about chunk / hosts. Measured on emulated 1 Gbit/s links with 1 ms
// delay (docs/benchmarks.md), 4 x 2 at 4 MiB took 64.6 ms in one pass and 80.8 ms in 4 chunks,
// while 2 x 2 at 16 MiB took 155.9 ms in 4 chunks and 164.7 in one pass. With 4 chunks the work
// inside the host that the links wait for (the first chunk's reduce-scatter, the last one's
// allgather, each 1/8 of the message) is under 1% of a large allreduce at 2 x 2.
inline constexpr size_t kDefaultPipelineBytes = 1 << 20;
inline constexpr size_t kDefaultPipelineChunks = 4;
// Between two hosts the level across them streams (StreamsPieces): its chunks overlap on the
// wire, a chunk adds no latency of its own, and only the work inside the host that the links
// wait for shrinks with smaller chunks. So the chunks are cut finer there: at 2 x 2 with 1 ms
// delay, 1 MiB took 10.5 ms in chunks of 64 KiB, 10.3 in 128 KiB, 10.7 in 256 KiB and 11.2 in
// one pass (docs/benchmarks.md).
inline constexpr size_t kDefaultStreamedPipelineBytes = 128 << 10;
inline constexpr size_t kDefaultStreamedPipelineChunks = 16;

struct HierarchyOptions {
  // How the hosts are arranged, innermost dimension first; the product must be the number of
  // hosts. Empty: ChooseHostGrid(hosts). {hosts} forces one ring across the hosts.
  std::vector<int> host_grid;
  // Chunks of at least pipeline_bytes x hosts (LeveledOptions::pipeline_bytes), at most
  // pipeline_chunks (max_chunks); where the level across the hosts streams, of at least
  // streamed_pipeline_bytes, at most streamed_pipeline_chunks. pipeline_bytes 0 turns
  // pipelining off. Every rank must pass the same.
  size_t pipeline_bytes = kDefaultPipelineBytes;
  size_t pipeline_chunks = kDefaultPipelineChunks;
  size_t streamed_pipeline_bytes = kDefaultStreamedPipelineBytes;
  size_t streamed_pipeline_chunks = kDefaultStreamedPipelineChunks;
};

class Hierarchy {
 public:
  // Collective over every rank of `comm` (creates the grid's subgroups). Throws cadre::Error:
  // InvalidArgument when host_grid does not multiply to the number of hosts (naming both).
  static std::unique_ptr<Hierarchy> Create(Communicator& comm, HierarchyOptions options = {});
  ~Hierarchy();

  // Sizes of the levels, innermost first: {slots per host, grid dims...}; {size} when flat.
  const std::vector<int>& levels() const { return levels_; }
  bool flat() const { return flat_; }

  // As Allreduce(); options.algorithm is ignored.
  void Allreduce(const AllreduceOptions& options);

 private:
  explicit Hierarchy(Communicator& comm) : comm_(comm) {}

  Communicator& comm_;
  bool flat_ = false;
  std::vector<int> levels_;
  std::vector<std::unique_ptr<Communicator>> grid_groups_;  // owned subgroups of Cross()
  // One per level of size > 1, innermost first; all are the .cc's CommLevel.
  std::vector<std::unique_ptr<HierarchyGroup>> groups_;
  HierarchyOptions options_;
  std::vector<unsigned char> scratch_;  // shards between levels, reused across calls
};

}  // namespace cadre::comm
