#include "cadre/engine/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "cadre/comm/reduce.h"

namespace cadre::engine {

using comm::DataType;

namespace {

template <typename T>
void ScaleFloat(void* data, size_t count, T factor) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) p[i] = factor * p[i];
}

// Widened a block at a time, scaled in float32, narrowed again (comm's block conversions use the
// CPU's F16C instructions where there are some).
template <void (*kToFloat)(const uint16_t*, float*, size_t),
          void (*kFromFloat)(const float*, uint16_t*, size_t)>
void Scale16(void* data, size_t count, float factor) {
  constexpr size_t kBlock = 512;
  float block[kBlock];
  uint16_t* p = static_cast<uint16_t*>(data);
  for (size_t base = 0; base < count; base += kBlock) {
    const size_t n = std::min(kBlock, count - base);
    kToFloat(p + base, block, n);
    for (size_t i = 0; i < n; ++i) block[i] = factor * block[i];
    kFromFloat(block, p + base, n);
  }
}

template <typename T>
void ScaleInt(void* data, size_t count, double factor) {
  constexpr double kLo = static_cast<double>(std::numeric_limits<T>::min());
  constexpr double kHi = static_cast<double>(std::numeric_limits<T>::max());
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) {
    const double v = std::trunc(factor * static_cast<double>(p[i]));
    // NaN (a NaN factor) becomes 0; values beyond the type saturate. 2^63 is not an int64, so
    // the upper bound is compared with >=.
    p[i] = v != v     ? T{0}
           : v <= kLo ? std::numeric_limits<T>::min()
           : v >= kHi ? std::numeric_limits<T>::max()
                      : static_cast<T>(v);
  }
}

}  // namespace

bool IsFloating(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

bool IsScalable(DataType dtype) { return dtype != DataType::kBool; }

void Scale(void* data, size_t count, DataType dtype, double factor) {
  if (factor == 1.0) return;
  switch (dtype) {
    case DataType::kFloat64:
      return ScaleFloat<double>(data, count, factor);
    case DataType::kFloat32:
      return ScaleFloat<float>(data, count, static_cast<float>(factor));
    case DataType::kFloat16:
      return Scale16<comm::HalfToFloatN, comm::FloatToHalfN>(data, count,
                                                             static_cast<float>(factor));
    case DataType::kBFloat16:
      return Scale16<comm::BFloat16ToFloatN, comm::FloatToBFloat16N>(data, count,
                                                                     static_cast<float>(factor));
    case DataType::kInt64:
      return ScaleInt<int64_t>(data, count, factor);
    case DataType::kInt32:
      return ScaleInt<int32_t>(data, count, factor);
    case DataType::kInt16:
      return ScaleInt<int16_t>(data, count, factor);
    case DataType::kInt8:
      return ScaleInt<int8_t>(data, count, factor);
    case DataType::kUInt8:
      return ScaleInt<uint8_t>(data, count, factor);
    case DataType::kBool:
      return;  // never scaled: the engine refuses factors for bool (IsScalable)
  }
}

}  // namespace cadre::engine
