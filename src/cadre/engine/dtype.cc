#include "cadre/engine/dtype.h"

#include <cstdint>

#include "cadre/comm/reduce.h"

namespace cadre::engine {

using comm::DataType;

bool IsFloating(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
         dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
}

void Scale(void* data, size_t count, DataType dtype, double factor) {
  if (factor == 1.0) return;
  switch (dtype) {
    case DataType::kFloat32: {
      float* p = static_cast<float*>(data);
      const float f = static_cast<float>(factor);
      for (size_t i = 0; i < count; ++i) p[i] *= f;
      return;
    }
    case DataType::kFloat64: {
      double* p = static_cast<double*>(data);
      for (size_t i = 0; i < count; ++i) p[i] *= factor;
      return;
    }
    case DataType::kFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        p[i] = comm::FloatToHalf(static_cast<float>(comm::HalfToFloat(p[i]) * factor));
      }
      return;
    }
    case DataType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) {
        p[i] = comm::FloatToBFloat16(static_cast<float>(comm::BFloat16ToFloat(p[i]) * factor));
      }
      return;
    }
    default:
      return;  // integer tensors are not scaled (the engine rejects factors for them)
  }
}

}  // namespace cadre::engine
