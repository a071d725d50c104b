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

TEST(QuotedTextTest, WellFormedUtf8ReadsAsWritten) {
  EXPECT_EQ(QuotedText("caf\xc3\xa9 \xe5\xad\xa6\xe7\xbf\x92 \xf0\x9f\x9a\x80"),
            "'caf\xc3\xa9 \xe5\xad\xa6\xe7\xbf\x92 \xf0\x9f\x9a\x80'");
  EXPECT_EQ(QuotedText("it's a\\b"), "'it\\'s a\\\\b'");
  EXPECT_EQ(EscapedText("it's"), "it's");
}

TEST(QuotedTextTest, ControlsAndBytesThatAreNotUtf8AreEscaped) {
  // C0, DEL, C1 (U+009B, a terminal's CSI), a right-to-left override, a lone continuation byte,
  // a truncated sequence, an overlong slash, a surrogate, and 0xff.
  const std::string evil = std::string("a\nb\x1b[31m\x7f\xc2\x9b\xe2\x80\xae", 14) +
                           "\x80\xe5\xad \xc0\xaf\xed\xa0\x80\xff";
  EXPECT_EQ(QuotedText(evil),
            "'a\\x0ab\\x1b[31m\\x7f\\xc2\\x9b\\xe2\\x80\\xae\\x80\\xe5\\xad "
            "\\xc0\\xaf\\xed\\xa0\\x80\\xff'");
  EXPECT_EQ(EscapedText(std::string("unknown escape character: \xff")),
            "unknown escape character: \\xff");
}

TEST(QuotedTextTest, LongTextIsCutAtACharacter) {
  // Ten bytes would split the last "\xc3\xa9": it is left out whole.
  EXPECT_EQ(QuotedText("abcdefghi\xc3\xa9xyz", 10), "'abcdefghi'... (14 bytes)");
  EXPECT_EQ(QuotedText(std::string(5000, 'a')).size(),
            82u + std::string("... (5000 bytes)").size());
}

TEST(IsUtf8Test, WellFormedOnly) {
  EXPECT_TRUE(IsUtf8(""));
  EXPECT_TRUE(IsUtf8("plain"));
  EXPECT_TRUE(IsUtf8("caf\xc3\xa9 \xf4\x8f\xbf\xbf"));  // U+10FFFF, the last code point
  EXPECT_FALSE(IsUtf8("caf\xff"));
  EXPECT_FALSE(IsUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsUtf8("\xc1\xbf"));          // overlong
  EXPECT_FALSE(IsUtf8("\xed\xb0\x80"));      // a surrogate
  EXPECT_FALSE(IsUtf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(IsUtf8Test, FirstNonUtf8ByteIsWhereTheTextStopsBeingUtf8) {
  EXPECT_EQ(FirstNonUtf8Byte("caf\xc3\xa9"), std::nullopt);
  EXPECT_EQ(FirstNonUtf8Byte("caf\xc3\xa9\xff!"), 5u);
  EXPECT_EQ(FirstNonUtf8Byte("ab\xe2\x82"), 2u);  // a sequence cut short starts at its lead
}

}  // namespace
}  // namespace cadre
