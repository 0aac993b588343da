// Contract of 07_attention/attention_naive. Read-only: the checker calls exactly this.
#pragma once

// Attention forward in float32, the scores materialized. Q, K, V and O are [batch][heads][T][D]
// float tensors, row-major (D contiguous); L is [batch][heads][T]; `scores` is a workspace of
// batch * heads * T * T floats that the checker provides (its size is the point of the lesson).
// For every head and query row i, with s_ij = scale * (q_i . k_j) over the keys j visible to i
// (every j < T, or j <= i when `causal`):
//   O_i = sum_j exp(s_ij - L_i) v_j,   L_i = log sum_j exp(s_ij)   (the row's logsumexp)
// - D is 64 or 128; 1 <= T; batch * heads <= 65535; batch * heads * T * T <= 2^30 and
//   batch * heads * T * D <= 2^24 (B 4, H 16, T 4096, D 64: the largest the checker runs);
//   scale > 0. All pointers are device pointers; O and L are outputs only (their old contents
//   may be NaN and must not be read).
// Enqueue the work on the default stream and return; the checker synchronizes.
void attention_naive(const float* Q, const float* K, const float* V, float* O, float* L,
                     float* scores, int batch, int heads, int T, int D, float scale, bool causal);
