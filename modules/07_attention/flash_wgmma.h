// Contract of 07_attention/flash_wgmma. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_bf16.h>

// flash_tc's contract (flash_tc.h), on Hopper's wgmma and TMA. Attention forward in bf16 for
// batch * heads heads at once. Q, K, V and O are [batch][heads][T][D] bf16 tensors, row-major (D
// contiguous); L is [batch][heads][T] float. For every head and query row i, with
// s_ij = scale * (q_i . k_j) over the keys j visible to i (every j < T, or j <= i when `causal`):
//   O_i = sum_j exp(s_ij - L_i) v_j,   L_i = log sum_j exp(s_ij)   (the row's logsumexp)
// Products are accumulated in float32; P may be rounded to bf16 before it multiplies V (the
// checker's tolerance allows for that and for O's own rounding to bf16).
// - D is 64 or 128; 1 <= T; batch * heads <= 65535; batch * heads * T * D <= 2^25 (B 4, H 16,
//   T 4096, D 128: the largest the checker runs); scale > 0 (1 / sqrt(D) in a model).
// - All pointers are device pointers starting on 16-byte boundaries; O and L are outputs only
//   (their old contents may be NaN and must not be read). No T x T buffer: memory grows with T.
// - Runs on compute capability 9.0 (Hopper) only, from device code built for sm_90a.
// Enqueue the work on the default stream and return; the checker synchronizes.
void flash_wgmma(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                 __nv_bfloat16* O, float* L, int batch, int heads, int T, int D, float scale,
                 bool causal);
