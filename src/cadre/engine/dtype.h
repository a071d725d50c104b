// What the engine adds to the communication core's element types (comm/types.h, whose sizes,
// names and reduce kernels it uses directly): which types are floating point, and scaling by a
// factor (prescale/postscale, and averaging) with Horovod's arithmetic.
#pragma once

#include <cstddef>

#include "cadre/comm/types.h"

namespace cadre::engine {

bool IsFloating(comm::DataType dtype);

// Whether Scale() takes factors other than 1 for dtype (every type but bool).
bool IsScalable(comm::DataType dtype);

// data[i] = factor * data[i], as Horovod scales on CPUs: float64 in double; float32 with the
// factor rounded to float; float16 and bfloat16 widened to float32, multiplied by the float
// factor and rounded back; integers multiplied in double and truncated toward zero (saturated
// at the type's limits, where Horovod's conversion would be undefined). A factor of 1 leaves
// data untouched; bool is never scaled (see IsScalable).
void Scale(void* data, size_t count, comm::DataType dtype, double factor);

}  // namespace cadre::engine
