// What the engine adds to the communication core's element types (comm/types.h, whose sizes,
// names and reduce kernels it uses directly): which types are floating point, and scaling by a
// factor (prescale/postscale and averaging in the fusion buffer).
#pragma once

#include <cstddef>

#include "cadre/comm/types.h"

namespace cadre::engine {

bool IsFloating(comm::DataType dtype);

// data[i] *= factor for floating types (float16/bfloat16 through float32).
void Scale(void* data, size_t count, comm::DataType dtype, double factor);

}  // namespace cadre::engine
