// Contract of 03_patterns/histogram. Read-only: the checker calls exactly this.
#pragma once

#include <cstddef>
#include <cstdint>

// bins[v] = how many of data[0], ..., data[n - 1] equal v, for every v = 0..255.
// `data` is a device pointer to n bytes, 16-byte aligned (it comes from cudaMalloc), so it can be
// read as uint4. `bins` is a device pointer to 256 unsigned ints holding garbage on entry: the
// launcher must set them to zero before counting. n is anything from 1 up to 2^32 - 1.
// Enqueue the work on the default stream and return; the checker synchronizes.
void histogram_256(const std::uint8_t* data, std::size_t n, unsigned int* bins);
