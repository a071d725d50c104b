// Reduce kernels: element-wise combination of buffers for every DataType x ReduceOp.
//
// Contract: out[i] = a[i] op b[i] for i < count. `out` may alias `a` or `b` exactly (in-place
// accumulation); partial overlap is not allowed. Integer sums and products wrap (two's
// complement); bool sums and maxima are "or", products and minima "and"; float16 and bfloat16
// are computed in float32 and rounded to nearest even once per
// element. The loops are plain so the compiler vectorises them (reduce.cc is built with -O3).
// Thread-safe: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cadre/comm/types.h"

namespace cadre::comm {

void Reduce(void* out, const void* a, const void* b, size_t count, DataType dtype, ReduceOp op);

// out = srcs[0] op srcs[1] op ... op srcs[n-1] (n >= 1). `out` may alias srcs[0] only.
void ReduceMany(void* out, const void* const* srcs, int n, size_t count, DataType dtype,
                ReduceOp op);

// IEEE binary16 and bfloat16 conversions (round to nearest even; NaN stays NaN).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);

// The same conversions over n values, with the CPU's F16C instructions where it has them (x86-64
// since 2012): bit for bit the results of the scalar functions, but for NaNs, which stay NaNs.
// The 16-bit reductions and the engine's scaling of float16 tensors go through these.
void HalfToFloatN(const uint16_t* in, float* out, size_t n);
void FloatToHalfN(const float* in, uint16_t* out, size_t n);
void BFloat16ToFloatN(const uint16_t* in, float* out, size_t n);
void FloatToBFloat16N(const float* in, uint16_t* out, size_t n);

}  // namespace cadre::comm
