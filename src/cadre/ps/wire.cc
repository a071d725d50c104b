#include "cadre/ps/wire.h"

#include <cstring>

namespace cadre::ps::wire {
namespace {

// Protobuf wire types and the field numbers of ps.proto that these messages use.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLen = 2;
constexpr uint32_t kFixed32 = 5;

constexpr uint32_t kPushWorker = 1, kPushStep = 2, kPushGrads = 3;
constexpr uint32_t kChunkId = 1, kChunkDtype = 2, kChunkData = 3, kChunkLr = 4, kChunkHyper = 5;
// OptimizerConfig's hyper-parameters (its kind, field 1, is not sent with a push).
constexpr uint32_t kHyperLr = 2, kHyperMomentum = 3, kHyperDampening = 4, kHyperNesterov = 5,
                   kHyperBeta1 = 6, kHyperBeta2 = 7, kHyperEps = 8, kHyperWeightDecay = 9;
// A hyper-parameters message: every float field (tag and 4 bytes), and nesterov (tag, 0 or 1).
constexpr size_t kHyperBytes = 7 * (1 + sizeof(float)) + 2;
constexpr uint32_t kIdVariable = 1, kIdIndex = 2, kIdOffset = 3, kIdCount = 4;
constexpr uint32_t kReplyValues = 1;

constexpr std::string_view kFloat32 = "float32";

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void PutTag(std::string* out, uint32_t field, uint32_t type) { PutVarint(out, field << 3 | type); }

// Signed integers as protobuf writes int32/int64: two's complement, sign-extended to 64 bits.
uint64_t AsVarint(int64_t v) { return static_cast<uint64_t>(v); }

size_t VarintFieldSize(uint64_t v) { return 1 + VarintSize(v); }
size_t LenFieldSize(size_t len) { return 1 + VarintSize(len) + len; }

size_t IdSize(std::string_view variable, int32_t index, int64_t offset, int64_t count) {
  return LenFieldSize(variable.size()) + VarintFieldSize(AsVarint(index)) +
         VarintFieldSize(AsVarint(offset)) + VarintFieldSize(AsVarint(count));
}

void PutFloat(std::string* out, uint32_t field, float v) {
  PutTag(out, field, kFixed32);
  char le[sizeof(float)];
  std::memcpy(le, &v, sizeof le);  // little-endian hosts only, as the payloads
  out->append(le, sizeof le);
}

// The learning rate and the hyper-parameters of an update, when it carries them.
size_t UpdateSize(const OutChunk& c) {
  return (c.lr ? 1 + sizeof(float) : 0) + (c.hyper ? LenFieldSize(kHyperBytes) : 0);
}

void PutUpdate(std::string* out, const OutChunk& c) {
  if (c.lr) PutFloat(out, kChunkLr, *c.lr);
  if (!c.hyper) return;
  const OptimizerConfig& h = *c.hyper;
  PutTag(out, kChunkHyper, kLen);
  PutVarint(out, kHyperBytes);
  PutFloat(out, kHyperLr, h.lr);
  PutFloat(out, kHyperMomentum, h.momentum);
  PutFloat(out, kHyperDampening, h.dampening);
  PutTag(out, kHyperNesterov, kVarint);
  PutVarint(out, h.nesterov ? 1 : 0);
  PutFloat(out, kHyperBeta1, h.beta1);
  PutFloat(out, kHyperBeta2, h.beta2);
  PutFloat(out, kHyperEps, h.eps);
  PutFloat(out, kHyperWeightDecay, h.weight_decay);
}

// A chunk's fields up to and including the data field's length; the payload follows. The
// update's learning rate and hyper-parameters, when there are any, go before the data
// (protobuf accepts any order).
void PutChunkHead(std::string* out, std::string_view variable, int32_t index, int64_t offset,
                  int64_t count, size_t bytes, const OutChunk* update = nullptr) {
  size_t id = IdSize(variable, index, offset, count);
  PutTag(out, kChunkId, kLen);
  PutVarint(out, id);
  PutTag(out, kIdVariable, kLen);
  PutVarint(out, variable.size());
  out->append(variable);
  PutTag(out, kIdIndex, kVarint);
  PutVarint(out, AsVarint(index));
  PutTag(out, kIdOffset, kVarint);
  PutVarint(out, AsVarint(offset));
  PutTag(out, kIdCount, kVarint);
  PutVarint(out, AsVarint(count));
  PutTag(out, kChunkDtype, kLen);
  PutVarint(out, kFloat32.size());
  out->append(kFloat32);
  if (update != nullptr) PutUpdate(out, *update);
  PutTag(out, kChunkData, kLen);
  PutVarint(out, bytes);
}

size_t ChunkSize(std::string_view variable, int32_t index, int64_t offset, int64_t count,
                 size_t bytes, const OutChunk* update = nullptr) {
  return LenFieldSize(IdSize(variable, index, offset, count)) + LenFieldSize(kFloat32.size()) +
         LenFieldSize(bytes) + (update != nullptr ? UpdateSize(*update) : 0);
}

// A message in gRPC's slices, read front to back; a Mark returns to a position.
class Reader {
 public:
  explicit Reader(const grpc::ByteBuffer& in) {
    if (in.Valid() && !in.Dump(&slices_).ok()) slices_.clear();
    for (const grpc::Slice& s : slices_) size_ += s.size();
    Advance(0);  // past leading empty slices: a read never lands on one
  }

