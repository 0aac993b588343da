// Contract of 09_quantization/gemv_w8a16. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "quant_formats.h"

// The linear layer of a decoding model with INT8 weights and bf16 activations (W8A16):
//     y[m * N + n] = sum over k of x[m * K + k] * (W[n * K + k] * scales[n])
// for 0 <= m < M tokens and 0 <= n < N output features: W (N x K int8, row-major, a scale per row:
// quantize_int8's format) times each token's x (M x K bf16, row-major), products accumulated in
// float32 in any order, y (M x N) in float32. The weights are dequantized on the fly: nothing
// but W, its scales, x and y may be read or written (no dequantized copy of W), and y is output
// only (its old contents may be anything, NaN included).
// - 1 <= M <= 16 (one token per sequence at decode time, a batch of up to 16 sequences);
//   1 <= N <= 2^20; K a multiple of 16, 16 <= K <= 65536; N * K may exceed 2^31: compute weight
//   offsets in 64 bits. W's values may be any int8, -128 included.
// - W, scales, x and y are device pointers, none aliasing another, each starting on a 16-byte
//   boundary (so every row of W and x does).
// Enqueue the work on the default stream and return; the checker synchronizes.
void gemv_w8a16(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                const float* scales, float* y);
