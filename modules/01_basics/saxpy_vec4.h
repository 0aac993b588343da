// Contract of 01_basics/saxpy_vec4. Read-only: the checker calls exactly this.
#pragma once

#include <cstddef>

// y[i] = a * x[i] + y[i] for every 0 <= i < n: y is updated in place, each element exactly once.
//
// x and y are device pointers to n floats each (n >= 1, not a multiple of anything); they do not
// overlap. They need NOT be 16-byte aligned: each starts on some float (4-byte) boundary, and both
// start at the same distance past a 16-byte boundary, i.e.
//     reinterpret_cast<std::uintptr_t>(x) % 16 == reinterpret_cast<std::uintptr_t>(y) % 16,
// so the same index i is the first one whose x[i] and y[i] both sit on a 16-byte boundary.
// Elements outside y[0..n) must not be written, also not the floats just before y[0].
//
// Enqueue the work on the default stream and return; the checker synchronizes.
void saxpy_vec4(float a, const float* x, float* y, std::size_t n);
