#include "cadre/engine/request.h"

#include <cstring>
#include <sstream>

#include "cadre/base/status.h"
#include "cadre/engine/dtype.h"

namespace cadre::engine {

std::string_view OpTypeName(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
  }
  return "unknown";
}

int64_t Request::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t Request::row_elements() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? "," : "") << shape[i];
  s << "]";
  return s.str();
}

std::vector<int64_t> TrailingDims(const std::vector<int64_t>& shape) {
  if (shape.empty()) return {};
  return std::vector<int64_t>(shape.begin() + 1, shape.end());
}

}  // namespace

std::string Request::Describe() const {
  std::ostringstream s;
  s << OpTypeName(op) << " " << comm::DataTypeName(dtype) << ShapeString(shape);
  if (op == OpType::kAllreduce || op == OpType::kReducescatter) {
    s << " op=" << comm::ReduceOpName(reduce_op);
  }
  if ((op == OpType::kAllreduce || op == OpType::kReducescatter) &&
      (prescale != 1.0 || postscale != 1.0)) {
    s << " prescale=" << prescale << " postscale=" << postscale;
  }
  if (op == OpType::kBroadcast) s << " root=" << root;
  if (external) s << " data=external";
  if (grouped && group_size == 0) {
    s << " (marker of the empty group '" << group << "')";
  } else if (grouped) {
    s << " (tensor " << group_index << " of " << group_size << " in group '" << group << "')";
  }
  return s.str();
}

std::optional<std::string> Incompatibility(const Request& a, const Request& b) {
  if (a.op != b.op) {
    return "operation " + std::string(OpTypeName(a.op)) + " vs " + std::string(OpTypeName(b.op));
  }
  if (a.external != b.external) {
    return std::string("data path ") + (a.external ? "external" : "engine") + " vs " +
           (b.external ? "external" : "engine");
  }
  if (a.grouped != b.grouped || a.group_size != b.group_size || a.group != b.group) {
    return "group '" + a.group + "' of " + std::to_string(a.group_size) + " tensors vs '" +
           b.group + "' of " + std::to_string(b.group_size);
  }
  if (a.dtype != b.dtype) {
    return "dtype " + std::string(comm::DataTypeName(a.dtype)) + " vs " +
           std::string(comm::DataTypeName(b.dtype));
  }
  switch (a.op) {
    case OpType::kAllgather:
    case OpType::kAlltoall:
      // The first dimension is per rank; the rest must agree so rows can be concatenated.
      if (a.shape.size() != b.shape.size() || TrailingDims(a.shape) != TrailingDims(b.shape)) {
        return "shape " + ShapeString(a.shape) + " vs " + ShapeString(b.shape) +
               " (only the first dimension may differ)";
      }
      break;
    case OpType::kBarrier:
    case OpType::kJoin:
      break;
    default:
      if (a.shape != b.shape)
        return "shape " + ShapeString(a.shape) + " vs " + ShapeString(b.shape);
  }
  if ((a.op == OpType::kAllreduce || a.op == OpType::kReducescatter) &&
      a.reduce_op != b.reduce_op) {
    return "op " + std::string(comm::ReduceOpName(a.reduce_op)) + " vs " +
           std::string(comm::ReduceOpName(b.reduce_op));
  }
  if ((a.op == OpType::kAllreduce || a.op == OpType::kReducescatter) &&
      (a.prescale != b.prescale || a.postscale != b.postscale)) {
    return "scale factors differ";
  }
  if (a.op == OpType::kBroadcast && a.root != b.root) {
    return "root " + std::to_string(a.root) + " vs " + std::to_string(b.root);
  }
  return std::nullopt;
}

void PutVarint(uint64_t v, std::vector<uint8_t>& out) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}

namespace {

// Signed values (shape entries are >= 0, but a peer's bytes are not trusted) use zigzag.
void PutSigned(int64_t v, std::vector<uint8_t>& out) {
  PutVarint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63), out);
}
int64_t GetSigned(Reader& in) {
  uint64_t u = in.Varint();
  return static_cast<int64_t>(u >> 1) ^ -static_cast<int64_t>(u & 1);
}

void PutDouble(double d, std::vector<uint8_t>& out) {
  uint8_t b[8];
  std::memcpy(b, &d, 8);
  out.insert(out.end(), b, b + 8);
}

constexpr size_t kMaxDims = 64;
// Request::external travels as the top bit of the operation byte; the next bit says that the
// group's fields follow the scale factors.
constexpr uint8_t kExternalBit = 0x80;
constexpr uint8_t kGroupBit = 0x40;
// A group cannot hold more tensors than a message holds requests.
constexpr uint64_t kMaxGroupSize = 1 << 20;
constexpr size_t kMaxNameBytes = 1 << 16;

}  // namespace

