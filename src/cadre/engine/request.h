// Request: what one rank asks the engine to do with one named tensor, and its wire encoding.
//
// Every rank sends its requests to every other rank during negotiation (controller.h), so the
// encoding is compact and self-delimiting. Two ranks' requests for one name must agree on
// everything that is not legitimately per-rank (Compatible()); the first dimension may differ for
// allgather and alltoall, the splits for alltoall.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cadre/comm/types.h"

namespace cadre::engine {

using comm::DataType;
using comm::ReduceOp;

enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather,
  kBroadcast,
  kAlltoall,
  kReducescatter,
  kBarrier,
  kJoin,
};
std::string_view OpTypeName(OpType op);

struct Request {
  OpType op = OpType::kAllreduce;
  std::string name;
  comm::DataType dtype = comm::DataType::kFloat32;
  comm::ReduceOp reduce_op = comm::ReduceOp::kSum;
  std::vector<int64_t> shape;
  int32_t root = 0;             // broadcast
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank (empty = even split)
  double prescale = 1.0;        // allreduce: applied before / after the reduction
  double postscale = 1.0;
  // An allreduce whose data moves outside the engine (cadre.torch's NCCL path for CUDA
  // tensors): negotiated like any other (names, shapes, ops, scales, the response cache, stall
  // reports), but the engine never reads or writes its data; its handle gets its place among
  // the engine's external operations (Handle::external_sequence), the same on every rank, and
  // the caller runs the data movement in that order. All ranks must agree on it.
  bool external = false;
  // A member of a grouped operation (grouped_allreduce and its kin): the group's name, this
  // tensor's place in it and how many tensors this rank put in the group. Ranks must agree on
  // the count; when they do not, every member fails on every rank, those that only some ranks
  // submitted included (Controller), instead of waiting for the missing ones. A rank whose group
  // is empty submits one marker of no elements (index 0 of 0) so that the others learn it.
  bool grouped = false;
  std::string group;
  uint32_t group_index = 0;
  uint32_t group_size = 0;

  int64_t num_elements() const;
  // Elements per row of the first dimension (1 for a 0-d or 1-d tensor).
  int64_t row_elements() const;
  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }

  // "allreduce float32[4,3] op=sum": what a mismatch report shows for this rank.
  std::string Describe() const;
  bool operator==(const Request& other) const = default;
};

// Empty when `b` may be negotiated together with `a`; otherwise what differs ("shape [4] vs [5]").
std::optional<std::string> Incompatibility(const Request& a, const Request& b);

// Appends the encoding of `r` to `out`.
void EncodeRequest(const Request& r, std::vector<uint8_t>& out);

// A cursor over received bytes; every read checks bounds and throws Error(kProtocol) on
// truncated or malformed input, so a corrupt message cannot crash the engine.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  uint64_t Varint();
  uint8_t Byte();
  double Double();
  std::string String();
  // Copies the next n bytes to out.
  void Bytes(uint8_t* out, size_t n);
  bool done() const { return p_ == end_; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

void PutVarint(uint64_t v, std::vector<uint8_t>& out);
Request DecodeRequest(Reader& in);

}  // namespace cadre::engine
