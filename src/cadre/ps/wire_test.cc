// The hand-written codec of wire.h against protobuf's own: what one writes the other reads, with
// messages cut into slices at every possible place (gRPC delivers a message in pieces of a few
// KiB, so fields and floats straddle slice boundaries), and malformed bytes refused.
#include "cadre/ps/wire.h"

#include <gtest/gtest.h>

#include <numeric>

#include "cadre/ps/ps.pb.h"

namespace cadre::ps::wire {
namespace {

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// `bytes` as a byte buffer cut at `cuts` (ascending offsets), with an empty slice in front.
grpc::ByteBuffer Cut(const std::string& bytes, const std::vector<size_t>& cuts) {
  std::vector<grpc::Slice> slices;
  slices.emplace_back();
  size_t from = 0;
  for (size_t c : cuts) {
    slices.emplace_back(bytes.data() + from, c - from);
    from = c;
  }
  slices.emplace_back(bytes.data() + from, bytes.size() - from);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::vector<float> Iota(size_t n, float from) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

TEST(PsWireTest, EncodePushIsAPushRequestAndWrapsLargePayloads) {
  const std::vector<float> small = Iota(3, 1.0f), large = Iota(5000, -7.0f);
  OptimizerConfig hyper;
  hyper.lr = 0.5f;
  hyper.momentum = 0.75f;
  hyper.dampening = 0.125f;
  hyper.nesterov = true;
  hyper.beta1 = 0.25f;
  hyper.beta2 = 0.875f;
  hyper.eps = 1e-3f;
  hyper.weight_decay = 0.0625f;
  PayloadPins pins;
  {
    grpc::ByteBuffer b = EncodePush(
        -3, 1234567890123,
        {{"w", 2, 10, 3, small.data(), 0.25f, {}}, {"bias", 0, 0, 5000, large.data(), {}, hyper}},
        pins);
    proto::PushRequest req;
    ASSERT_TRUE(req.ParseFromString(Flatten(b)));
    EXPECT_EQ(req.worker_id(), -3);
    EXPECT_EQ(req.step(), 1234567890123);
    ASSERT_EQ(req.grads_size(), 2);
    EXPECT_EQ(req.grads(0).id().variable(), "w");
    EXPECT_EQ(req.grads(0).id().index(), 2);
    EXPECT_EQ(req.grads(0).id().offset(), 10);
    EXPECT_EQ(req.grads(0).id().count(), 3);
    EXPECT_EQ(req.grads(0).dtype(), "float32");
    EXPECT_EQ(req.grads(0).data(), std::string(reinterpret_cast<const char*>(small.data()), 12));
    ASSERT_TRUE(req.grads(0).has_lr());  // a learning rate travels only when given
    EXPECT_EQ(req.grads(0).lr(), 0.25f);
    EXPECT_FALSE(req.grads(1).has_lr());
    // Hyper-parameters travel only when given, every one of them.
    EXPECT_FALSE(req.grads(0).has_hyper());
    ASSERT_TRUE(req.grads(1).has_hyper());
    const proto::OptimizerConfig& h = req.grads(1).hyper();
    EXPECT_EQ(h.lr(), 0.5f);
    EXPECT_EQ(h.momentum(), 0.75f);
    EXPECT_EQ(h.dampening(), 0.125f);
    EXPECT_TRUE(h.nesterov());
    EXPECT_EQ(h.beta1(), 0.25f);
    EXPECT_EQ(h.beta2(), 0.875f);
    EXPECT_EQ(h.eps(), 1e-3f);
    EXPECT_EQ(h.weight_decay(), 0.0625f);
    // What the server decodes is what was sent.
    std::string scratch;
    PushCall call;
    ASSERT_TRUE(DecodePush(b, &scratch, &call).ok());
    ASSERT_EQ(call.chunks.size(), 2u);
    EXPECT_FALSE(call.chunks[0].hyper.has_value());
    ASSERT_TRUE(call.chunks[1].hyper.has_value());
    EXPECT_EQ(*call.chunks[1].hyper, hyper);
    EXPECT_EQ(req.grads(1).id().variable(), "bias");
    EXPECT_EQ(req.grads(1).data(),
              std::string(reinterpret_cast<const char*>(large.data()), 5000 * 4));
    // The large payload is the caller's memory itself, not a copy.
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(b.Dump(&slices).ok());
    bool wrapped = false;
    for (const grpc::Slice& s : slices)
      wrapped |= s.begin() == reinterpret_cast<const uint8_t*>(large.data());
    EXPECT_TRUE(wrapped);
  }
  pins.WaitReleased();  // every wrapping slice is gone with the buffer
}

TEST(PsWireTest, DecodePushReadsProtobufCutAnywhere) {
  proto::PushRequest req;
  req.set_worker_id(2);
  req.set_step(7);
  const std::vector<float> a = Iota(4, 0.5f), b = Iota(2, 100.0f);
  for (auto [name, v] : {std::pair{"a", &a}, std::pair{"bb", &b}}) {
    proto::TensorChunk* c = req.add_grads();
    c->mutable_id()->set_variable(name);
    c->mutable_id()->set_index(1);
    c->mutable_id()->set_offset(4);
    c->mutable_id()->set_count(static_cast<int64_t>(v->size()));
    c->set_dtype("float32");
    c->set_data(reinterpret_cast<const char*>(v->data()), v->size() * 4);
  }
  req.mutable_grads(1)->set_lr(0.125f);
  // protobuf leaves out what is zero: those hyper-parameters are zero, not their defaults.
  req.mutable_grads(1)->mutable_hyper()->set_momentum(0.5f);
  req.mutable_grads(1)->mutable_hyper()->set_nesterov(true);
  const std::string bytes = req.SerializeAsString();
  std::string scratch;
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    for (size_t cut2 = cut; cut2 <= bytes.size(); cut2 += 5) {
      PushCall call;
      Status s = DecodePush(Cut(bytes, {cut, cut2}), &scratch, &call);
      ASSERT_TRUE(s.ok()) << s.ToString() << " cut at " << cut << ", " << cut2;
      EXPECT_EQ(call.worker, 2);
      EXPECT_EQ(call.step, 7);
      ASSERT_EQ(call.chunks.size(), 2u);
      EXPECT_EQ(call.chunks[1].id.variable, "bb");
      EXPECT_EQ(call.chunks[1].id.index, 1);
      EXPECT_EQ(call.chunks[1].id.offset, 4);
      EXPECT_EQ(call.chunks[1].id.count, 2);
      EXPECT_EQ(call.chunks[0].dtype, "float32");
      EXPECT_EQ(call.chunks[0].data, req.grads(0).data());
      EXPECT_EQ(call.chunks[1].data, req.grads(1).data());
      EXPECT_FALSE(call.chunks[0].lr.has_value());
      ASSERT_TRUE(call.chunks[1].lr.has_value());
      EXPECT_EQ(*call.chunks[1].lr, 0.125f);
      EXPECT_FALSE(call.chunks[0].hyper.has_value());
      ASSERT_TRUE(call.chunks[1].hyper.has_value());
      EXPECT_EQ(call.chunks[1].hyper->momentum, 0.5f);
      EXPECT_TRUE(call.chunks[1].hyper->nesterov);
      EXPECT_EQ(call.chunks[1].hyper->beta1, 0.0f);
      EXPECT_EQ(call.chunks[1].hyper->eps, 0.0f);
    }
  }
}

TEST(PsWireTest, DecodePushTakesFieldsInAnyOrderAndSkipsUnknownOnes) {
  // Hand-made: data before id, an unknown varint field (9) and an unknown fixed32 (10) inside
  // the chunk, step given twice (the last wins), an unknown length-delimited field (15) outside.
  std::string chunk;
  chunk += "\x1a\x04" + std::string("\x00\x00\x80\x3f", 4);  // data: 1.0f
  chunk += "\x48\x05";                                       // field 9, varint 5
  chunk += "\x55" + std::string("abcd");                     // field 10, fixed32
  chunk += "\x0a\x07\x0a\x01v\x20\x01\x18\x02";              // id: "v", count 1, offset 2
  chunk +=
      "\x12\x07"
      "float32";
  std::string msg = "\x10\x05\x10\x06";  // step 5, then step 6
  msg += "\x1a" + std::string(1, static_cast<char>(chunk.size())) + chunk;
  msg += "\x7a\x02xy";  // field 15, 2 bytes
  std::string scratch;
  PushCall call;
  Status s = DecodePush(Cut(msg, {}), &scratch, &call);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(call.step, 6);
  ASSERT_EQ(call.chunks.size(), 1u);
  EXPECT_EQ(call.chunks[0].id.variable, "v");
  EXPECT_EQ(call.chunks[0].id.count, 1);
  EXPECT_EQ(call.chunks[0].id.offset, 2);
  ASSERT_EQ(call.chunks[0].data.size(), 4u);
  float f;
  std::memcpy(&f, call.chunks[0].data.data(), 4);
  EXPECT_EQ(f, 1.0f);
  // protobuf agrees.
  proto::PushRequest req;
  ASSERT_TRUE(req.ParseFromString(msg));
  EXPECT_EQ(req.step(), 6);
}

TEST(PsWireTest, MalformedPushIsAProtocolError) {
  const std::vector<float> v = Iota(8, 0.0f);
  PayloadPins pins;
  const std::string good = Flatten(EncodePush(0, 1, {{"x", 0, 0, 8, v.data(), 0.5f, {}}}, pins));
  std::string scratch;
  PushCall call;
  // Every truncation ends inside a field.
  for (size_t n = 1; n < good.size(); ++n) {
    Status s = DecodePush(Cut(good.substr(0, n), {}), &scratch, &call);
    if (n == 2 || n == 4) continue;  // ends right after worker_id or step: a valid message
    EXPECT_EQ(s.code(), Code::kProtocol) << "truncated to " << n << ": " << s.ToString();
  }
  // A wrong wire type for a known field, an end-group tag, field number 0, an 11-byte varint.
  for (const std::string& bad :
       {std::string("\x1d\x00\x00\x00\x00", 5), std::string("\x0c"), std::string("\x00\x01", 2),
        std::string("\x08") + std::string(10, '\xff') + "\x01"}) {
    EXPECT_EQ(DecodePush(Cut(bad, {}), &scratch, &call).code(), Code::kProtocol);
  }
  pins.WaitReleased();
}

TEST(PsWireTest, PullReplyRoundTripsAndChecksEveryValue) {
  const std::vector<float> a = Iota(2000, 3.0f), b = Iota(3, -1.0f);
  auto pool = BufferPool::Create(1 << 20);
  PullReplyWriter w(pool, 100);  // too small a guess: only costs a reallocation
  w.Add({"a", 0, 0, 2000}, a);
  w.Add({"b", 4, 12, 3}, b);
  const std::string bytes = Flatten(w.Finish());
  proto::PullReply rep;
  ASSERT_TRUE(rep.ParseFromString(bytes));
  ASSERT_EQ(rep.values_size(), 2);
  EXPECT_EQ(rep.values(1).id().index(), 4);
  EXPECT_EQ(rep.values(1).id().offset(), 12);
  EXPECT_EQ(rep.values(1).dtype(), "float32");

  std::vector<float> out_a(2000), out_b(3);
  for (size_t cut = 0; cut <= bytes.size(); cut += 37) {
    std::fill(out_a.begin(), out_a.end(), 0.0f);
    Status s = DecodePullReply(Cut(bytes, {cut}),
                               {{"a", 0, 2000, out_a.data()}, {"b", 4, 3, out_b.data()}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(out_a, a);
    EXPECT_EQ(out_b, b);
  }
  // A value of another partition, of another size, one too many or too few.
  const grpc::ByteBuffer in = Cut(bytes, {});
  EXPECT_EQ(DecodePullReply(in, {{"a", 1, 2000, out_a.data()}, {"b", 4, 3, out_b.data()}}).code(),
            Code::kProtocol);
  EXPECT_EQ(DecodePullReply(in, {{"a", 0, 1999, out_a.data()}, {"b", 4, 3, out_b.data()}}).code(),
            Code::kProtocol);
  EXPECT_EQ(DecodePullReply(in, {{"a", 0, 2000, out_a.data()}}).code(), Code::kProtocol);
  EXPECT_EQ(
      DecodePullReply(
          in, {{"a", 0, 2000, out_a.data()}, {"b", 4, 3, out_b.data()}, {"c", 0, 1, out_b.data()}})
          .code(),
      Code::kProtocol);
}

TEST(PsWireTest, DecodePullReplyReadsProtobufsEncoding) {
  proto::PullReply rep;
  const std::vector<float> v = Iota(300, 9.0f);
  proto::TensorChunk* c = rep.add_values();
  c->mutable_id()->set_variable("v");
  c->mutable_id()->set_count(300);
  c->set_dtype("float32");
  c->set_data(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  rep.add_values();  // an empty partition: default id (""), no data
  std::vector<float> out(300);
  Status s = DecodePullReply(Cut(rep.SerializeAsString(), {1, 2, 3, 500}),
                             {{"v", 0, 300, out.data()}, {"", 0, 0, nullptr}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out, v);
}

TEST(PsWireTest, BufferPoolReusesBuffersAndOutlivesItsSlices) {
  auto pool = BufferPool::Create(1 << 20);
  std::unique_ptr<std::string> b = pool->Take();
  b->assign(100000, 'x');
  const char* data = b->data();
  {
    grpc::Slice sent = pool->Send(std::move(b));
    EXPECT_EQ(reinterpret_cast<const char*>(sent.begin()), data);  // not a copy
    EXPECT_EQ(sent.size(), 100000u);
    EXPECT_NE(pool->Take()->data(), data);  // still gRPC's
  }
  // Back once the slice is gone, with its bytes and capacity.
  std::unique_ptr<std::string> again = pool->Take();
  EXPECT_EQ(again->data(), data);
  EXPECT_EQ(again->size(), 100000u);

  // Past the idle limit a buffer is freed, not kept.
  auto small = BufferPool::Create(1000);
  small->Give(std::move(again));
  EXPECT_NE(small->Take()->data(), data);

  // A slice released after its pool's last other owner is gone still returns its buffer.
  grpc::Slice late;
  {
    auto gone = BufferPool::Create(1 << 20);
    std::unique_ptr<std::string> c = gone->Take();
    c->assign(64, 'y');
    late = gone->Send(std::move(c));
  }
  EXPECT_EQ(late.size(), 64u);
  late = grpc::Slice();
}

}  // namespace
}  // namespace cadre::ps::wire
