// The public entrance of every collective: argument checks and the cases that need no peer,
// then the communicator's own implementation (Communicator::Run*; for the communication core
// communicator_collectives.cc, which picks the transport and the algorithm).
#include "cadre/comm/collectives.h"

#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>

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

}  // namespace

Status ParseAllreduceAlgorithm(std::string_view text, AllreduceAlgorithm* out) {
  if (text == "auto") {
    *out = AllreduceAlgorithm::kAuto;
  } else if (text == "ring") {
    *out = AllreduceAlgorithm::kRing;
  } else if (text == "halving_doubling") {
    *out = AllreduceAlgorithm::kHalvingDoubling;
  } else if (text == "recursive_doubling") {
    *out = AllreduceAlgorithm::kRecursiveDoubling;
  } else if (text == "hierarchical") {
    *out = AllreduceAlgorithm::kHierarchical;
  } else {
    return InvalidArgument(
        "\"" + std::string(text) +
        "\": use auto, ring, halving_doubling, recursive_doubling or hierarchical");
  }
  return Status::Ok();
}

AllreduceShape ShapeOf(Communicator& comm, size_t bytes) {
  const Topology& t = comm.topology();
  AllreduceShape s;
  s.size = t.size;
  s.bytes = bytes;
  s.hierarchical_possible = comm.HierarchicalPossible();
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
  comm.CheckUsable();
  CheckType("allreduce", o.dtype);
  CheckOp("allreduce", o.op);
  if (o.count == 0) return;
  Check(o.input != nullptr && o.output != nullptr, "allreduce", "input and output must be set");
  if (comm.size() == 1) {
    if (o.input != o.output) std::memmove(o.output, o.input, o.count * ElementSize(o.dtype));
    return;
  }
  comm.RunAllreduce(o);
}

bool StreamsPieces(Communicator& comm) { return comm.StreamsPieces(); }

void StreamedAllreduce(Communicator& comm, const StreamedAllreduceOptions& o) {
  comm.CheckUsable();
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
  comm.RunStreamedAllreduce(o);
}

void Broadcast(Communicator& comm, const BroadcastOptions& o) {
  comm.CheckUsable();
  CheckType("broadcast", o.dtype);
  Check(o.root >= 0 && o.root < comm.size(), "broadcast",
        "root " + std::to_string(o.root) + " is not a rank of this communicator");
  if (o.count == 0 || comm.size() == 1) return;
  Check(o.buffer != nullptr, "broadcast", "buffer must be set");
  comm.RunBroadcast(o);
}

void Allgather(Communicator& comm, const AllgatherOptions& o) {
  comm.CheckUsable();
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
  comm.RunAllgather(o);
}

void ReduceScatter(Communicator& comm, const ReduceScatterOptions& o) {
  comm.CheckUsable();
  CheckType("reducescatter", o.dtype);
  CheckOp("reducescatter", o.op);
  CheckCounts("reducescatter", "counts", o.counts, comm.size());
  const size_t elem = ElementSize(o.dtype);
  const size_t total = Sum(o.counts);
  if (total == 0) return;
  const size_t mine = o.counts[comm.rank()] * elem;
  Check(o.input != nullptr && (o.output != nullptr || mine == 0), "reducescatter",
        "input and output must be set");
  ReduceScatterOptions run = o;
  std::vector<uint8_t> copy;
  if (Overlap(o.input, total * elem, o.output, mine)) {  // the output would clobber the input
    copy.assign(static_cast<const uint8_t*>(o.input),
                static_cast<const uint8_t*>(o.input) + total * elem);
    run.input = copy.data();
  }
  if (comm.size() == 1) {
    std::memcpy(o.output, run.input, mine);
    return;
  }
  comm.RunReduceScatter(run);
}

void Alltoall(Communicator& comm, const AlltoallOptions& o) {
  comm.CheckUsable();
  CheckType("alltoall", o.dtype);
  CheckCounts("alltoall", "send_counts", o.send_counts, comm.size());
  CheckCounts("alltoall", "recv_counts", o.recv_counts, comm.size());
  const size_t elem = ElementSize(o.dtype);
  const size_t send_total = Sum(o.send_counts) * elem, recv_total = Sum(o.recv_counts) * elem;
  Check((o.input != nullptr || send_total == 0) && (o.output != nullptr || recv_total == 0),
        "alltoall", "input and output must be set");
  AlltoallOptions run = o;
  std::vector<uint8_t> copy;
  if (Overlap(o.input, send_total, o.output, recv_total)) {
    copy.assign(static_cast<const uint8_t*>(o.input),
                static_cast<const uint8_t*>(o.input) + send_total);
    run.input = copy.data();
  }
  if (comm.size() == 1) {
    Check(send_total == recv_total, "alltoall", "send and receive counts differ on a single rank");
    if (send_total > 0) std::memcpy(o.output, run.input, send_total);
    return;
  }
  // Zero everywhere still synchronises the count check (peers cannot know our totals are zero).
  comm.RunAlltoall(run);
}

void Barrier(Communicator& comm, std::optional<Duration> timeout) {
  comm.CheckUsable();
  if (comm.size() == 1) return;
  comm.RunBarrier(timeout);
}

}  // namespace cadre::comm
