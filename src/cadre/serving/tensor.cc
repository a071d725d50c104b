#include "cadre/serving/tensor.h"

#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace cadre::serving {
namespace {

struct TypeInfo {
  DataType type;
  std::string_view name;
  size_t size;
};

constexpr std::array<TypeInfo, 10> kTypes = {{
    {DataType::kBool, "BOOL", 1},
    {DataType::kUint8, "UINT8", 1},
    {DataType::kInt8, "INT8", 1},
    {DataType::kInt16, "INT16", 2},
    {DataType::kInt32, "INT32", 4},
    {DataType::kInt64, "INT64", 8},
    {DataType::kFp16, "FP16", 2},
    {DataType::kBf16, "BF16", 2},
    {DataType::kFp32, "FP32", 4},
    {DataType::kFp64, "FP64", 8},
}};

const TypeInfo& Info(DataType type) { return kTypes[static_cast<size_t>(type)]; }

float HalfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24
    float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  uint32_t bits = exp == 0x1f ? (sign | 0x7f800000u | (mant << 13))
                              : (sign | ((exp + 112) << 23) | (mant << 13));
  return std::bit_cast<float>(bits);
}

uint16_t FloatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  if (std::isnan(f)) return sign | 0x7e00u;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00u;  // rounds to infinity
  if (a < 6.103515625e-05f) {                // subnormal half: round a / 2^-24 to even
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  uint32_t bits = std::bit_cast<uint32_t>(a);
  uint32_t rounded = bits + 0xfffu + ((bits >> 13) & 1u);  // to nearest even at bit 13
  return sign | static_cast<uint16_t>(((rounded >> 13) - (112u << 10)) & 0x7fffu);
}

float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t FloatToBf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

template <typename T>
T Load(const HostTensor& t, int64_t i) {
  T v;
  std::memcpy(&v, t.data.data() + static_cast<size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void Store(HostTensor& t, int64_t i, T v) {
  std::memcpy(t.data.data() + static_cast<size_t>(i) * sizeof(T), &v, sizeof(T));
}

}  // namespace

std::string_view DataTypeName(DataType type) { return Info(type).name; }

std::optional<DataType> ParseDataType(std::string_view name) {
  for (const TypeInfo& info : kTypes) {
    if (info.name == name) return info.type;
  }
  return std::nullopt;
}

size_t ElementSize(DataType type) { return Info(type).size; }

bool IsFloating(DataType type) {
  return type == DataType::kFp16 || type == DataType::kBf16 || type == DataType::kFp32 ||
         type == DataType::kFp64;
}

std::optional<int64_t> NumElements(std::span<const int64_t> shape, int64_t limit) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > limit / d) return std::nullopt;
    n *= d;
  }
  return n;
}

int64_t HostTensor::elements() const { return NumElements(shape).value_or(0); }

size_t HostTensor::row_bytes() const {
  if (shape.empty()) return 0;
  return static_cast<size_t>(NumElements(std::span(shape).subspan(1)).value_or(0)) *
         ElementSize(dtype);
}

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

HostTensor ConcatRows(std::span<const HostTensor* const> parts) {
  if (parts.empty()) throw std::invalid_argument("ConcatRows: no tensors");
  HostTensor out;
  out.dtype = parts[0]->dtype;
  out.shape = parts[0]->shape;
  out.shape[0] = 0;
  size_t bytes = 0;
  for (const HostTensor* p : parts) {
    if (p->dtype != out.dtype || p->shape.size() != out.shape.size() ||
        !std::equal(p->shape.begin() + 1, p->shape.end(), out.shape.begin() + 1)) {
      throw std::invalid_argument("ConcatRows: tensors of different dtypes or row shapes");
    }
    out.shape[0] += p->shape[0];
    bytes += p->data.size();
  }
  out.data.reserve(bytes);
  for (const HostTensor* p : parts) out.data.insert(out.data.end(), p->data.begin(), p->data.end());
  return out;
}

HostTensor SliceRows(const HostTensor& t, int64_t begin, int64_t count) {
  if (t.shape.empty() || begin < 0 || count < 0 || begin + count > t.shape[0]) {
    throw std::out_of_range("SliceRows: rows [" + std::to_string(begin) + ", " +
                            std::to_string(begin + count) + ") of a tensor of shape " +
                            ShapeString(t.shape));
  }
  HostTensor out;
  out.dtype = t.dtype;
  out.shape = t.shape;
  out.shape[0] = count;
  size_t row = t.row_bytes();
  auto first = t.data.begin() + static_cast<ptrdiff_t>(row * static_cast<size_t>(begin));
  out.data.assign(first, first + static_cast<ptrdiff_t>(row * static_cast<size_t>(count)));
  return out;
}

double ElementAsDouble(const HostTensor& t, int64_t i) {
  switch (t.dtype) {
    case DataType::kFp32:
      return Load<float>(t, i);
    case DataType::kFp64:
      return Load<double>(t, i);
    case DataType::kFp16:
      return HalfToFloat(Load<uint16_t>(t, i));
    case DataType::kBf16:
      return Bf16ToFloat(Load<uint16_t>(t, i));
    default:
      return static_cast<double>(ElementAsInt(t, i));
  }
}

int64_t ElementAsInt(const HostTensor& t, int64_t i) {
  switch (t.dtype) {
    case DataType::kBool:
      return Load<uint8_t>(t, i) != 0;
    case DataType::kUint8:
      return Load<uint8_t>(t, i);
    case DataType::kInt8:
      return Load<int8_t>(t, i);
    case DataType::kInt16:
      return Load<int16_t>(t, i);
    case DataType::kInt32:
      return Load<int32_t>(t, i);
    case DataType::kInt64:
      return Load<int64_t>(t, i);
    default:
      return static_cast<int64_t>(ElementAsDouble(t, i));
  }
}

void SetElementFromDouble(HostTensor& t, int64_t i, double v) {
  switch (t.dtype) {
    case DataType::kFp32:
      return Store<float>(t, i, static_cast<float>(v));
    case DataType::kFp64:
      return Store<double>(t, i, v);
    case DataType::kFp16:
      return Store<uint16_t>(t, i, FloatToHalf(static_cast<float>(v)));
    case DataType::kBf16:
      return Store<uint16_t>(t, i, FloatToBf16(static_cast<float>(v)));
    default:
      return SetElementFromInt(t, i, static_cast<int64_t>(v));
  }
}

void SetElementFromInt(HostTensor& t, int64_t i, int64_t v) {
  switch (t.dtype) {
    case DataType::kBool:
      return Store<uint8_t>(t, i, v != 0);
    case DataType::kUint8:
      return Store<uint8_t>(t, i, static_cast<uint8_t>(v));
    case DataType::kInt8:
      return Store<int8_t>(t, i, static_cast<int8_t>(v));
    case DataType::kInt16:
      return Store<int16_t>(t, i, static_cast<int16_t>(v));
    case DataType::kInt32:
      return Store<int32_t>(t, i, static_cast<int32_t>(v));
    case DataType::kInt64:
      return Store<int64_t>(t, i, v);
    default:
      return SetElementFromDouble(t, i, static_cast<double>(v));
  }
}

}  // namespace cadre::serving