  struct Mark {
    size_t slice = 0, offset = 0, pos = 0;
  };
  Mark mark() const { return at_; }
  void seek(const Mark& m) { at_ = m; }
  size_t pos() const { return at_.pos; }
  size_t size() const { return size_; }

  Status Varint(size_t end, uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (at_.pos >= end) return ProtocolError("a varint runs past its message");
      uint8_t b = Byte();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return Status::Ok();
      }
    }
    return ProtocolError("a varint is longer than 10 bytes");
  }

  // A length-delimited field's length, checked against the enclosing message's end.
  Status Length(size_t end, size_t* out) {
    uint64_t n = 0;
    CADRE_RETURN_IF_ERROR(Varint(end, &n));
    if (n > end - at_.pos) return ProtocolError("a field's length runs past its message");
    *out = static_cast<size_t>(n);
    return Status::Ok();
  }

  // Copies n bytes (already checked to be there) to dst, or skips them when dst is null.
  void Take(size_t n, char* dst) {
    while (n > 0) {
      const grpc::Slice& s = slices_[at_.slice];
      size_t k = std::min(n, s.size() - at_.offset);
      if (dst != nullptr) {
        std::memcpy(dst, s.begin() + at_.offset, k);
        dst += k;
      }
      Advance(k);
      n -= k;
    }
  }

  Status Skip(uint32_t type, size_t end) {
    switch (type) {
      case kVarint: {
        uint64_t ignored;
        return Varint(end, &ignored);
      }
      case kFixed64:
      case kFixed32: {
        size_t n = type == kFixed64 ? 8 : 4;
        if (n > end - at_.pos) return ProtocolError("a fixed-size field runs past its message");
        Take(n, nullptr);
        return Status::Ok();
      }
      case kLen: {
        size_t n = 0;
        CADRE_RETURN_IF_ERROR(Length(end, &n));
        Take(n, nullptr);
        return Status::Ok();
      }
      default:
        return ProtocolError("wire type " + std::to_string(type) + " is not used by ps.proto");
    }
  }

 private:
  uint8_t Byte() {
    uint8_t b = slices_[at_.slice].begin()[at_.offset];
    Advance(1);
    return b;
  }
  void Advance(size_t k) {
    at_.offset += k;
    at_.pos += k;
    while (at_.slice < slices_.size() && at_.offset == slices_[at_.slice].size()) {
      ++at_.slice;
      at_.offset = 0;
    }
  }

  std::vector<grpc::Slice> slices_;
  size_t size_ = 0;
  Mark at_;
};

Status ReadTag(Reader& r, size_t end, uint32_t* field, uint32_t* type) {
  uint64_t tag = 0;
  CADRE_RETURN_IF_ERROR(r.Varint(end, &tag));
  *field = static_cast<uint32_t>(tag >> 3);
  *type = static_cast<uint32_t>(tag & 7);
  if (*field == 0) return ProtocolError("a field has number 0");
  return Status::Ok();
}

// Wrong wire types for known fields are errors, as in protobuf.
Status Expect(uint32_t type, uint32_t want, const char* field) {
  if (type != want) return ProtocolError(std::string("field '") + field + "' has the wrong type");
  return Status::Ok();
}

Status ReadString(Reader& r, size_t end, std::string* out) {
  size_t n = 0;
  CADRE_RETURN_IF_ERROR(r.Length(end, &n));
  out->resize(n);
  r.Take(n, out->data());
  return Status::Ok();
}