uint64_t Reader::Varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = Byte();
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  throw Error(ProtocolError("negotiation message: varint longer than 10 bytes"));
}

uint8_t Reader::Byte() {
  if (p_ >= end_) throw Error(ProtocolError("negotiation message truncated"));
  return *p_++;
}

double Reader::Double() {
  if (end_ - p_ < 8) throw Error(ProtocolError("negotiation message truncated"));
  double d;
  std::memcpy(&d, p_, 8);
  p_ += 8;
  return d;
}

void Reader::Bytes(uint8_t* out, size_t n) {
  if (n > static_cast<size_t>(end_ - p_))
    throw Error(ProtocolError("negotiation message truncated"));
  std::memcpy(out, p_, n);
  p_ += n;
}

std::string Reader::String() {
  uint64_t n = Varint();
  if (n > kMaxNameBytes || n > static_cast<uint64_t>(end_ - p_)) {
    throw Error(ProtocolError("negotiation message: bad string length " + std::to_string(n)));
  }
  std::string s(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  return s;
}

void EncodeRequest(const Request& r, std::vector<uint8_t>& out) {
  out.push_back(static_cast<uint8_t>(static_cast<uint8_t>(r.op) | (r.external ? kExternalBit : 0) |
                                     (r.grouped ? kGroupBit : 0)));
  PutVarint(r.name.size(), out);
  out.insert(out.end(), r.name.begin(), r.name.end());
  out.push_back(static_cast<uint8_t>(r.dtype));
  out.push_back(static_cast<uint8_t>(r.reduce_op));
  PutVarint(r.shape.size(), out);
  for (int64_t d : r.shape) PutSigned(d, out);
  PutSigned(r.root, out);
  PutVarint(r.splits.size(), out);
  for (int64_t s : r.splits) PutSigned(s, out);
  PutDouble(r.prescale, out);
  PutDouble(r.postscale, out);
  if (r.grouped) {
    PutVarint(r.group.size(), out);
    out.insert(out.end(), r.group.begin(), r.group.end());
    PutVarint(r.group_index, out);
    PutVarint(r.group_size, out);
  }
}

Request DecodeRequest(Reader& in) {
  Request r;
  uint8_t op = in.Byte();
  r.external = (op & kExternalBit) != 0;
  const bool grouped = (op & kGroupBit) != 0;
  op = static_cast<uint8_t>(op & ~(kExternalBit | kGroupBit));
  if (op > static_cast<uint8_t>(OpType::kJoin)) {
    throw Error(ProtocolError("negotiation message: unknown operation " + std::to_string(op)));
  }
  r.op = static_cast<OpType>(op);
  r.name = in.String();
  uint8_t dtype = in.Byte();
  if (dtype >= comm::kNumDataTypes) {
    throw Error(ProtocolError("negotiation message: unknown dtype " + std::to_string(dtype)));
  }
  r.dtype = static_cast<comm::DataType>(dtype);
  uint8_t rop = in.Byte();
  if (rop >= comm::kNumReduceOps) {
    throw Error(ProtocolError("negotiation message: unknown reduce op " + std::to_string(rop)));
  }
  r.reduce_op = static_cast<comm::ReduceOp>(rop);
  uint64_t dims = in.Varint();
  if (dims > kMaxDims) throw Error(ProtocolError("negotiation message: too many dimensions"));
  for (uint64_t i = 0; i < dims; ++i) {
    int64_t d = GetSigned(in);
    if (d < 0) throw Error(ProtocolError("negotiation message: negative dimension"));
    r.shape.push_back(d);
  }
  r.root = static_cast<int32_t>(GetSigned(in));
  uint64_t nsplits = in.Varint();
  if (nsplits > (1u << 20)) throw Error(ProtocolError("negotiation message: too many splits"));
  for (uint64_t i = 0; i < nsplits; ++i) r.splits.push_back(GetSigned(in));
  r.prescale = in.Double();
  r.postscale = in.Double();
  if (grouped) {
    r.group = in.String();
    const uint64_t index = in.Varint();
    const uint64_t size = in.Varint();
    // Index 0 of 0 is an empty group's marker.
    if (size > kMaxGroupSize || (size > 0 ? index >= size : index != 0)) {
      throw Error(ProtocolError("negotiation message: tensor " + std::to_string(index) + " of " +
                                std::to_string(size) + " in a group"));
    }
    r.grouped = true;
    r.group_index = static_cast<uint32_t>(index);
    r.group_size = static_cast<uint32_t>(size);
  }
  return r;
}

}  // namespace cadre::engine
