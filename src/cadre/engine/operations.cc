#include "cadre/engine/operations.h"

#include "cadre/comm/collectives.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cadre/comm/reduce.h"
#include "cadre/engine/dtype.h"

namespace cadre::engine {

namespace {

// The first rank's request: every present request agrees on what the operation needs.
const Request& Any(const std::vector<std::optional<Request>>& per_rank) {
  for (const auto& r : per_rank) {
    if (r) return *r;
  }
  throw Error(InternalError("response without any request"));
}

std::vector<int64_t> WithRows(const Request& r, int64_t rows) {
  std::vector<int64_t> shape = r.shape.empty() ? std::vector<int64_t>{1} : r.shape;
  shape[0] = rows;
  return shape;
}

// Alltoall rows rank `r` sends to each rank: its splits, or an even split.
std::vector<int64_t> SplitsOf(const Request& r, int size) {
  if (!r.splits.empty()) return r.splits;
  return std::vector<int64_t>(size, r.rows() / size);
}

}  // namespace

uint8_t* FusionBuffer::Get(size_t bytes) {
  if (buffer_.size() < bytes) buffer_.resize(bytes);
  return buffer_.data();
}

std::vector<int64_t> ReducescatterRows(int64_t rows, int size) {
  std::vector<int64_t> out(size, rows / size);
  for (int r = 0; r < rows % size; ++r) ++out[r];
  return out;
}

void Executor::AllreduceInPlace(void* buffer, size_t count, comm::DataType dtype,
                                comm::ReduceOp op) {
  comm::AllreduceOptions o;
  o.input = o.output = buffer;
  o.count = count;
  o.dtype = dtype;
  o.op = op;
  o.algorithm = algorithm_;
  comm::Allreduce(comm_, o);
}

void Executor::Run(const Response& response, const std::vector<TensorEntry*>& local) {
  TensorEntry* mine = local.empty() ? nullptr : local[0];
  const Request& req = Any(response.per_rank[0]);
  const size_t count = static_cast<size_t>(req.num_elements());
  switch (response.op) {
    case OpType::kAllreduce:
      return Allreduce(response, local);
    case OpType::kAllgather:
      return Allgather(response, mine);
    case OpType::kBroadcast: {
      comm::BroadcastOptions o;
      o.buffer = mine->data;
      o.count = count;
      o.dtype = req.dtype;
      o.root = req.root;
      return comm::Broadcast(comm_, o);
    }
    case OpType::kAlltoall:
      return Alltoall(response, mine);
    case OpType::kReducescatter:
      return Reducescatter(response, mine);
    case OpType::kBarrier:
    case OpType::kJoin:
      return;  // negotiation itself synchronised the ranks
  }
}

void Executor::Allreduce(const Response& response, const std::vector<TensorEntry*>& local) {
  const Request& first = Any(response.per_rank[0]);
  const DataType dtype = first.dtype;
  const size_t es = comm::ElementSize(dtype);
  const bool scaled = first.prescale != 1.0 || first.postscale != 1.0;
  if (first.external) return;  // negotiated here, moved by the caller (Request::external)
  if (!response.inline_inputs.empty()) {
    // Every rank's input came with the negotiation (Controller): reduce them here in rank
    // order, which every rank does identically, so all ranks hold the same bits.
    const size_t count = static_cast<size_t>(first.num_elements());
    std::vector<std::vector<uint8_t>> inputs = response.inline_inputs;
    std::vector<const void*> srcs;
    for (auto& in : inputs) {
      Scale(in.data(), count, dtype, first.prescale);
      srcs.push_back(in.data());
    }
    comm::ReduceMany(local[0]->data, srcs.data(), static_cast<int>(srcs.size()), count, dtype,
                     first.reduce_op);
    Scale(local[0]->data, count, dtype, first.postscale);
    return;
  }
  if (response.names.size() == 1 && local[0] && !scaled) {
    // One tensor of our own: reduce in place, no copies.
    AllreduceInPlace(local[0]->data, static_cast<size_t>(first.num_elements()), dtype,
                     first.reduce_op);
    return;
  }
  std::vector<size_t> bytes;
  size_t total = 0;
  for (const auto& pr : response.per_rank) {
    bytes.push_back(static_cast<size_t>(Any(pr).num_elements()) * es);
    total += bytes.back();
  }
  // The fused bytes are reduced segment by segment: each segment is packed, reduced and unpacked
  // while it is still in cache. One allreduce over a whole 64 MiB buffer measured several times
  // slower here (bench/train.py) than the same bytes in a few-MiB pieces.
  // A segment that lies inside one of our own tensors is reduced (and scaled) where it is, with
  // no pack or unpack: a large gradient averaged on its own costs no copies.
  const size_t segment = std::max(es, segment_bytes_ / es * es);
  uint8_t* fusion = nullptr;
  // The first entry overlapping the segment, and where it starts: segments only move forward.
  size_t first_entry = 0, first_offset = 0;
  for (size_t begin = 0; begin < total; begin += segment) {
    const size_t end = std::min(total, begin + segment);
    while (first_offset + bytes[first_entry] <= begin) first_offset += bytes[first_entry++];
    if (local[first_entry] && end <= first_offset + bytes[first_entry]) {
      uint8_t* in_place = static_cast<uint8_t*>(local[first_entry]->data) + (begin - first_offset);
      const size_t count = (end - begin) / es;
      Scale(in_place, count, dtype, first.prescale);
      AllreduceInPlace(in_place, count, dtype, first.reduce_op);
      Scale(in_place, count, dtype, first.postscale);
      continue;
    }
    if (fusion == nullptr) fusion = fusion_.Get(std::min(total, segment));
    uint8_t* buf = fusion;
    // Copies the overlap of every entry with [begin, end) in (pack) or out (unpack).
    auto each_overlap = [&](auto&& fn) {
      size_t offset = first_offset;
      for (size_t i = first_entry; i < bytes.size() && offset < end; offset += bytes[i], ++i) {
        const size_t lo = std::max(offset, begin), hi = std::min(offset + bytes[i], end);
        if (lo < hi) fn(i, lo - offset, buf + (lo - begin), hi - lo);
      }
    };
    each_overlap([&](size_t i, size_t at, uint8_t* dst, size_t n) {
      // A joined rank contributes zeros (the identity of sum, the only op allowed with joins).
      if (local[i]) {
        std::memcpy(dst, static_cast<const uint8_t*>(local[i]->data) + at, n);
      } else {
        std::memset(dst, 0, n);
      }
    });
    const size_t count = (end - begin) / es;
    Scale(buf, count, dtype, first.prescale);
    AllreduceInPlace(buf, count, dtype, first.reduce_op);
    Scale(buf, count, dtype, first.postscale);
    each_overlap([&](size_t i, size_t at, uint8_t* src, size_t n) {
      if (local[i]) std::memcpy(static_cast<uint8_t*>(local[i]->data) + at, src, n);
    });
  }
}

void Executor::Allgather(const Response& response, TensorEntry* local) {
  const auto& per_rank = response.per_rank[0];
  const Request& any = Any(per_rank);
  const size_t row = static_cast<size_t>(any.row_elements());
  std::vector<size_t> counts;
  int64_t rows = 0;
  for (const auto& r : per_rank) {
    counts.push_back(r ? static_cast<size_t>(r->rows()) * row : 0);
    rows += r ? r->rows() : 0;
  }
  const size_t es = comm::ElementSize(any.dtype);
  std::vector<uint8_t> discard;
  std::vector<uint8_t>& out = local ? local->handle->output() : discard;
  out.resize(static_cast<size_t>(rows) * row * es);
  comm::AllgatherOptions o;
  o.input = local ? local->data : nullptr;
  o.output = out.data();
  o.counts = std::move(counts);
  o.dtype = any.dtype;
  comm::Allgather(comm_, o);
  if (local) local->handle->output_shape() = WithRows(local->request, rows);
}

void Executor::Alltoall(const Response& response, TensorEntry* local) {
  const auto& per_rank = response.per_rank[0];
  const Request& me = local->request;
  const int size = comm_.size();
  const int rank = comm_.rank();
  const size_t row = static_cast<size_t>(me.row_elements());
  std::vector<size_t> send(size), recv(size);
  std::vector<int64_t> received(size);
  const std::vector<int64_t> my_splits = SplitsOf(me, size);
  int64_t rows = 0;
  for (int j = 0; j < size; ++j) {
    send[j] = static_cast<size_t>(my_splits[j]) * row;
    received[j] = SplitsOf(*per_rank[j], size)[rank];
    recv[j] = static_cast<size_t>(received[j]) * row;
    rows += received[j];
  }
  auto& out = local->handle->output();
  out.resize(static_cast<size_t>(rows) * row * comm::ElementSize(me.dtype));
  comm::AlltoallOptions o;
  o.input = local->data;
  o.output = out.data();
  o.send_counts = std::move(send);
  o.recv_counts = std::move(recv);
  o.dtype = me.dtype;
  comm::Alltoall(comm_, o);
  local->handle->output_shape() = WithRows(me, rows);
  local->handle->received_splits() = std::move(received);
}

void Executor::Reducescatter(const Response& response, TensorEntry* local) {
  const Request& me = local->request;
  const size_t row = static_cast<size_t>(me.row_elements());
  const std::vector<int64_t> rows = ReducescatterRows(me.rows(), comm_.size());
  std::vector<size_t> counts;
  for (int64_t r : rows) counts.push_back(static_cast<size_t>(r) * row);
  auto& out = local->handle->output();
  out.resize(counts[comm_.rank()] * comm::ElementSize(me.dtype));
  const void* input = local->data;
  std::vector<uint8_t> scaled;
  if (me.prescale != 1.0) {
    // The caller's input stays untouched: scale a copy.
    const size_t bytes = static_cast<size_t>(me.num_elements()) * comm::ElementSize(me.dtype);
    const auto* p = static_cast<const uint8_t*>(local->data);
    scaled.assign(p, p + bytes);
    Scale(scaled.data(), static_cast<size_t>(me.num_elements()), me.dtype, me.prescale);
    input = scaled.data();
  }
  comm::ReduceScatterOptions o;
  o.input = input;
  o.output = out.data();
  o.counts = counts;
  o.dtype = me.dtype;
  o.op = me.reduce_op;
  comm::ReduceScatter(comm_, o);
  Scale(out.data(), counts[comm_.rank()], me.dtype, me.postscale);
  local->handle->output_shape() = WithRows(me, rows[comm_.rank()]);
}

}  // namespace cadre::engine
