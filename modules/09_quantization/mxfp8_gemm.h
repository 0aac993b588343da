// Contract of 09_quantization/mxfp8_gemm. Read-only: the checker calls exactly this.
#pragma once

#include <cstdint>

#include "quant_formats.h"

// C = A^ B^T, where A^ and B^ are the MXFP8 matrices A (M x K) and B (N x K) dequantized as
// mxfp8_dequantize does: element (i, k) of A^ is decode(a_elements[i * K + k]) *
// 2^(a_scales[i * (K / 32) + k / 32] - 127), and likewise for B; blocks of 32 run along K, the
// reduction, so that each block's scale multiplies 32 consecutive terms of a dot product.
//     C[i * N + j] = sum over k of A^[i][k] * B^[j][k]
// products accumulated in float32 in any order, C (M x N, row-major, float32, output only: its old
// contents may be anything, NaN included).
// - Every dequantized element is a bf16 value exactly (4 significant bits times a power of two) as
//   long as it lies within bf16's normal range: the checker's inputs do (scales from 2^-100 to
//   2^100), so C may be computed on bf16 tensor cores with no rounding but the float32 sums'.
// - M, N multiples of 8, 8 <= M, N <= 2^16; K a multiple of 32, 32 <= K <= 2^16; each matrix has
//   fewer than 2^31 elements.
// - All pointers are device pointers, none aliasing another, each on a 16-byte boundary; the
//   scales are valid (no 255) and no element is NaN.
// Enqueue the work on the default stream and return; the checker synchronizes.
void mxfp8_gemm(int M, int N, int K, const std::uint8_t* a_elements, const std::uint8_t* a_scales,
                const std::uint8_t* b_elements, const std::uint8_t* b_scales, float* C);
