// Hierarchical allreduce on a Communicator (internal to comm/; callers reach it only through
// comm::Allreduce with AllreduceAlgorithm::kHierarchical, or kAuto where hosts hold several
// slots): the levels of hierarchical.h made of the communicator's own groups — the slots of this
// host (Local(), shared memory), then one ring per local slot across the hosts (Cross(), TCP),
// optionally split into a grid of hosts (DDL's multi-ring) whose subgroups the Hierarchy owns.
// The communication core's communicator builds one Hierarchy on its first hierarchical call,
// with its CommunicatorOptions::hierarchy, and keeps it.
//
// Large messages are pipelined (a helper thread runs the transfers between hosts while the
// calling thread works inside the host, see LeveledOptions and HierarchyOptions). A call's
// AllreduceOptions::segment_bytes, when not 0, sets its number of pipeline chunks
// (bytes / segment_bytes, rounded up, no limit) as well as the segment size of the ring between
// hosts; tests set it tiny to run many chunks.
//
// Topologies where hosts hold different numbers of ranks cannot be cut into equal levels: the
// flat ring over the whole communicator (logged once).
//
// Thread-safety: as Communicator — one thread at a time, every rank in the same order.
#pragma once

#include <memory>
#include <vector>

#include "cadre/comm/collective_options.h"
#include "cadre/comm/communicator.h"
#include "cadre/comm/hierarchical.h"

namespace cadre::comm {

class Hierarchy {
 public:
  // Collective over every rank of `comm` (creates the grid's subgroups). Throws cadre::Error:
  // InvalidArgument when host_grid does not multiply to the number of hosts (naming both).
  static std::unique_ptr<Hierarchy> Create(Communicator& comm, HierarchyOptions options = {});
  ~Hierarchy();

  // Sizes of the levels, innermost first: {slots per host, grid dims...}; {size} when flat.
  const std::vector<int>& levels() const { return levels_; }
  bool flat() const { return flat_; }

  // The communicators of its levels, innermost first (after a failure, to close them all).
  std::vector<Communicator*> communicators() const;

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
