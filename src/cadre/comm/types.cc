#include "cadre/comm/types.h"

namespace cadre::comm {

size_t ElementSize(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat16:
    case DataType::kBFloat16:
    case DataType::kInt16:
      return 2;
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool:
      return 1;
  }
  return 0;
}

std::string_view DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt8:
      return "int8";
    case DataType::kInt16:
      return "int16";
    case DataType::kBool:
      return "bool";
  }
  return "unknown";
}

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "unknown";
}

}  // namespace cadre::comm
