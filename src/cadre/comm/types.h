// Element types and reduction operators understood by every collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cadre::comm {

enum class DataType : uint8_t {
  kFloat32 = 0,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
  kInt8,
  kInt16,
  kBool,  // one byte, 0 or 1; sum and max are "or", product and min are "and"
};
inline constexpr int kNumDataTypes = 10;

size_t ElementSize(DataType dtype);
std::string_view DataTypeName(DataType dtype);  // "float32", "bfloat16", ...

// Average is not an op of the core: callers reduce with kSum and scale (the engine:
// Request::prescale/postscale).
enum class ReduceOp : uint8_t { kSum = 0, kMin, kMax, kProduct };
inline constexpr int kNumReduceOps = 4;

std::string_view ReduceOpName(ReduceOp op);  // "sum", "min", ...

}  // namespace cadre::comm