// PartitionId; merged into *id, as protobuf merges a repeated message field.
Status ReadId(Reader& r, size_t end, PartitionRef* id) {
  while (r.pos() < end) {
    uint32_t field, type;
    CADRE_RETURN_IF_ERROR(ReadTag(r, end, &field, &type));
    uint64_t v = 0;
    switch (field) {
      case kIdVariable:
        CADRE_RETURN_IF_ERROR(Expect(type, kLen, "variable"));
        CADRE_RETURN_IF_ERROR(ReadString(r, end, &id->variable));
        break;
      case kIdIndex:
        CADRE_RETURN_IF_ERROR(Expect(type, kVarint, "index"));
        CADRE_RETURN_IF_ERROR(r.Varint(end, &v));
        id->index = static_cast<int32_t>(static_cast<uint32_t>(v));  // as protobuf truncates
        break;
      case kIdOffset:
      case kIdCount:
        CADRE_RETURN_IF_ERROR(Expect(type, kVarint, field == kIdOffset ? "offset" : "count"));
        CADRE_RETURN_IF_ERROR(r.Varint(end, &v));
        (field == kIdOffset ? id->offset : id->count) = static_cast<int64_t>(v);
        break;
      default:
        CADRE_RETURN_IF_ERROR(r.Skip(type, end));
    }
  }
  return Status::Ok();
}

Status ReadFloat(Reader& r, size_t end, uint32_t type, const char* field, float* out) {
  CADRE_RETURN_IF_ERROR(Expect(type, kFixed32, field));
  if (sizeof(float) > end - r.pos())
    return ProtocolError(std::string("field '") + field + "' runs past its message");
  r.Take(sizeof *out, reinterpret_cast<char*>(out));
  return Status::Ok();
}

// An OptimizerConfig's hyper-parameters, merged into *h as protobuf merges a message field.
Status ReadHyper(Reader& r, size_t end, OptimizerConfig* h) {
  while (r.pos() < end) {
    uint32_t field, type;
    CADRE_RETURN_IF_ERROR(ReadTag(r, end, &field, &type));
    uint64_t v = 0;
    switch (field) {
      case kHyperLr:
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "lr", &h->lr));
        break;
      case kHyperMomentum:
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "momentum", &h->momentum));
        break;
      case kHyperDampening:
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "dampening", &h->dampening));
        break;
      case kHyperNesterov:
        CADRE_RETURN_IF_ERROR(Expect(type, kVarint, "nesterov"));
        CADRE_RETURN_IF_ERROR(r.Varint(end, &v));
        h->nesterov = v != 0;
        break;
      case kHyperBeta1:
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "beta1", &h->beta1));
        break;
      case kHyperBeta2:
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "beta2", &h->beta2));
        break;
      case kHyperEps:
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "eps", &h->eps));
        break;
      case kHyperWeightDecay:
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "weight_decay", &h->weight_decay));
        break;
      default:
        CADRE_RETURN_IF_ERROR(r.Skip(type, end));
    }
  }
  return Status::Ok();
}

// One TensorChunk between the reader's position and `end`: its id and dtype, and where its data
// starts (*data at the data's first byte, *data_bytes long; 0 bytes when absent); the update's
// learning rate and hyper-parameters when `chunk` is given.
Status ReadChunk(Reader& r, size_t end, PartitionRef* id, std::string* dtype, Reader::Mark* data,
                 size_t* data_bytes, ChunkArgs* chunk = nullptr) {
  *data_bytes = 0;
  *data = r.mark();
  while (r.pos() < end) {
    uint32_t field, type;
    CADRE_RETURN_IF_ERROR(ReadTag(r, end, &field, &type));
    size_t n = 0;
    switch (field) {
      case kChunkId:
        CADRE_RETURN_IF_ERROR(Expect(type, kLen, "id"));
        CADRE_RETURN_IF_ERROR(r.Length(end, &n));
        CADRE_RETURN_IF_ERROR(ReadId(r, r.pos() + n, id));
        break;
      case kChunkDtype:
        CADRE_RETURN_IF_ERROR(Expect(type, kLen, "dtype"));
        CADRE_RETURN_IF_ERROR(ReadString(r, end, dtype));
        break;
      case kChunkData:  // the last occurrence wins
        CADRE_RETURN_IF_ERROR(Expect(type, kLen, "data"));
        CADRE_RETURN_IF_ERROR(r.Length(end, &n));
        *data = r.mark();
        *data_bytes = n;
        r.Take(n, nullptr);
        break;
      case kChunkLr: {  // the last occurrence wins
        if (chunk == nullptr) {
          CADRE_RETURN_IF_ERROR(r.Skip(type, end));
          break;
        }
        float v;
        CADRE_RETURN_IF_ERROR(ReadFloat(r, end, type, "lr", &v));
        chunk->lr = v;
        break;
      }
      case kChunkHyper: {  // occurrences merge
        if (chunk == nullptr) {
          CADRE_RETURN_IF_ERROR(r.Skip(type, end));
          break;
        }
        CADRE_RETURN_IF_ERROR(Expect(type, kLen, "hyper"));
        CADRE_RETURN_IF_ERROR(r.Length(end, &n));
        if (!chunk->hyper) {  // proto3: a field not sent is zero
          chunk->hyper.emplace();
          chunk->hyper->lr = chunk->hyper->beta1 = chunk->hyper->beta2 = chunk->hyper->eps = 0;
        }
        CADRE_RETURN_IF_ERROR(ReadHyper(r, r.pos() + n, &*chunk->hyper));
        break;
      }
      default:
        CADRE_RETURN_IF_ERROR(r.Skip(type, end));
    }
  }
  return Status::Ok();
}

}  // namespace

