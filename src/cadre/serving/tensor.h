// HostTensor: a dense row-major tensor in host memory, the scorer's currency between the request
// codecs, the batcher and the model. It carries no libtorch type, so that everything but the model
// itself (torch_model.cc) builds and is tested without libtorch.
//
// Dimension 0 is the batch: requests are concatenated and split along it. A HostTensor is a plain
// value; it is not shared between threads while it is being written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cadre::serving {

// The Open Inference Protocol's (KServe v2) datatypes that PyTorch tensors can hold.
enum class DataType : uint8_t {
  kBool,
  kUint8,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kBf16,
  kFp32,
  kFp64
};

std::string_view DataTypeName(DataType type);  // "FP32"
std::optional<DataType> ParseDataType(std::string_view name);
size_t ElementSize(DataType type);
bool IsFloating(DataType type);

struct HostTensor {
  DataType dtype = DataType::kFp32;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;  // ElementSize(dtype) * NumElements(shape) bytes

  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t elements() const;
  size_t row_bytes() const;  // bytes of one row (of all dimensions after the first)

  template <typename T>
  std::span<const T> values() const {
    return {reinterpret_cast<const T*>(data.data()), data.size() / sizeof(T)};
  }
};

// Product of `shape`; nullopt if a dimension is negative or the product overflows `limit`.
std::optional<int64_t> NumElements(std::span<const int64_t> shape, int64_t limit = INT64_MAX);

// "[-1, 1, 28, 28]".
std::string ShapeString(std::span<const int64_t> shape);

// Concatenates tensors of one dtype and one row shape along dimension 0.
HostTensor ConcatRows(std::span<const HostTensor* const> parts);

// Rows [begin, begin + count) of `t`.
HostTensor SliceRows(const HostTensor& t, int64_t begin, int64_t count);

// Element `i` as a double (bool as 0/1, FP16/BF16 widened), for the codecs' writers.
double ElementAsDouble(const HostTensor& t, int64_t i);
// Element `i` of an integer tensor (bool and integers) without going through double.
int64_t ElementAsInt(const HostTensor& t, int64_t i);

// Stores `v` as element `i`, converting to t.dtype (FP16/BF16 rounded to nearest even).
void SetElementFromDouble(HostTensor& t, int64_t i, double v);
void SetElementFromInt(HostTensor& t, int64_t i, int64_t v);

}  // namespace cadre::serving
