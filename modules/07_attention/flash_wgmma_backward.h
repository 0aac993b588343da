// Contract of 07_attention/flash_wgmma_backward. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_bf16.h>

// flash_backward's contract (flash_backward.h), in bf16, on Hopper's wgmma and TMA: the backward
// pass of attention (flash_wgmma.h's forward) for batch * heads heads. Q, K, V, O, dO (bf16) and
// dQ, dK, dV (float32) are [batch][heads][T][D], row-major (D contiguous); L ([batch][heads][T],
// float32) is the forward's logsumexp. With s_ij = scale * (q_i . k_j) over the visible keys
// (j < T, or j <= i when `causal`), P_ij = exp(s_ij - L_i), D_i = dO_i . O_i:
//   dV_j = sum_i P_ij dO_i,   dP_ij = dO_i . v_j,   dS_ij = P_ij (dP_ij - D_i),
//   dQ_i = scale * sum_j dS_ij k_j,   dK_j = scale * sum_i dS_ij q_i.
// Products are accumulated in float32; P and dS may be rounded to bf16 to feed the tensor cores.
// - D is 64 or 128; 1 <= T; batch * heads <= 65535; batch * heads * T * D <= 2^25 (B 4, H 16,
//   T 4096, D 128: the largest the checker runs); scale > 0.
// - All pointers are device pointers starting on 16-byte boundaries; dQ, dK, dV are outputs only
//   (their old contents may be NaN: zero what you accumulate into). No T x T buffer; scratch
//   memory of O(batch * heads * T) floats is allowed. dQ may be summed with atomics (its bits may
//   differ from run to run); dK and dV must come out the same on every run.
// - Runs on compute capability 9.0 (Hopper) only, from device code built for sm_90a.
// Enqueue the work on the default stream and return; the checker synchronizes.
void flash_wgmma_backward(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                          const __nv_bfloat16* O, const __nv_bfloat16* dO, const float* L,
                          float* dQ, float* dK, float* dV, int batch, int heads, int T, int D,
                          float scale, bool causal);