std::shared_ptr<BufferPool> BufferPool::Create(size_t keep_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(keep_bytes));
}

std::unique_ptr<std::string> BufferPool::Take() {
  std::lock_guard lock(mu_);
  if (idle_.empty()) return std::make_unique<std::string>();
  std::unique_ptr<std::string> b = std::move(idle_.back());
  idle_.pop_back();
  idle_bytes_ -= b->capacity();
  return b;
}

void BufferPool::Give(std::unique_ptr<std::string> buffer) {
  std::lock_guard lock(mu_);
  if (idle_bytes_ + buffer->capacity() > keep_bytes_) return;  // freed here
  idle_bytes_ += buffer->capacity();
  idle_.push_back(std::move(buffer));
}

struct BufferPool::Sent {
  std::shared_ptr<BufferPool> pool;
  std::unique_ptr<std::string> buffer;
};

grpc::Slice BufferPool::Send(std::unique_ptr<std::string> buffer) {
  auto* sent = new Sent{shared_from_this(), std::move(buffer)};
  return grpc::Slice(sent->buffer->data(), sent->buffer->size(), &BufferPool::Return, sent);
}

void BufferPool::Return(void* sent) {
  std::unique_ptr<Sent> s(static_cast<Sent*>(sent));
  s->pool->Give(std::move(s->buffer));
}

PayloadPins::PayloadPins() : count_(std::make_shared<Count>()) {}

grpc::Slice PayloadPins::Wrap(const void* data, size_t bytes) {
  {
    std::lock_guard lock(count_->mu);
    count_->live += 1;
  }
  // gRPC never writes through a slice it sends; its API only takes a mutable pointer.
  return grpc::Slice(const_cast<void*>(data), bytes, &PayloadPins::Release,
                     new std::shared_ptr<Count>(count_));
}

void PayloadPins::Release(void* user_data) {
  auto* count = static_cast<std::shared_ptr<Count>*>(user_data);
  {
    std::lock_guard lock((*count)->mu);
    (*count)->live -= 1;
    (*count)->cv.notify_all();
  }
  delete count;
}

void PayloadPins::WaitReleased() {
  std::unique_lock lock(count_->mu);
  count_->cv.wait(lock, [&] { return count_->live == 0; });
}

grpc::ByteBuffer EncodePush(int32_t worker, int64_t step, const std::vector<OutChunk>& chunks,
                            PayloadPins& pins) {
  std::vector<grpc::Slice> slices;
  std::string head;
  PutTag(&head, kPushWorker, kVarint);
  PutVarint(&head, AsVarint(worker));
  PutTag(&head, kPushStep, kVarint);
  PutVarint(&head, AsVarint(step));
  for (const OutChunk& c : chunks) {
    const size_t bytes = static_cast<size_t>(c.count) * sizeof(float);
    PutTag(&head, kPushGrads, kLen);
    PutVarint(&head, ChunkSize(c.variable, c.index, c.offset, c.count, bytes, &c));
    PutChunkHead(&head, c.variable, c.index, c.offset, c.count, bytes, &c);
    if (bytes < kWrapBytes) {
      head.append(reinterpret_cast<const char*>(c.data), bytes);
      continue;
    }
    slices.emplace_back(head.data(), head.size());  // copies the few framing bytes
    head.clear();
    slices.push_back(pins.Wrap(c.data, bytes));
  }
  if (!head.empty()) slices.emplace_back(head.data(), head.size());
  return grpc::ByteBuffer(slices.data(), slices.size());
}

