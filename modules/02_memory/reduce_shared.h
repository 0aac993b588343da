// Contract of 02_memory/reduce_shared. Read-only: the checker calls exactly this.
#pragma once

#include <cstddef>

// Threads per block, and the slice of the input that one block sums: each thread first adds two
// elements (the add during the load), so a block of 256 threads covers 512 elements.
constexpr int kReduceSharedThreads = 256;
constexpr std::size_t kReduceSharedItemsPerBlock = 2 * kReduceSharedThreads;

// One partial sum per block of 512 elements:
//   partials[b] = in[b * 512] + in[b * 512 + 1] + ... + in[min((b + 1) * 512, n) - 1]
// for b = 0 .. ceil_div(n, 512) - 1. The last slice is shorter when n is not a multiple of 512.
// Write exactly ceil_div(n, 512) partials (the buffer has no room for more). Any summation order
// is fine; the checker derives its tolerance from the 512-term sums.
// in and partials are device pointers (in: n floats, partials: ceil_div(n, 512) floats). Enqueue
// the work on the default stream and return; the checker synchronizes. n is at least 1 and can
// exceed 2^31.
void reduce_shared(const float* in, std::size_t n, float* partials);
