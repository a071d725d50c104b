// Element types as the engine needs them: sizes, names, and reductions on raw host buffers.
// The reductions serve the gather-based backends (backend.h) and the scale factors applied in
// the fusion buffer; the communication core has its own, faster kernels.
#pragma once

#include <cstddef>
#include <string_view>

#include "cadre/comm/types.h"

namespace cadre::engine {

size_t DTypeSize(comm::DataType dtype);
std::string_view DTypeName(comm::DataType dtype);
std::string_view ReduceOpString(comm::ReduceOp op);
bool IsFloating(comm::DataType dtype);

// dst[i] = op(dst[i], src[i]) for `count` elements.
void ReduceInto(void* dst, const void* src, size_t count, comm::DataType dtype, comm::ReduceOp op);

// data[i] *= factor for floating types (float16/bfloat16 through float32).
void Scale(void* data, size_t count, comm::DataType dtype, double factor);

}  // namespace cadre::engine
