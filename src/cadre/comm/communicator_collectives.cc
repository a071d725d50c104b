// The communication core's collectives (CommunicatorImpl::Run*, called by collectives.cc once
// the arguments are checked): shared memory when the communicator has a ShmGroup, else TCP with
// the algorithm ChooseAllreduceAlgorithm picks. The algorithms themselves live in
// shm_collectives.cc and tcp_collectives.cc, the hierarchical one in hierarchical_allreduce.cc.
#include <cstdint>
#include <numeric>
#include <string>

#include "cadre/base/logging.h"
#include "cadre/comm/collectives.h"
#include "cadre/comm/communicator_impl.h"
#include "cadre/comm/hierarchical_allreduce.h"
#include "cadre/comm/shm_collectives.h"
#include "cadre/comm/tcp_collectives.h"

namespace cadre::comm {
namespace {

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

// FNV-1a over `text`, then over each count: a digest every rank computes alike.
uint32_t Digest(std::string_view text, const std::vector<size_t>& counts = {}) {
  uint32_t h = 2166136261u;
  auto mix = [&h](uint8_t byte) { h = (h ^ byte) * 16777619u; };
  for (char ch : text) mix(static_cast<uint8_t>(ch));
  for (size_t c : counts) {
    for (int i = 0; i < 8; ++i) mix(static_cast<uint8_t>(c >> (8 * i)));
  }
  return h;
}

// Names the collective the TCP frames that follow belong to (Device::BeginCollective): a rank
// whose peer runs another one fails with kMismatch instead of mixing their data. Per-rank counts
// (allgather, reducescatter) enter the digest but not the text.
void Stamp(CommunicatorImpl& c, std::string description, const std::vector<size_t>& counts = {}) {
  const uint32_t digest = Digest(description, counts);
  c.tcp()->BeginCollective(digest, description);
  c.set_collective(std::move(description));
}

std::string Described(const char* kind, size_t count, DataType dtype, std::string_view detail) {
  return std::string(kind) + "(count " + std::to_string(count) + ", " +
         std::string(DataTypeName(dtype)) + (detail.empty() ? "" : ", ") + std::string(detail) +
         ")";
}

// Runs one algorithm; on failure breaks the communicator and throws.
void Finish(CommunicatorImpl& c, const Status& s) {
  if (!s.ok()) c.Fail(s);
}

}  // namespace

bool CommunicatorImpl::HierarchicalPossible() const {
  const Topology& t = topology_;
  return options_.use_shm && t.cross_size > 1 && t.local_size > 1 && t.homogeneous;
}

bool CommunicatorImpl::StreamsPieces() const { return topology_.size == 2 && shm_ == nullptr; }

void CommunicatorImpl::RunAllreduce(const AllreduceOptions& o) {
  Deadline deadline = MakeDeadline(o.timeout);
  if (shm_) {
    Finish(*this, shm_algo::Allreduce(*shm_, o.input, o.output, o.count, o.dtype, o.op,
                                      o.segment_bytes, deadline));
    return;
  }
  const size_t bytes = o.count * ElementSize(o.dtype);
  const AllreduceAlgorithm algo = ChooseAllreduceAlgorithm(o.algorithm, ShapeOf(*this, bytes));
  if (o.algorithm == AllreduceAlgorithm::kHierarchical && algo != o.algorithm &&
      !warned_not_hierarchical_) {
    warned_not_hierarchical_ = true;
    CADRE_LOG(WARNING) << "hierarchical allreduce asked for, but it needs several hosts holding "
                          "the same number of ranks (and shared memory on): using the flat ring "
                          "over all "
                       << topology_.size << " ranks";
  }
  if (algo != AllreduceAlgorithm::kHierarchical) {
    Stamp(*this, Described("allreduce", o.count, o.dtype, ReduceOpName(o.op)));
  }
  switch (algo) {
    case AllreduceAlgorithm::kHierarchical:
      // Reduce-scatter among the host's slots, rings across the hosts, allgather inside, over
      // subgroups made on first use and kept. A failure in a level breaks this communicator too.
      try {
        if (!hierarchy_) hierarchy_ = Hierarchy::Create(*this, options_.hierarchy);
        hierarchy_->Allreduce(o);
      } catch (const Error& e) {
        Fail(e.status(), /*in_subgroup=*/true);
      }
      return;
    case AllreduceAlgorithm::kHalvingDoubling:
      return Finish(*this, tcp_algo::HalvingDoublingAllreduce(*tcp_, o.input, o.output, o.count,
                                                              o.dtype, o.op, deadline));
    case AllreduceAlgorithm::kRecursiveDoubling:
      return Finish(*this,
                    tcp_algo::RecursiveDoublingAllreduce(*tcp_, o.input, o.output, o.count, o.dtype,
                                                         o.op, o.segment_bytes, deadline));
    default:
      return Finish(*this, tcp_algo::RingAllreduce(*tcp_, o.input, o.output, o.count, o.dtype, o.op,
                                                   o.segment_bytes, deadline));
  }
}

void CommunicatorImpl::RunStreamedAllreduce(const StreamedAllreduceOptions& o) {
  const PieceStream& s = o.stream;
  if (StreamsPieces()) {
    Stamp(*this,
          Described("streamed allreduce", Sum(s.counts), o.dtype,
                    std::string(ReduceOpName(o.op)) + ", " + std::to_string(s.size()) + " pieces"),
          s.counts);
    return Finish(
        *this, tcp_algo::StreamedPairAllreduce(*tcp_, s, o.dtype, o.op, MakeDeadline(o.timeout)));
  }
  const Status st = AllreducePiecesInTurn(s, ElementSize(o.dtype), [&](void* buffer, size_t count) {
    AllreduceOptions a;
    a.input = a.output = buffer;
    a.count = count;
    a.dtype = o.dtype;
    a.op = o.op;
    a.timeout = o.timeout;
    Allreduce(*this, a);
  });
  if (!st.ok()) Fail(st);
}

void CommunicatorImpl::RunBroadcast(const BroadcastOptions& o) {
  Deadline deadline = MakeDeadline(o.timeout);
  if (shm_) {
    return Finish(*this, shm_algo::Broadcast(*shm_, o.buffer, o.count, o.dtype, o.root, deadline));
  }
  Stamp(*this, Described("broadcast", o.count, o.dtype, "root " + std::to_string(o.root)));
  Finish(*this,
         tcp_algo::Broadcast(*tcp_, o.buffer, o.count * ElementSize(o.dtype), o.root, deadline));
}

void CommunicatorImpl::RunAllgather(const AllgatherOptions& o) {
  Deadline deadline = MakeDeadline(o.timeout);
  if (shm_) {
    return Finish(*this,
                  shm_algo::Allgatherv(*shm_, o.input, o.output, o.counts, o.dtype, deadline));
  }
  Stamp(*this, Described("allgather", Sum(o.counts), o.dtype, ""), o.counts);
  Finish(*this,
         tcp_algo::Allgatherv(*tcp_, o.input, o.output, o.counts, ElementSize(o.dtype), deadline));
}

void CommunicatorImpl::RunReduceScatter(const ReduceScatterOptions& o) {
  Deadline deadline = MakeDeadline(o.timeout);
  if (shm_) {
    return Finish(*this, shm_algo::ReduceScatter(*shm_, o.input, o.output, o.counts, o.dtype, o.op,
                                                 deadline));
  }
  Stamp(*this, Described("reducescatter", Sum(o.counts), o.dtype, ReduceOpName(o.op)), o.counts);
  Finish(*this,
         tcp_algo::ReduceScatter(*tcp_, o.input, o.output, o.counts, o.dtype, o.op, deadline));
}

void CommunicatorImpl::RunAlltoall(const AlltoallOptions& o) {
  Deadline deadline = MakeDeadline(o.timeout);
  if (shm_) {
    return Finish(*this, shm_algo::Alltoall(*shm_, o.input, o.output, o.send_counts, o.recv_counts,
                                            o.dtype, deadline));
  }
  // Per-rank counts differ by design: only the kind and type must agree (sizes are checked per
  // message).
  Stamp(*this, "alltoall(" + std::string(DataTypeName(o.dtype)) + ")");
  Finish(*this, tcp_algo::Alltoall(*tcp_, o.input, o.output, o.send_counts, o.recv_counts,
                                   ElementSize(o.dtype), deadline));
}

void CommunicatorImpl::RunBarrier(std::optional<Duration> timeout) {
  Deadline deadline = MakeDeadline(timeout);
  if (shm_) return Finish(*this, shm_algo::Barrier(*shm_, deadline));
  Stamp(*this, "barrier");
  Finish(*this, tcp_algo::Barrier(*tcp_, deadline));
}

}  // namespace cadre::comm
