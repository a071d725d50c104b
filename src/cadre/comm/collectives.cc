// Argument checks and the choice of transport and algorithm for every collective. The algorithms
// themselves live in shm_collectives.cc and tcp_collectives.cc.
#include "cadre/comm/collectives.h"

#include <cstring>
#include <numeric>

#include "cadre/comm/communicator_impl.h"
#include "cadre/comm/hierarchical_allreduce.h"
#include "cadre/comm/shm_collectives.h"
#include "cadre/comm/tcp_collectives.h"

namespace cadre::comm {
namespace {

void Check(bool ok, const std::string& what, const std::string& message) {
  if (!ok) throw Error(Code::kInvalidArgument, what + ": " + message);
}

void CheckType(const char* what, DataType dtype) {
  Check(static_cast<int>(dtype) < kNumDataTypes, what,
        "unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

void CheckOp(const char* what, ReduceOp op) {
  Check(static_cast<int>(op) < kNumReduceOps, what,
        "unknown reduce op " + std::to_string(static_cast<int>(op)));
}

void CheckCounts(const char* what, const char* field, const std::vector<size_t>& counts, int size) {
  Check(counts.size() == static_cast<size_t>(size), what,
        std::string(field) + " has " + std::to_string(counts.size()) +
            " entries but the communicator has " + std::to_string(size) + " ranks");
}

size_t Sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

bool Overlap(const void* a, size_t an, const void* b, size_t bn) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && pa < pb + bn && pb < pa + an;
}

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

// The algorithm is in hierarchical_allreduce.cc (reduce-scatter among the host's slots, one ring
// per slot across hosts, allgather inside). A failure in a level breaks this communicator too.
void RunHierarchical(CommunicatorImpl& c, const AllreduceOptions& o) {
  try {
    HierarchicalAllreduce(static_cast<Communicator&>(c), o);
  } catch (const Error& e) {
    c.Fail(e.status());
  }
}

}  // namespace

AllreduceShape ShapeOf(Communicator& comm, size_t bytes) {
  const Topology& t = comm.topology();
  AllreduceShape s;
  s.size = t.size;
  s.bytes = bytes;
  s.hierarchical_possible =
      Impl(comm).use_shm() && t.cross_size > 1 && t.local_size > 1 && t.homogeneous;
  s.one_rank_per_host = t.cross_size == t.size;
  return s;
}

AllreduceAlgorithm ChooseAllreduceAlgorithm(AllreduceAlgorithm requested, const AllreduceShape& s) {
  if (requested == AllreduceAlgorithm::kHierarchical && !s.hierarchical_possible) {
    return AllreduceAlgorithm::kRing;
  }
  if (requested != AllreduceAlgorithm::kAuto) return requested;
  if (s.hierarchical_possible) return AllreduceAlgorithm::kHierarchical;
  if (s.size == 2 && s.one_rank_per_host) return AllreduceAlgorithm::kRecursiveDoubling;
  if (s.bytes <= kRecursiveDoublingMaxBytes) return AllreduceAlgorithm::kRecursiveDoubling;
  // Halving-doubling moves the ring's bytes in 2 log2(p) steps for a power of two; otherwise
  // its fold adds two steps and a whole vector each way, which at p = 3 is as many steps as the
  // ring's 2(p - 1) and more bytes.
  const bool power_of_two = (s.size & (s.size - 1)) == 0;
  if (!power_of_two && s.size < 5) return AllreduceAlgorithm::kRing;
  if (s.bytes <= kHalvingDoublingMaxBytes) return AllreduceAlgorithm::kHalvingDoubling;
  return AllreduceAlgorithm::kRing;
}

void Allreduce(Communicator& comm, const AllreduceOptions& o) {
  CommunicatorImpl& c = Impl(comm);
  c.CheckUsable();
  CheckType("allreduce", o.dtype);
  CheckOp("allreduce", o.op);
  if (o.count == 0) return;
  Check(o.input != nullptr && o.output != nullptr, "allreduce", "input and output must be set");
  const size_t bytes = o.count * ElementSize(o.dtype);
  if (comm.size() == 1) {
    if (o.input != o.output) std::memmove(o.output, o.input, bytes);
    return;
  }
  Deadline deadline = c.MakeDeadline(o.timeout);
  if (c.shm() != nullptr) {
    Finish(c, shm_algo::Allreduce(*c.shm(), o.input, o.output, o.count, o.dtype, o.op,
                                  o.segment_bytes, deadline));
    return;
  }
  const AllreduceAlgorithm algo = ChooseAllreduceAlgorithm(o.algorithm, ShapeOf(comm, bytes));
  if (algo != AllreduceAlgorithm::kHierarchical) {
    Stamp(c, Described("allreduce", o.count, o.dtype, ReduceOpName(o.op)));
  }
  switch (algo) {
    case AllreduceAlgorithm::kHierarchical:
      return RunHierarchical(c, o);
    case AllreduceAlgorithm::kHalvingDoubling:
      return Finish(c, tcp_algo::HalvingDoublingAllreduce(*c.tcp(), o.input, o.output, o.count,
                                                          o.dtype, o.op, deadline));
    case AllreduceAlgorithm::kRecursiveDoubling:
      return Finish(
          c, tcp_algo::RecursiveDoublingAllreduce(*c.tcp(), o.input, o.output, o.count, o.dtype,
                                                  o.op, o.segment_bytes, deadline));
    default:
      return Finish(c, tcp_algo::RingAllreduce(*c.tcp(), o.input, o.output, o.count, o.dtype, o.op,
                                               o.segment_bytes, deadline));
  }
}

bool StreamsPieces(Communicator& comm) { return comm.size() == 2 && Impl(comm).shm() == nullptr; }

void StreamedAllreduce(Communicator& comm, const StreamedAllreduceOptions& o) {
  CommunicatorImpl& c = Impl(comm);
  c.CheckUsable();
  CheckType("streamed allreduce", o.dtype);
  CheckOp("streamed allreduce", o.op);
  const PieceStream& s = o.stream;
  const size_t pieces = s.size();
  Check(s.inputs.size() == pieces && s.outputs.size() == pieces, "streamed allreduce",
        "inputs, outputs and counts must have one entry per piece");
  Check(s.ready != nullptr && s.done != nullptr, "streamed allreduce",
        "ready and done must be set");
  const size_t elem = ElementSize(o.dtype);
  for (size_t k = 0; k < pieces; ++k) {
    const size_t bytes = s.counts[k] * elem;
    Check(bytes == 0 || (s.inputs[k] != nullptr && s.outputs[k] != nullptr), "streamed allreduce",
          "piece " + std::to_string(k) + " has no input or output");
    Check(!Overlap(s.inputs[k], bytes, s.outputs[k], bytes), "streamed allreduce",
          "piece " + std::to_string(k) + "'s output overlaps its input");
  }
  if (StreamsPieces(comm)) {
    Stamp(c,
          Described("streamed allreduce", Sum(s.counts), o.dtype,
                    std::string(ReduceOpName(o.op)) + ", " + std::to_string(pieces) + " pieces"),
          s.counts);
    return Finish(
        c, tcp_algo::StreamedPairAllreduce(*c.tcp(), s, o.dtype, o.op, c.MakeDeadline(o.timeout)));
  }
  const Status st = AllreducePiecesInTurn(s, elem, [&](void* buffer, size_t count) {
    AllreduceOptions a;
    a.input = a.output = buffer;
    a.count = count;
    a.dtype = o.dtype;
    a.op = o.op;
    a.timeout = o.timeout;
    Allreduce(comm, a);
  });
  if (!st.ok()) c.Fail(st);
}

void Broadcast(Communicator& comm, const BroadcastOptions& o) {
  CommunicatorImpl& c = Impl(comm);
  c.CheckUsable();
  CheckType("broadcast", o.dtype);
  Check(o.root >= 0 && o.root < comm.size(), "broadcast",
        "root " + std::to_string(o.root) + " is not a rank of this communicator");
  if (o.count == 0 || comm.size() == 1) return;
  Check(o.buffer != nullptr, "broadcast", "buffer must be set");
  Deadline deadline = c.MakeDeadline(o.timeout);
  if (c.shm() != nullptr) {
    return Finish(c, shm_algo::Broadcast(*c.shm(), o.buffer, o.count, o.dtype, o.root, deadline));
  }
  Stamp(c, Described("broadcast", o.count, o.dtype, "root " + std::to_string(o.root)));
  Finish(c,
         tcp_algo::Broadcast(*c.tcp(), o.buffer, o.count * ElementSize(o.dtype), o.root, deadline));
}

void Allgather(Communicator& comm, const AllgatherOptions& o) {
  CommunicatorImpl& c = Impl(comm);
  c.CheckUsable();
  CheckType("allgather", o.dtype);
  CheckCounts("allgather", "counts", o.counts, comm.size());
  const size_t elem = ElementSize(o.dtype);
  const size_t total = Sum(o.counts);
  if (total == 0) return;
  Check(o.output != nullptr && (o.input != nullptr || o.counts[comm.rank()] == 0), "allgather",
        "input and output must be set");
  if (comm.size() == 1) {
    if (o.input != o.output) std::memmove(o.output, o.input, total * elem);
    return;
  }
  Deadline deadline = c.MakeDeadline(o.timeout);
  if (c.shm() != nullptr) {
    return Finish(c,
                  shm_algo::Allgatherv(*c.shm(), o.input, o.output, o.counts, o.dtype, deadline));
  }
  Stamp(c, Described("allgather", total, o.dtype, ""), o.counts);
  Finish(c, tcp_algo::Allgatherv(*c.tcp(), o.input, o.output, o.counts, elem, deadline));
}

void ReduceScatter(Communicator& comm, const ReduceScatterOptions& o) {
  CommunicatorImpl& c = Impl(comm);
  c.CheckUsable();
  CheckType("reducescatter", o.dtype);
  CheckOp("reducescatter", o.op);
  CheckCounts("reducescatter", "counts", o.counts, comm.size());
  const size_t elem = ElementSize(o.dtype);
  const size_t total = Sum(o.counts);
  if (total == 0) return;
  const size_t mine = o.counts[comm.rank()] * elem;
  Check(o.input != nullptr && (o.output != nullptr || mine == 0), "reducescatter",
        "input and output must be set");
  const void* input = o.input;
  std::vector<uint8_t> copy;
  if (Overlap(o.input, total * elem, o.output, mine)) {  // the output would clobber the input
    copy.assign(static_cast<const uint8_t*>(o.input),
                static_cast<const uint8_t*>(o.input) + total * elem);
    input = copy.data();
  }
  if (comm.size() == 1) {
    std::memcpy(o.output, input, mine);
    return;
  }
  Deadline deadline = c.MakeDeadline(o.timeout);
  if (c.shm() != nullptr) {
    return Finish(
        c, shm_algo::ReduceScatter(*c.shm(), input, o.output, o.counts, o.dtype, o.op, deadline));
  }
  Stamp(c, Described("reducescatter", total, o.dtype, ReduceOpName(o.op)), o.counts);
  Finish(c, tcp_algo::ReduceScatter(*c.tcp(), input, o.output, o.counts, o.dtype, o.op, deadline));
}

void Alltoall(Communicator& comm, const AlltoallOptions& o) {
  CommunicatorImpl& c = Impl(comm);
  c.CheckUsable();
  CheckType("alltoall", o.dtype);
  CheckCounts("alltoall", "send_counts", o.send_counts, comm.size());
  CheckCounts("alltoall", "recv_counts", o.recv_counts, comm.size());
  const size_t elem = ElementSize(o.dtype);
  const size_t send_total = Sum(o.send_counts) * elem, recv_total = Sum(o.recv_counts) * elem;
  Check((o.input != nullptr || send_total == 0) && (o.output != nullptr || recv_total == 0),
        "alltoall", "input and output must be set");
  const void* input = o.input;
  std::vector<uint8_t> copy;
  if (Overlap(o.input, send_total, o.output, recv_total)) {
    copy.assign(static_cast<const uint8_t*>(o.input),
                static_cast<const uint8_t*>(o.input) + send_total);
    input = copy.data();
  }
  if (comm.size() == 1) {
    Check(send_total == recv_total, "alltoall", "send and receive counts differ on a single rank");
    if (send_total > 0) std::memcpy(o.output, input, send_total);
    return;
  }
  // Zero everywhere still synchronises the count check (peers cannot know our totals are zero).
  Deadline deadline = c.MakeDeadline(o.timeout);
  if (c.shm() != nullptr) {
    return Finish(c, shm_algo::Alltoall(*c.shm(), input, o.output, o.send_counts, o.recv_counts,
                                        o.dtype, deadline));
  }
  // Per-rank counts differ by design: only the kind and type must agree (sizes are checked per
  // message).
  Stamp(c, "alltoall(" + std::string(DataTypeName(o.dtype)) + ")");
  Finish(c, tcp_algo::Alltoall(*c.tcp(), input, o.output, o.send_counts, o.recv_counts, elem,
                               deadline));
}

void Barrier(Communicator& comm, std::optional<Duration> timeout) {
  CommunicatorImpl& c = Impl(comm);
  c.CheckUsable();
  if (comm.size() == 1) return;
  Deadline deadline = c.MakeDeadline(timeout);
  if (c.shm() != nullptr) return Finish(c, shm_algo::Barrier(*c.shm(), deadline));
  Stamp(c, "barrier");
  Finish(c, tcp_algo::Barrier(*c.tcp(), deadline));
}

}  // namespace cadre::comm
