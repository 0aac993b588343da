// Contract of 09_quantization/gemv_w4a16. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "quant_formats.h"

// The linear layer of a decoding model with INT4 weights and bf16 activations (W4A16):
//     y[m * N + n] = sum over k of x[m * K + k] * (q(n, k) * scales[n * (K / 128) + k / 128])
// for 0 <= m < M tokens and 0 <= n < N output features, where q(n, k) is the signed nibble of
// column k of row n of W in pack_int4's format (N x K / 2 bytes, row-major: byte (n * K + k) / 2,
// bits 0-3 for even k, 4-7 for odd k, two's complement), one float32 scale per group of 128
// values of a row. x (M x K bf16, row-major), products accumulated in float32 in any order, y
// (M x N) in float32. The weights are dequantized on the fly: nothing but W, its scales, x and y
// may be read or written, and y is output only (its old contents may be anything, NaN included).
// - 1 <= M <= 16; 1 <= N <= 2^20; K a multiple of 128, 128 <= K <= 65536; N * K may exceed
//   2^32 (bytes past 2^31): compute weight offsets in 64 bits. Every nibble may be any of -8 .. 7.
// - W, scales, x and y are device pointers, none aliasing another, each starting on a 16-byte
//   boundary (so every row of W and x does).
// Enqueue the work on the default stream and return; the checker synchronizes.
void gemv_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* W,
                const float* scales, float* y);
