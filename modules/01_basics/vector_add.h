// Contract of 01_basics/vector_add. Read-only: the checker calls exactly this.
#pragma once

#include <cstddef>

// c[i] = a[i] + b[i] for every 0 <= i < n.
// a, b and c are device pointers to n floats. Enqueue the work on the default stream and return;
// the checker synchronizes. n can be anything from 1 up (not a multiple of anything).
void vector_add(const float* a, const float* b, float* c, std::size_t n);
