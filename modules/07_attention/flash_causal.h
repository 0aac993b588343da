// Contract of 07_attention/flash_causal. Read-only: the checker calls exactly this.
#pragma once

// Attention forward in float32 without the T x T scores: memory is O(batch * heads * T * D).
// Q, K, V and O are [batch][heads][T][D] float tensors, row-major (D contiguous); L is
// [batch][heads][T]. For every head and query row i, with s_ij = scale * (q_i . k_j) over the
// keys j visible to i (every j < T, or j <= i when `causal`):
//   O_i = sum_j exp(s_ij - L_i) v_j,   L_i = log sum_j exp(s_ij)   (the row's logsumexp)
// - D is 64 or 128; 1 <= T (T * T may exceed the GPU's memory); batch * heads <= 65535;
//   batch * heads * T * D <= 2^25 (B 4, H 16, T 4096, D 128: the largest the checker runs);
//   scale > 0. All pointers are device pointers starting on 16-byte boundaries; O and L are
//   outputs only (their old contents may be NaN and must not be read).
// Enqueue the work on the default stream and return; the checker synchronizes.
void flash_causal(const float* Q, const float* K, const float* V, float* O, float* L, int batch,
                  int heads, int T, int D, float scale, bool causal);
