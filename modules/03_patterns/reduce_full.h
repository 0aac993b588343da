// Contract of 03_patterns/reduce_full. Read-only: the checker calls exactly this.
#pragma once

#include <cstddef>

// *out = in[0] + in[1] + ... + in[n - 1], in float32 (any summation order; the checker's tolerance
// grows with n as rounding errors do).
// `in` is a device pointer to n floats, 16-byte aligned (it comes from cudaMalloc), so it can be
// read as float4. `out` is a device pointer to ONE float; write it, nothing else. n is anything
// from 1 up, past 2^31 too (use std::size_t for indices).
// Enqueue the work on the default stream and return; the checker synchronizes. You may keep
// scratch space between calls (a __device__ array, or memory allocated once and reused), but do
// not allocate on every call.
void reduce_full(const float* in, std::size_t n, float* out);
