#include "cadre/netem/link_spec.h"

#include <gtest/gtest.h>

#include "cadre/netem/traffic_control.h"

namespace cadre::netem {
namespace {

using std::chrono::microseconds;

LinkSpec Parse(std::string_view text) {
  LinkSpec spec;
  Status s = ParseLinkSpec(text, &spec);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return spec;
}

std::string ParseError(std::string_view text) {
  LinkSpec spec;
  Status s = ParseLinkSpec(text, &spec);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << text;
  return s.message();
}

TEST(LinkSpecTest, ParsesRateDelayLoss) {
  LinkSpec s = Parse("1gbit,1ms,0.1%");
  EXPECT_EQ(s.rate_bits_per_s, 1'000'000'000u);
  EXPECT_EQ(s.delay, microseconds(1000));
  EXPECT_DOUBLE_EQ(s.loss, 0.001);
  EXPECT_TRUE(s.wants_delay_or_loss());
}

TEST(LinkSpecTest, DelayAndLossAreOptional) {
  LinkSpec s = Parse("100mbit");
  EXPECT_EQ(s.rate_bits_per_s, 100'000'000u);
  EXPECT_EQ(s.delay, microseconds(0));
  EXPECT_EQ(s.loss, 0.0);
  EXPECT_FALSE(s.wants_delay_or_loss());
  EXPECT_EQ(Parse("2.5gbit, 500us").delay, microseconds(500));
  EXPECT_EQ(Parse("2.5GBit").rate_bits_per_s, 2'500'000'000u);
  EXPECT_EQ(Parse("64kbit,0.5s").delay, microseconds(500'000));
  EXPECT_EQ(Parse("1tbit").rate_bits_per_s, 1'000'000'000'000u);
  EXPECT_EQ(Parse("8000bit").rate_bits_per_s, 8000u);
}

TEST(LinkSpecTest, ErrorsNameTheBadPart) {
  EXPECT_NE(ParseError("1gbt,1ms").find("rate \"1gbt\" has unknown unit \"gbt\""),
            std::string::npos);
  EXPECT_NE(ParseError("1gbit,1min").find("delay \"1min\" has unknown unit"), std::string::npos);
  EXPECT_NE(ParseError("1gbit,1ms,0.1").find("loss \"0.1\" is not a percentage"),
            std::string::npos);
  EXPECT_NE(ParseError("1gbit,1ms,100%").find("below 100%"), std::string::npos);
  EXPECT_NE(ParseError("gbit").find("rate \"gbit\" is not a number"), std::string::npos);
  EXPECT_NE(ParseError("-1gbit").find("rate \"-1gbit\""), std::string::npos);
  EXPECT_NE(ParseError("").find("has no rate"), std::string::npos);
  EXPECT_NE(ParseError(",1ms").find("has no rate"), std::string::npos);
  EXPECT_NE(ParseError("1gbit,1ms,1%,x").find("more than 3 parts"), std::string::npos);
  EXPECT_NE(ParseError("1gbit,").find("delay \"\""), std::string::npos);
  EXPECT_NE(ParseError("0gbit").find("out of range"), std::string::npos);
  EXPECT_NE(ParseError("100tbit").find("out of range"), std::string::npos);
  EXPECT_NE(ParseError("1gbit,2min").find("delay"), std::string::npos);
  EXPECT_NE(ParseError("1gbit,61s").find("at most 60s"), std::string::npos);
  EXPECT_NE(ParseError("nanbit").find("not a number"), std::string::npos);
  EXPECT_NE(ParseError("1e9bit").find("unknown unit \"e9bit\""), std::string::npos);
  // tc's "mbps" means megabytes per second: refused rather than silently misread.
  EXPECT_NE(ParseError("100mbps").find("bytes per second"), std::string::npos);
  // The whole text is quoted, so the user sees the context.
  EXPECT_EQ(ParseError("1gbit,1xs").rfind("link spec \"1gbit,1xs\": ", 0), 0u);
}

TEST(LinkSpecTest, ThrowingFormCarriesTheCode) {
  try {
    ParseLinkSpecOrThrow("fast");
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
  }
}

TEST(LinkSpecTest, FormatsRoundTrip) {
  EXPECT_EQ(FormatRate(1'000'000'000), "1gbit");
  EXPECT_EQ(FormatRate(1'500'000), "1500kbit");
  EXPECT_EQ(FormatRate(1'234), "1234bit");
  EXPECT_EQ(FormatDelay(microseconds(2000)), "2ms");
  EXPECT_EQ(FormatDelay(microseconds(1500)), "1500us");
  EXPECT_EQ(FormatDelay(microseconds(0)), "0us");
  for (const char* text : {"1gbit", "50mbit,1ms", "1gbit,250us,0.5%", "10kbit,0us,1%"}) {
    EXPECT_EQ(Parse(text).ToString(), text);
  }
}

TEST(LinkSpecTest, HopShapeSplitsDelayAndLossOverTwoHops) {
  HopShape hop = HopShapeFor(Parse("1gbit,2ms,19%"));
  EXPECT_EQ(hop.rate_bits_per_s, 1'000'000'000u);
  EXPECT_EQ(hop.delay, microseconds(1000));
  // Two hops each dropping 10% deliver 0.9 * 0.9 = 81%.
  EXPECT_NEAR(hop.loss, 0.1, 1e-12);
  EXPECT_FALSE(HopShapeFor(Parse("1gbit")).wants_netem());
}

}  // namespace
}  // namespace cadre::netem
