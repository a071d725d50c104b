#include "cadre/engine/comm_backend.h"

#include "cadre/base/env.h"
#include "cadre/comm/collectives.h"

namespace cadre::engine {

namespace {

comm::AllreduceAlgorithm AlgorithmFromEnv() {
  using comm::AllreduceAlgorithm;
  if (auto v = GetEnv("CADRE_ALLREDUCE_ALGORITHM"); v && !v->empty()) {
    if (*v == "auto") return AllreduceAlgorithm::kAuto;
    if (*v == "ring") return AllreduceAlgorithm::kRing;
    if (*v == "halving_doubling") return AllreduceAlgorithm::kHalvingDoubling;
    if (*v == "recursive_doubling") return AllreduceAlgorithm::kRecursiveDoubling;
    if (*v == "hierarchical") return AllreduceAlgorithm::kHierarchical;
    throw Error(InvalidArgument(
        "CADRE_ALLREDUCE_ALGORITHM=\"" + *v +
        "\": use auto, ring, halving_doubling, recursive_doubling or hierarchical"));
  }
  if (auto v = GetEnv("HOROVOD_HIERARCHICAL_ALLREDUCE"); v && !v->empty()) {
    return EnvBool("HOROVOD_HIERARCHICAL_ALLREDUCE", false) ? AllreduceAlgorithm::kHierarchical
                                                            : AllreduceAlgorithm::kRing;
  }
  return AllreduceAlgorithm::kAuto;
}

}  // namespace

CommBackend::CommBackend(std::unique_ptr<comm::Communicator> comm)
    : comm_(std::move(comm)), algorithm_(AlgorithmFromEnv()) {
  // auto is resolved here for the hierarchical case, so that its Hierarchy (subgroups, scratch)
  // is built once rather than per call; every rank sees the same topology, so all agree.
  if (algorithm_ == comm::AllreduceAlgorithm::kAuto &&
      comm::ShapeOf(*comm_, 0).hierarchical_possible) {
    algorithm_ = comm::AllreduceAlgorithm::kHierarchical;
  }
  if (algorithm_ != comm::AllreduceAlgorithm::kHierarchical) return;
  comm::HierarchyOptions options;
  if (auto grid = GetEnv("CADRE_HOST_GRID"); grid && !grid->empty()) {
    Status s = comm::ParseGrid(*grid, &options.host_grid);
    if (!s.ok()) throw Error(s.WithContext("CADRE_HOST_GRID"));
  }
  hierarchy_ = comm::Hierarchy::Create(*comm_, options);
}

CommBackend::~CommBackend() = default;

void CommBackend::AllgatherFixed(const void* in, void* out, size_t bytes) {
  comm::AllgatherOptions o;
  o.input = in;
  o.output = out;
  o.counts.assign(size(), bytes);
  o.dtype = DataType::kUInt8;
  comm::Allgather(*comm_, o);
}

void CommBackend::Allgather(const void* in, void* out, const std::vector<size_t>& counts,
                            DataType dtype) {
  comm::AllgatherOptions o;
  o.input = in;
  o.output = out;
  o.counts = counts;
  o.dtype = dtype;
  comm::Allgather(*comm_, o);
}

void CommBackend::Allreduce(void* buffer, size_t count, DataType dtype, ReduceOp op) {
  comm::AllreduceOptions o;
  o.input = buffer;
  o.output = buffer;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  o.algorithm = algorithm_;
  if (hierarchy_) return hierarchy_->Allreduce(o);
  comm::Allreduce(*comm_, o);
}

void CommBackend::Broadcast(void* buffer, size_t count, DataType dtype, int root) {
  comm::BroadcastOptions o;
  o.buffer = buffer;
  o.count = count;
  o.dtype = dtype;
  o.root = root;
  comm::Broadcast(*comm_, o);
}

void CommBackend::Alltoall(const void* in, void* out, const std::vector<size_t>& send_counts,
                           const std::vector<size_t>& recv_counts, DataType dtype) {
  comm::AlltoallOptions o;
  o.input = in;
  o.output = out;
  o.send_counts = send_counts;
  o.recv_counts = recv_counts;
  o.dtype = dtype;
  comm::Alltoall(*comm_, o);
}

void CommBackend::ReduceScatter(const void* in, void* out, const std::vector<size_t>& counts,
                                DataType dtype, ReduceOp op) {
  comm::ReduceScatterOptions o;
  o.input = in;
  o.output = out;
  o.counts = counts;
  o.dtype = dtype;
  o.op = op;
  comm::ReduceScatter(*comm_, o);
}

}  // namespace cadre::engine
