#include "cadre/base/byte_size.h"

#include <gtest/gtest.h>

namespace cadre {
namespace {

uint64_t Bytes(const char* text) {
  uint64_t b = 0;
  Status s = ParseByteSize(text, &b);
  EXPECT_TRUE(s.ok()) << text << ": " << s.ToString();
  return b;
}

TEST(ByteSizeTest, NumbersWithBinaryUnits) {
  EXPECT_EQ(Bytes("4096"), 4096u);
  EXPECT_EQ(Bytes("4B"), 4u);
  EXPECT_EQ(Bytes("1K"), 1024u);
  EXPECT_EQ(Bytes("1k"), 1024u);
  EXPECT_EQ(Bytes("256KiB"), 256u << 10);
  EXPECT_EQ(Bytes("16M"), 16u << 20);
  EXPECT_EQ(Bytes("0.5M"), 512u << 10);
  EXPECT_EQ(Bytes("1GiB"), 1u << 30);
}

TEST(ByteSizeTest, RefusesWhatIsNotAByteCount) {
  for (const char* text : {"", "M", "-4", "4X", "1.5", "0.1K", "4 K", "1e300", "2000000G"}) {
    uint64_t b = 7;
    Status s = ParseByteSize(text, &b);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(std::string("'") + text + "'"), std::string::npos) << s.message();
    EXPECT_EQ(b, 7u) << text;
  }
}

}  // namespace
}  // namespace cadre
