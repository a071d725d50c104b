#include "cadre/net/frame.h"

#include <gtest/gtest.h>

#include <string>

#include "cadre/net/wire.h"

namespace cadre::net {
namespace {

std::vector<uint8_t> Encode(const FrameHeader& h, const std::string& payload = "") {
  std::vector<uint8_t> out(kFrameHeaderSize);
  EncodeFrameHeader(h, out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

TEST(FrameTest, RoundTripsEveryField) {
  FrameHeader h{kProtocolVersion, 42, 0x81, 0x0102030405060708ull, 5};
  auto bytes = Encode(h);
  ASSERT_EQ(bytes.size(), kFrameHeaderSize);
  EXPECT_EQ(bytes[0], 'C');
  EXPECT_EQ(bytes[3], 'F');
  FrameHeader out;
  ASSERT_TRUE(DecodeFrameHeader(bytes, 100, &out).ok());
  EXPECT_EQ(out.version, kProtocolVersion);
  EXPECT_EQ(out.type, 42);
  EXPECT_EQ(out.flags, 0x81);
  EXPECT_EQ(out.tag, 0x0102030405060708ull);
  EXPECT_EQ(out.length, 5u);
}

TEST(FrameTest, TruncatedHeader) {
  auto bytes = Encode({kProtocolVersion, 1, 0, 0, 0});
  FrameHeader out;
  for (size_t n = 0; n < kFrameHeaderSize; ++n) {
    Status s = DecodeFrameHeader(std::span(bytes.data(), n), 100, &out);
    EXPECT_EQ(s.code(), Code::kProtocol) << n;
    EXPECT_NE(s.message().find("truncated"), std::string::npos);
  }
}

TEST(FrameTest, BadMagic) {
  auto bytes = Encode({kProtocolVersion, 1, 0, 0, 0});
  bytes[0] = 'G';
  FrameHeader out;
  Status s = DecodeFrameHeader(bytes, 100, &out);
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("magic"), std::string::npos);
}

TEST(FrameTest, VersionMismatchNamesBothVersions) {
  auto bytes = Encode({static_cast<uint16_t>(kProtocolVersion + 6), 1, 0, 0, 0});
  FrameHeader out;
  Status s = DecodeFrameHeader(bytes, 100, &out);
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("version " + std::to_string(kProtocolVersion + 6)), std::string::npos);
  EXPECT_NE(s.message().find("version " + std::to_string(kProtocolVersion)), std::string::npos);
}

TEST(FrameTest, OversizedAndInvalidType) {
  FrameHeader out;
  Status s = DecodeFrameHeader(Encode({kProtocolVersion, 1, 0, 0, 101}), 100, &out);
  EXPECT_EQ(s.code(), Code::kProtocol);
  EXPECT_NE(s.message().find("101 bytes"), std::string::npos);
  EXPECT_TRUE(DecodeFrameHeader(Encode({kProtocolVersion, 1, 0, 0, 100}), 100, &out).ok());
  EXPECT_EQ(DecodeFrameHeader(Encode({kProtocolVersion, 0, 0, 0, 0}), 100, &out).code(),
            Code::kProtocol);
  EXPECT_EQ(DecodeFrameHeader(Encode({kProtocolVersion, 200, 0, 0, 0}), 100, &out).code(),
            Code::kProtocol);
}

TEST(FrameReaderTest, ReassemblesFramesFedByteByByte) {
  auto a = Encode({kProtocolVersion, 3, 0, 7, 5}, "hello");
  auto b = Encode({kProtocolVersion, 4, 0, 8, 0});
  auto c = Encode({kProtocolVersion, 5, 0, 9, 3}, "xyz");
  std::vector<uint8_t> stream;
  for (auto* f : {&a, &b, &c}) stream.insert(stream.end(), f->begin(), f->end());
  FrameReader reader(1024);
  std::vector<std::pair<uint64_t, std::string>> got;
  FrameHeader h;
  std::vector<uint8_t> payload;
  for (uint8_t byte : stream) {
    reader.Append(&byte, 1);
    while (reader.Next(&h, &payload))
      got.emplace_back(h.tag, std::string(payload.begin(), payload.end()));
  }
  ASSERT_TRUE(reader.status().ok());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], std::make_pair(uint64_t{7}, std::string("hello")));
  EXPECT_EQ(got[1], std::make_pair(uint64_t{8}, std::string()));
  EXPECT_EQ(got[2], std::make_pair(uint64_t{9}, std::string("xyz")));
  EXPECT_EQ(reader.pending(), 0u);
}

