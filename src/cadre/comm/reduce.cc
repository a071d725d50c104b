#include "cadre/comm/reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cadre::comm {
namespace {

// Integer arithmetic goes through an unsigned type so that overflow wraps instead of being
// undefined behaviour; types narrower than int go through unsigned int, since their unsigned
// types would be promoted to (signed) int, whose 16-bit products can overflow.
template <typename T, bool = std::is_integral_v<T>>
struct ArithOf {
  using type = T;
};
template <typename T>
struct ArithOf<T, true> {
  using type =
      std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <typename T>
using Arith = typename ArithOf<T>::type;

template <typename T, ReduceOp kOp>
inline T Combine(T a, T b) {
  if constexpr (kOp == ReduceOp::kSum) {
    return static_cast<T>(static_cast<Arith<T>>(a) + static_cast<Arith<T>>(b));
  } else if constexpr (kOp == ReduceOp::kProduct) {
    return static_cast<T>(static_cast<Arith<T>>(a) * static_cast<Arith<T>>(b));
  } else if constexpr (kOp == ReduceOp::kMin) {
    return b < a ? b : a;
  } else {
    return a < b ? b : a;
  }
}

template <typename T, ReduceOp kOp>
void Loop(T* out, const T* a, const T* b, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = Combine<T, kOp>(a[i], b[i]);
}

template <typename T>
void Dispatch(void* out, const void* a, const void* b, size_t count, ReduceOp op) {
  auto* o = static_cast<T*>(out);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::kSum:
      return Loop<T, ReduceOp::kSum>(o, x, y, count);
    case ReduceOp::kMin:
      return Loop<T, ReduceOp::kMin>(o, x, y, count);
    case ReduceOp::kMax:
      return Loop<T, ReduceOp::kMax>(o, x, y, count);
    case ReduceOp::kProduct:
      return Loop<T, ReduceOp::kProduct>(o, x, y, count);
  }
}

// bool (one byte, 0 or 1): sum and max are "or", product and min are "and" — the results torch
// gives for bool tensors, and always 0 or 1 again.
void DispatchBool(void* out, const void* a, const void* b, size_t count, ReduceOp op) {
  auto* o = static_cast<uint8_t*>(out);
  auto* x = static_cast<const uint8_t*>(a);
  auto* y = static_cast<const uint8_t*>(b);
  if (op == ReduceOp::kSum || op == ReduceOp::kMax) {
    for (size_t i = 0; i < count; ++i) o[i] = static_cast<uint8_t>((x[i] | y[i]) != 0);
  } else {
    for (size_t i = 0; i < count; ++i) o[i] = static_cast<uint8_t>(x[i] != 0 && y[i] != 0);
  }
}

// 16-bit floats: widen a block to float32, combine there, narrow once.
template <void (*kToFloat)(const uint16_t*, float*, size_t),
          void (*kFromFloat)(const float*, uint16_t*, size_t)>
void Dispatch16(void* out, const void* a, const void* b, size_t count, ReduceOp op) {
  constexpr size_t kBlock = 512;
  float fa[kBlock], fb[kBlock];
  auto* o = static_cast<uint16_t*>(out);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  for (size_t base = 0; base < count; base += kBlock) {
    size_t n = std::min(kBlock, count - base);
    kToFloat(x + base, fa, n);
    kToFloat(y + base, fb, n);
    Dispatch<float>(fa, fa, fb, n, op);
    kFromFloat(fa, o + base, n);
  }
}

#if defined(__x86_64__)
// F16C: eight values per instruction; the scalar functions finish the tail. _mm256_cvtps_ph
// rounds to nearest even, as FloatToHalf does.
__attribute__((target("avx,f16c"))) void HalfToFloatF16C(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16C(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

bool HasF16C() {
  static const bool has = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return has;
}
#endif

}  // namespace

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal half: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400) == 0);
    bits = sign | ((112 - e) << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs = bits & 0x7fffffff;
  if (abs >= 0x7f800000u) {  // inf or NaN
    return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds to above 65504: inf
  if (abs < 0x38800000u) {                       // below the smallest normal half
    if (abs < 0x33000000u) return sign;          // below half of the smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;  // 14..24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even at bit 13
  return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
}

float BFloat16ToFloat(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffff) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

void HalfToFloatN(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (HasF16C()) return HalfToFloatF16C(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

void FloatToHalfN(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (HasF16C()) return FloatToHalfF16C(in, out, n);
#endif
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void BFloat16ToFloatN(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}

void FloatToBFloat16N(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBFloat16(in[i]);
}

void Reduce(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kFloat32:
      return Dispatch<float>(out, a, b, count, op);
    case DataType::kFloat64:
      return Dispatch<double>(out, a, b, count, op);
    case DataType::kInt32:
      return Dispatch<int32_t>(out, a, b, count, op);
    case DataType::kInt64:
      return Dispatch<int64_t>(out, a, b, count, op);
    case DataType::kUInt8:
      return Dispatch<uint8_t>(out, a, b, count, op);
    case DataType::kInt8:
      return Dispatch<int8_t>(out, a, b, count, op);
    case DataType::kInt16:
      return Dispatch<int16_t>(out, a, b, count, op);
    case DataType::kBool:
      return DispatchBool(out, a, b, count, op);
    case DataType::kFloat16:
      return Dispatch16<HalfToFloatN, FloatToHalfN>(out, a, b, count, op);
    case DataType::kBFloat16:
      return Dispatch16<BFloat16ToFloatN, FloatToBFloat16N>(out, a, b, count, op);
  }
}

void ReduceMany(void* out, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op) {
  size_t elem = ElementSize(dtype);
  if (n == 1) {
    if (out != srcs[0] && count > 0) std::memcpy(out, srcs[0], count * elem);
    return;
  }
  // Blocks small enough that `out` stays in L1 while every source streams through it once.
  const size_t block = std::max<size_t>(1, 8192 / elem);
  auto* o = static_cast<uint8_t*>(out);
  for (size_t base = 0; base < count; base += block) {
    size_t len = std::min(block, count - base);
    size_t off = base * elem;
    Reduce(o + off, static_cast<const uint8_t*>(srcs[0]) + off,
           static_cast<const uint8_t*>(srcs[1]) + off, len, dtype, op);
    for (int i = 2; i < n; ++i) {
      Reduce(o + off, o + off, static_cast<const uint8_t*>(srcs[i]) + off, len, dtype, op);
    }
  }
}

}  // namespace cadre::comm
