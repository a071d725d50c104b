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

TEST(RequestTest, EveryTruncationIsAProtocolErrorNotACrash) {
  std::vector<uint8_t> bytes;
  EncodeRequest(Sample(), bytes);
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
}

}  // namespace
}  // namespace cadre::engine
