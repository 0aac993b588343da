// Contract of 03_patterns/scan_block. Read-only: the checker calls exactly this.
#pragma once

#include <cstddef>

// The input is cut into tiles of kScanBlockTile elements: tile t is in[t * kScanBlockTile ...
// (t + 1) * kScanBlockTile), and the last tile is shorter when n is not a multiple of it.
// Each tile is scanned on its own (an inclusive prefix sum that starts again at every tile):
//     out[i] = in[t] + in[t + 1] + ... + in[i],   where t = i - i % kScanBlockTile.
// One thread block per tile is the intended design: no block needs another block's result.
inline constexpr std::size_t kScanBlockTile = 1024;

// `in` and `out` are device pointers to n ints, 16-byte aligned (they come from cudaMalloc).
// Sums fit in an int (the checker's inputs are small). n is anything from 1 up.
// Enqueue the work on the default stream and return; the checker synchronizes.
void scan_block(const int* in, int* out, std::size_t n);
