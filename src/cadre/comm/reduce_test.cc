#include "cadre/comm/reduce.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "cadre/comm/typed_values.h"

namespace cadre::comm {
namespace {

using testing::Get;
using testing::Make;

TEST(ReduceTest, EveryDtypeAndOpMatchesScalarMath) {
  const size_t count = 1037;  // odd, not a multiple of any vector width or block
  for (int d = 0; d < kNumDataTypes; ++d) {
    auto dt = static_cast<DataType>(d);
    double lo = testing::IsSigned(dt) ? -4 : 0;
    // bool holds 0 and 1 only.
    auto x_at = [&](size_t i) {
      return dt == DataType::kBool ? double(i % 3 == 0) : lo + double(i % 9);
    };
    auto y_at = [&](size_t i) {
      return dt == DataType::kBool ? double(i % 2 == 0) : lo + double((i * 5) % 7);
    };
    auto a = Make(dt, count, x_at);
    auto b = Make(dt, count, y_at);
    for (int o = 0; o < kNumReduceOps; ++o) {
      auto op = static_cast<ReduceOp>(o);
      std::vector<uint8_t> out(a.size());
      Reduce(out.data(), a.data(), b.data(), count, dt, op);
      for (size_t i = 0; i < count; ++i) {
        double want = testing::Combine(dt, op, x_at(i), y_at(i));
        ASSERT_EQ(Get(dt, out.data(), i), want)
            << DataTypeName(dt) << " " << ReduceOpName(op) << " at " << i;
      }
    }
  }
}

TEST(ReduceTest, InPlaceAndManySources) {
  auto dt = DataType::kInt64;
  auto a = Make(dt, 100, [](size_t i) { return double(i); });
  auto b = Make(dt, 100, [](size_t i) { return 2.0 * double(i); });
  auto c = Make(dt, 100, [](size_t) { return 7.0; });
  const void* srcs[3] = {a.data(), b.data(), c.data()};
  ReduceMany(a.data(), srcs, 3, 100, dt, ReduceOp::kSum);
  for (size_t i = 0; i < 100; ++i) ASSERT_EQ(Get(dt, a.data(), i), 3.0 * double(i) + 7);
}

TEST(ReduceTest, IntegersWrapInsteadOfOverflowing) {
  int8_t a = 127, b = 1, out = 0;
  Reduce(&out, &a, &b, 1, DataType::kInt8, ReduceOp::kSum);
  EXPECT_EQ(out, -128);
  int32_t x = 1 << 30, y = 4, z = 0;
  Reduce(&z, &x, &y, 1, DataType::kInt32, ReduceOp::kProduct);
  EXPECT_EQ(z, 0);
}

TEST(ReduceTest, Int16ProductsWrapAndBoolsStayZeroOrOne) {
  int16_t a = 300, b = 300, out = 0;  // 90000 wraps to 24464 (no int overflow on the way)
  Reduce(&out, &a, &b, 1, DataType::kInt16, ReduceOp::kProduct);
  EXPECT_EQ(out, static_cast<int16_t>(90000 - 65536));
  int16_t c = -32768, d = -1;
  Reduce(&out, &c, &d, 1, DataType::kInt16, ReduceOp::kProduct);
  EXPECT_EQ(out, -32768);
  // Bytes other than 0 and 1 (which torch never stores in a bool) still give 0 or 1.
  uint8_t x[4] = {0, 1, 2, 0}, y[4] = {0, 0, 1, 5}, o[4];
  Reduce(o, x, y, 4, DataType::kBool, ReduceOp::kSum);
  EXPECT_EQ(std::vector<uint8_t>(o, o + 4), (std::vector<uint8_t>{0, 1, 1, 1}));
  Reduce(o, x, y, 4, DataType::kBool, ReduceOp::kProduct);
  EXPECT_EQ(std::vector<uint8_t>(o, o + 4), (std::vector<uint8_t>{0, 0, 1, 0}));
}

TEST(ReduceTest, HalfConversionsRoundToNearestEven) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // the tie above the largest half rounds to inf
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);             // tie rounds to even (zero)
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie, even stays
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, odd rounds up
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half survives a round trip
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << h;
  }
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
  EXPECT_EQ(BFloat16ToFloat(0x4049), 3.140625f);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

TEST(ReduceTest, NamesCoverEveryValue) {
  for (int d = 0; d < kNumDataTypes; ++d) EXPECT_NE(DataTypeName(DataType(d)), "unknown");
  for (int o = 0; o < kNumReduceOps; ++o) EXPECT_NE(ReduceOpName(ReduceOp(o)), "unknown");
  EXPECT_EQ(ElementSize(DataType::kBFloat16), 2u);
}

// The block conversions (F16C where the CPU has it) agree bit for bit with the scalar ones for
// every half and for floats around every rounding boundary; NaNs stay NaNs.
TEST(ReduceTest, BlockHalfConversionsMatchTheScalarOnes) {
  std::vector<uint16_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> widened(halves.size());
  HalfToFloatN(halves.data(), widened.data(), halves.size());
  for (uint32_t h = 0; h < 65536; ++h) {
    const float scalar = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(scalar)) {
      ASSERT_TRUE(std::isnan(widened[h])) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(widened[h]), std::bit_cast<uint32_t>(scalar)) << h;
    }
  }
  // Every float whose low 13 bits sit at or around a half's rounding point, over all exponents.
  std::vector<float> floats;
  for (uint32_t hi = 0; hi < (1u << 19); hi += 7) {
    for (uint32_t lo : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x1fffu}) {
      floats.push_back(std::bit_cast<float>((hi << 13) | lo));
    }
  }
  std::vector<uint16_t> narrowed(floats.size());
  FloatToHalfN(floats.data(), narrowed.data(), floats.size());
  for (size_t i = 0; i < floats.size(); ++i) {
    if (std::isnan(floats[i])) {
      ASSERT_TRUE(std::isnan(HalfToFloat(narrowed[i]))) << i;
    } else {
      ASSERT_EQ(narrowed[i], FloatToHalf(floats[i])) << std::bit_cast<uint32_t>(floats[i]);
    }
  }
}

}  // namespace
}  // namespace cadre::comm
