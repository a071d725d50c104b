// Test helpers: buffers of any DataType built from and read back as doubles.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include "cadre/comm/reduce.h"
#include "cadre/comm/types.h"

namespace cadre::comm::testing {

inline void Put(DataType dt, void* buf, size_t i, double v) {
  switch (dt) {
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToHalf(float(v));
      break;
    case DataType::kBFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToBFloat16(float(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kUInt8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kInt16:
      static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v);
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(buf)[i] = v != 0;
      break;
  }
}

inline double Get(DataType dt, const void* buf, size_t i) {
  switch (dt) {
    case DataType::kFloat32:
      return static_cast<const float*>(buf)[i];
    case DataType::kFloat64:
      return static_cast<const double*>(buf)[i];
    case DataType::kFloat16:
      return HalfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kInt32:
      return static_cast<const int32_t*>(buf)[i];
    case DataType::kInt64:
      return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::kUInt8:
      return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt8:
      return static_cast<const int8_t*>(buf)[i];
    case DataType::kInt16:
      return static_cast<const int16_t*>(buf)[i];
    case DataType::kBool:
      return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}

inline std::vector<uint8_t> Make(DataType dt, size_t count,
                                 const std::function<double(size_t)>& f) {
  std::vector<uint8_t> b(count * ElementSize(dt) + 1);  // +1: data() is never null
  for (size_t i = 0; i < count; ++i) Put(dt, b.data(), i, f(i));
  return b;
}

inline bool IsSigned(DataType dt) { return dt != DataType::kUInt8 && dt != DataType::kBool; }

// a op b in plain arithmetic, as the reduce kernels compute it for small exact values (bool:
// sum is "or", product "and").
inline double Combine(DataType dt, ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
      return dt == DataType::kBool ? double(a != 0 || b != 0) : a + b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
  }
  return 0;
}

}  // namespace cadre::comm::testing
