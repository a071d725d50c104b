#include "cadre/engine/request.h"

#include <gtest/gtest.h>

#include "cadre/base/status.h"
#include "cadre/engine/controller.h"

namespace cadre::engine {
namespace {

Request Sample() {
  Request r;
  r.op = OpType::kAlltoall;
  r.name = "layer1.weight";
  r.dtype = comm::DataType::kBFloat16;
  r.shape = {6, 3, 0};
  r.splits = {1, 5};
  r.root = 1;
  r.prescale = 0.5;
  r.postscale = 2.0;
  return r;
}

TEST(RequestTest, EncodeDecodeRoundTrip) {
  std::vector<uint8_t> bytes;
  EncodeRequest(Sample(), bytes);
  Reader in(bytes.data(), bytes.size());
  EXPECT_EQ(DecodeRequest(in), Sample());
  EXPECT_TRUE(in.done());
}

Request GroupMember() {
  Request r = Sample();
  r.grouped = true;
  r.group = "grads";
  r.group_index = 2;
  r.group_size = 3;
  return r;
}

TEST(RequestTest, GroupFieldsRoundTrip) {
  std::vector<uint8_t> bytes;
  EncodeRequest(GroupMember(), bytes);
  Reader in(bytes.data(), bytes.size());
  EXPECT_EQ(DecodeRequest(in), GroupMember());
  EXPECT_TRUE(in.done());
}

TEST(RequestTest, EmptyGroupsMarkerRoundTrips) {
  Request r = GroupMember();
  r.group_index = r.group_size = 0;
  std::vector<uint8_t> bytes;
  EncodeRequest(r, bytes);
  Reader in(bytes.data(), bytes.size());
  EXPECT_EQ(DecodeRequest(in), r);
  EXPECT_NE(r.Describe().find("(marker of the empty group 'grads')"), std::string::npos);
}

TEST(RequestTest, GroupIndexOutsideItsGroupIsAProtocolError) {
  for (auto [index, size] : {std::pair{3u, 3u}, {7u, 3u}, {1u, 0u}}) {
    Request r = GroupMember();
    r.group_index = index;
    r.group_size = size;
    std::vector<uint8_t> bytes;
    EncodeRequest(r, bytes);
    Reader in(bytes.data(), bytes.size());
    try {
      DecodeRequest(in);
      ADD_FAILURE() << "decoded tensor " << index << " of a group of " << size;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kProtocol);
      EXPECT_NE(std::string(e.what()).find("of " + std::to_string(size) + " in a group"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(RequestTest, EveryTruncationIsAProtocolErrorNotACrash) {
  std::vector<uint8_t> bytes;
  EncodeRequest(GroupMember(), bytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    Reader in(bytes.data(), n);
    try {
      DecodeRequest(in);
      ADD_FAILURE() << "decoded a request from " << n << " of " << bytes.size() << " bytes";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kProtocol);
    }
  }
}

TEST(RequestTest, MessageRejectsGarbageNamingTheRank) {
  const uint8_t garbage[] = {0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  try {
    Message::Decode(garbage, sizeof(garbage), 3);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kProtocol);
    EXPECT_NE(std::string(e.what()).find("rank 3"), std::string::npos) << e.what();
  }
}

TEST(RequestTest, IncompatibilityNamesWhatDiffers) {
  Request a;
  a.name = "x";
  a.shape = {4};
  Request b = a;
  EXPECT_FALSE(Incompatibility(a, b));
  b.shape = {5};
  EXPECT_EQ(*Incompatibility(a, b), "shape [4] vs [5]");
  b = a;
  b.dtype = comm::DataType::kFloat64;
  EXPECT_EQ(*Incompatibility(a, b), "dtype float32 vs float64");
  b = a;
  b.reduce_op = comm::ReduceOp::kMax;
  EXPECT_EQ(*Incompatibility(a, b), "op sum vs max");
  // Allgather allows a different first dimension but not different rows.
  a.op = b.op = OpType::kAllgather;
  a.shape = {2, 3};
  b = a;
  b.shape = {7, 3};
  EXPECT_FALSE(Incompatibility(a, b));
  b.shape = {7, 4};
  EXPECT_TRUE(Incompatibility(a, b));
  b = a;
  a.grouped = b.grouped = true;
  a.group = b.group = "g";
  a.group_size = 3;
  b.group_size = 2;
  EXPECT_EQ(*Incompatibility(a, b), "group 'g' of 3 tensors vs 'g' of 2");
}

}  // namespace
}  // namespace cadre::engine
