#include "cadre/base/printable.h"

#include <gtest/gtest.h>

namespace cadre {
namespace {

TEST(QuotedTest, PrintableAsciiReadsUnchanged) {
  EXPECT_EQ(Quoted("rank 3"), "'rank 3'");
  EXPECT_EQ(Quoted(""), "''");
}

TEST(QuotedTest, NothingAPeerSendsCanBreakTheLine) {
  // A forged second log line, a terminal escape, a NUL and UTF-8 bytes.
  const std::string evil = std::string("x\nW rank 0: ok\r\x1b[2J", 19) + '\0' + "\xc3\xa9'\\";
  const std::string q = Quoted(evil);
  EXPECT_EQ(q, "'x\\x0aW rank 0: ok\\x0d\\x1b[2J\\x00\\xc3\\xa9\\'\\\\'");
  for (char c : q) {
    EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
  }
}

TEST(QuotedTest, LongTextIsCutAndItsLengthNamed) {
  const std::string q = Quoted(std::string(5000, 'a'), 10);
  EXPECT_EQ(q, "'aaaaaaaaaa'... (5000 bytes)");
  EXPECT_EQ(Quoted(std::string(80, 'b')).size(), 82u);  // the default bound keeps 80 bytes
}

}  // namespace
}  // namespace cadre
