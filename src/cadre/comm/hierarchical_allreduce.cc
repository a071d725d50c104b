#include "cadre/comm/hierarchical_allreduce.h"

#include <cstring>
#include <span>
#include <string>

#include "cadre/base/logging.h"
#include "cadre/comm/collectives.h"

namespace cadre::comm {

namespace {

// One level of the hierarchy: a communicator seen through HierarchyGroup. The inner allreduce
// runs with kAuto, which picks ring or halving-doubling: a level's communicator is either on one
// host or has one rank per host, so kAuto never selects kHierarchical again there.
class CommLevel final : public HierarchyGroup {
 public:
  CommLevel(Communicator& comm, AllreduceAlgorithm algorithm)
      : comm_(comm), algorithm_(algorithm) {}
  void set_call(const AllreduceOptions& o) {
    timeout_ = o.timeout;
    segment_bytes_ = o.segment_bytes;
  }

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Communicator& comm() const { return comm_; }

  void ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                     ReduceOp op) override {
    ReduceScatterOptions o;
    o.input = in;
    o.output = out;
    o.counts = counts;
    o.dtype = dtype;
    o.op = op;
    o.timeout = timeout_;
    comm::ReduceScatter(comm_, o);
  }
  void Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                 DataType dtype) override {
    AllgatherOptions o;
    o.input = in;
    o.output = out;
    o.counts = counts;
    o.dtype = dtype;
    o.timeout = timeout_;
    comm::Allgather(comm_, o);
  }
  void Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) override {
    AllreduceOptions o;
    o.input = buffer;
    o.output = buffer;
    o.count = count;
    o.dtype = dtype;
    o.op = op;
    o.algorithm = algorithm_;
    o.segment_bytes = segment_bytes_;
    o.timeout = timeout_;
    comm::Allreduce(comm_, o);
  }
  void StreamedAllreduce(const PieceStream& stream, DataType dtype, ReduceOp op) override {
    StreamedAllreduceOptions o;
    o.stream = stream;
    o.dtype = dtype;
    o.op = op;
    o.timeout = timeout_;
    comm::StreamedAllreduce(comm_, o);
  }
  bool streams() const override { return StreamsPieces(comm_); }

 private:
  Communicator& comm_;
  const AllreduceAlgorithm algorithm_;
  std::optional<Duration> timeout_;
  size_t segment_bytes_ = 0;
};

void FlatAllreduce(Communicator& comm, const AllreduceOptions& options) {
  AllreduceOptions flat = options;
  flat.algorithm = AllreduceAlgorithm::kRing;
  Allreduce(comm, flat);
}

// The pipelining of one call over `levels` (see the header): chunks of at least pipeline_bytes
// per host, or streamed_pipeline_bytes where the one level above the host streams; the call's
// segment_bytes, when set, overrides.
LeveledOptions Pipelining(const AllreduceOptions& o, const HierarchyOptions& h, int hosts,
                          std::span<HierarchyGroup* const> levels) {
  LeveledOptions l;
  if (h.pipeline_bytes == 0) return l;
  if (o.segment_bytes != 0) {
    l.pipeline_bytes = o.segment_bytes;
    return l;
  }
  if (levels.size() == 2 && levels[1]->streams()) {
    l.pipeline_bytes = h.streamed_pipeline_bytes;
    l.max_chunks = h.streamed_pipeline_chunks;
  } else {
    l.pipeline_bytes = h.pipeline_bytes * static_cast<size_t>(hosts);
    l.max_chunks = h.pipeline_chunks;
  }
  return l;
}

}  // namespace

Hierarchy::~Hierarchy() = default;

std::unique_ptr<Hierarchy> Hierarchy::Create(Communicator& comm, HierarchyOptions options) {
  std::unique_ptr<Hierarchy> h(new Hierarchy(comm));
  h->options_ = options;
  const Topology& t = comm.topology();
  if (!t.homogeneous) {
    CADRE_LOG(WARNING) << "hierarchical allreduce: hosts hold different numbers of ranks; using "
                          "the flat ring over all "
                       << t.size << " ranks";
    h->flat_ = true;
    h->levels_ = {t.size};
    return h;
  }
  std::vector<int> grid =
      options.host_grid.empty() ? ChooseHostGrid(t.cross_size) : options.host_grid;
  int product = 1;
  for (int d : grid) {
    if (d < 1)
      throw Error(
          InvalidArgument("host grid " + GridToString(grid) + ": every dimension must be >= 1"));
    product *= d;
  }
  if (product != t.cross_size) {
    throw Error(InvalidArgument("host grid " + GridToString(grid) + " holds " +
                                std::to_string(product) + " hosts, the communicator has " +
                                std::to_string(t.cross_size)));
  }
  h->levels_.push_back(t.local_size);
  h->levels_.insert(h->levels_.end(), grid.begin(), grid.end());

  if (t.local_size > 1) {
    h->groups_.push_back(std::make_unique<CommLevel>(comm.Local(), AllreduceAlgorithm::kAuto));
  }
  if (t.cross_size == 1) return h;
  Communicator& cross = comm.Cross();
  if (grid.size() == 1) {
    h->groups_.push_back(std::make_unique<CommLevel>(cross, AllreduceAlgorithm::kAuto));
    return h;
  }
  // Host c sits at coordinates c % d0, (c / d0) % d1, ...; its group along dimension d is the
  // hosts that differ from it only in coordinate d, in the order of that coordinate. Every rank
  // creates its groups dimension by dimension, so the collective creations cannot cross.
  std::vector<int> coord, stride;
  for (int c = cross.rank(), s = 1, d = 0; d < static_cast<int>(grid.size()); ++d) {
    coord.push_back(c % grid[static_cast<size_t>(d)]);
    stride.push_back(s);
    c /= grid[static_cast<size_t>(d)];
    s *= grid[static_cast<size_t>(d)];
  }
  for (size_t d = 0; d < grid.size(); ++d) {
    const int base = cross.rank() - coord[d] * stride[d];
    std::vector<int> members;
    for (int k = 0; k < grid[d]; ++k) members.push_back(base + k * stride[d]);
    const std::string name = "hier-" + GridToString(grid) + "-slot" + std::to_string(t.local_rank) +
                             "-dim" + std::to_string(d) + "-at" + std::to_string(base);
    if (grid[d] == 1) continue;
    h->grid_groups_.push_back(cross.Subgroup(members, name));
    h->groups_.push_back(
        std::make_unique<CommLevel>(*h->grid_groups_.back(), AllreduceAlgorithm::kAuto));
  }
  return h;
}

std::vector<Communicator*> Hierarchy::communicators() const {
  std::vector<Communicator*> out;
  for (const auto& g : groups_) out.push_back(&static_cast<CommLevel&>(*g).comm());
  return out;
}

void Hierarchy::Allreduce(const AllreduceOptions& options) {
  if (flat_) return FlatAllreduce(comm_, options);
  std::vector<HierarchyGroup*> levels;
  for (auto& g : groups_) {
    static_cast<CommLevel*>(g.get())->set_call(options);
    levels.push_back(g.get());
  }
  LeveledOptions leveled = Pipelining(options, options_, comm_.topology().cross_size, levels);
  leveled.scratch = &scratch_;
  LeveledAllreduce(levels, options.input, options.output, options.count, options.dtype, options.op,
                   leveled);
}

}  // namespace cadre::comm
