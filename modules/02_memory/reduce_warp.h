// Contract of 02_memory/reduce_warp. Read-only: the checker calls exactly this.
#pragma once

#include <cstddef>

// Threads per block, and the slice of the input that one block sums: 16 floats per thread, i.e.
// four 16-byte float4 loads each.
constexpr int kReduceWarpThreads = 256;
constexpr std::size_t kReduceWarpItemsPerBlock = 16 * kReduceWarpThreads;  // 4096

// One partial sum per block of 4096 elements:
//   partials[b] = in[b * 4096] + in[b * 4096 + 1] + ... + in[min((b + 1) * 4096, n) - 1]
// for b = 0 .. ceil_div(n, 4096) - 1. The last slice is shorter when n is not a multiple of 4096,
// and n need not be a multiple of 4 (the last 1 to 3 elements are not a whole float4).
// Write exactly ceil_div(n, 4096) partials. Any summation order is fine; the checker derives its
// tolerance from the 4096-term sums.
// in and partials are device pointers (in: n floats, 16-byte aligned, as cudaMalloc returns;
// partials: ceil_div(n, 4096) floats). Enqueue the work on the default stream and return; the
// checker synchronizes. n is at least 1 and can exceed 2^31.
void reduce_warp(const float* in, std::size_t n, float* partials);