Status DecodePush(const grpc::ByteBuffer& in, std::string* scratch, PushCall* out) {
  Reader r(in);
  const size_t end = r.size();
  // Every payload byte is a byte of the message, so this much scratch never moves.
  if (scratch->size() < end) scratch->resize(end);
  *out = PushCall();
  std::vector<std::pair<size_t, size_t>> views;  // per chunk: offset into scratch, bytes
  size_t used = 0;
  while (r.pos() < end) {
    uint32_t field, type;
    CADRE_RETURN_IF_ERROR(ReadTag(r, end, &field, &type));
    uint64_t v = 0;
    size_t n = 0;
    switch (field) {
      case kPushWorker:
        CADRE_RETURN_IF_ERROR(Expect(type, kVarint, "worker_id"));
        CADRE_RETURN_IF_ERROR(r.Varint(end, &v));
        out->worker = static_cast<int32_t>(static_cast<uint32_t>(v));
        break;
      case kPushStep:
        CADRE_RETURN_IF_ERROR(Expect(type, kVarint, "step"));
        CADRE_RETURN_IF_ERROR(r.Varint(end, &v));
        out->step = static_cast<int64_t>(v);
        break;
      case kPushGrads: {
        CADRE_RETURN_IF_ERROR(Expect(type, kLen, "grads"));
        CADRE_RETURN_IF_ERROR(r.Length(end, &n));
        ChunkArgs c;
        Reader::Mark data;
        size_t bytes = 0;
        CADRE_RETURN_IF_ERROR(ReadChunk(r, r.pos() + n, &c.id, &c.dtype, &data, &bytes, &c));
        const Reader::Mark after = r.mark();
        r.seek(data);
        r.Take(bytes, scratch->data() + used);
        r.seek(after);
        views.emplace_back(used, bytes);
        used += bytes;
        out->chunks.push_back(std::move(c));
        break;
      }
      default:
        CADRE_RETURN_IF_ERROR(r.Skip(type, end));
    }
  }
  for (size_t i = 0; i < views.size(); ++i)
    out->chunks[i].data = std::string_view(scratch->data() + views[i].first, views[i].second);
  return Status::Ok();
}

PullReplyWriter::PullReplyWriter(std::shared_ptr<BufferPool> pool, size_t payload_bytes)
    : pool_(std::move(pool)), buf_(pool_->Take()) {
  buf_->clear();
  buf_->reserve(payload_bytes + 256);
}

PullReplyWriter::~PullReplyWriter() {
  if (buf_) pool_->Give(std::move(buf_));
}

void PullReplyWriter::Add(const PartitionRef& id, std::span<const float> values) {
  const size_t bytes = values.size_bytes();
  PutTag(buf_.get(), kReplyValues, kLen);
  PutVarint(buf_.get(), ChunkSize(id.variable, id.index, id.offset, id.count, bytes));
  PutChunkHead(buf_.get(), id.variable, id.index, id.offset, id.count, bytes);
  buf_->append(reinterpret_cast<const char*>(values.data()), bytes);
}

grpc::ByteBuffer PullReplyWriter::Finish() {
  grpc::Slice slice = pool_->Send(std::move(buf_));
  return grpc::ByteBuffer(&slice, 1);
}

Status DecodePullReply(const grpc::ByteBuffer& in, const std::vector<InChunk>& expected) {
  Reader r(in);
  const size_t end = r.size();
  size_t k = 0;
  PartitionRef id;
  std::string dtype;
  while (r.pos() < end) {
    uint32_t field, type;
    CADRE_RETURN_IF_ERROR(ReadTag(r, end, &field, &type));
    if (field != kReplyValues) {
      CADRE_RETURN_IF_ERROR(r.Skip(type, end));
      continue;
    }
    CADRE_RETURN_IF_ERROR(Expect(type, kLen, "values"));
    size_t n = 0;
    CADRE_RETURN_IF_ERROR(r.Length(end, &n));
    if (k == expected.size())
      return ProtocolError("reply has more than the " + std::to_string(expected.size()) +
                           " values asked for");
    id = PartitionRef();
    Reader::Mark data;
    size_t bytes = 0;
    CADRE_RETURN_IF_ERROR(ReadChunk(r, r.pos() + n, &id, &dtype, &data, &bytes));
    const InChunk& want = expected[k];
    if (id.variable != want.variable || id.index != want.index ||
        bytes != static_cast<size_t>(want.count) * sizeof(float))
      return ProtocolError("reply value " + std::to_string(k) + " does not match variable '" +
                           std::string(want.variable) + "' partition " +
                           std::to_string(want.index));
    const Reader::Mark after = r.mark();
    r.seek(data);
    r.Take(bytes, reinterpret_cast<char*>(want.dst));
    r.seek(after);
    ++k;
  }
  if (k != expected.size())
    return ProtocolError("reply has " + std::to_string(k) + " values for " +
                         std::to_string(expected.size()) + " partitions");
  return Status::Ok();
}

}  // namespace cadre::ps::wire