TEST(FrameReaderTest, GarbageIsStickyError) {
  FrameReader reader(1024);
  std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  reader.Append(reinterpret_cast<const uint8_t*>(junk.data()), junk.size());
  FrameHeader h;
  std::vector<uint8_t> payload;
  EXPECT_FALSE(reader.Next(&h, &payload));
  EXPECT_EQ(reader.status().code(), Code::kProtocol);
  auto good = Encode({kProtocolVersion, 3, 0, 0, 0});
  reader.Append(good.data(), good.size());
  EXPECT_FALSE(reader.Next(&h, &payload));
  EXPECT_EQ(reader.status().code(), Code::kProtocol);
}

TEST(FrameReaderTest, OversizedLengthFailsBeforeThePayloadArrives) {
  FrameReader reader(16);
  auto big = Encode({kProtocolVersion, 3, 0, 0, uint64_t{1} << 40});
  reader.Append(big.data(), big.size());
  FrameHeader h;
  std::vector<uint8_t> payload;
  EXPECT_FALSE(reader.Next(&h, &payload));
  EXPECT_EQ(reader.status().code(), Code::kProtocol);
}

TEST(WireTest, RoundTrip) {
  WireWriter w;
  w.PutU8(7);
  w.PutU32(0xdeadbeef);
  w.PutI64(-5);
  w.PutString("key");
  w.PutBytes(std::vector<uint8_t>{1, 2, 3});
  auto data = w.Take();
  WireReader r(data);
  uint8_t a;
  uint32_t b;
  int64_t c;
  std::string d;
  std::vector<uint8_t> e;
  ASSERT_TRUE(r.GetU8("a", &a).ok());
  ASSERT_TRUE(r.GetU32("b", &b).ok());
  ASSERT_TRUE(r.GetI64("c", &c).ok());
  ASSERT_TRUE(r.GetString("d", 10, &d).ok());
  ASSERT_TRUE(r.GetBytes("e", 10, &e).ok());
  EXPECT_TRUE(r.ExpectEnd("test").ok());
  EXPECT_EQ(a, 7);
  EXPECT_EQ(b, 0xdeadbeefu);
  EXPECT_EQ(c, -5);
  EXPECT_EQ(d, "key");
  EXPECT_EQ(e, (std::vector<uint8_t>{1, 2, 3}));
}

TEST(WireTest, TruncatedAndOversizedFieldsNameTheField) {
  WireWriter w;
  w.PutString("abcdef");
  auto data = w.Take();
  std::string s;
  WireReader limited(data);
  Status over = limited.GetString("key", 3, &s);
  EXPECT_EQ(over.code(), Code::kProtocol);
  EXPECT_NE(over.message().find("'key'"), std::string::npos);
  WireReader cut(std::span(data.data(), data.size() - 1));
  Status trunc = cut.GetString("value", 100, &s);
  EXPECT_EQ(trunc.code(), Code::kProtocol);
  EXPECT_NE(trunc.message().find("'value'"), std::string::npos);
  WireReader extra(data);
  uint8_t b;
  ASSERT_TRUE(extra.GetU8("x", &b).ok());
  EXPECT_EQ(extra.ExpectEnd("SET").code(), Code::kProtocol);
}

}  // namespace
}  // namespace cadre::net
