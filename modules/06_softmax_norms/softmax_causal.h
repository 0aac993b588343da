// Contract of 06_softmax_norms/softmax_causal. Read-only: the checker calls exactly this.
#pragma once

// The attention probabilities of a causal (decoder) model. scores holds batch_heads score
// matrices of T x T floats, stacked and row-major: s[h][i][j] = scores[(h * T + i) * T + j].
// Query i may attend to keys j <= i only. For every h < batch_heads and i, j < T:
//   probs[h][i][j] = exp(scale * s[h][i][j] - m) / sum_{k <= i} exp(scale * s[h][i][k] - m)
//                                        for j <= i, where m = max_{k <= i} scale * s[h][i][k];
//   probs[h][i][j] = 0.0f exactly         for j > i.
// Row i is a softmax over its first i + 1 entries; the rest of the row is zero.
//
// scores and probs are device pointers to batch_heads * T * T floats; they do not overlap and
// need not be 16-byte aligned. Scores above the diagonal (j > i) are masked: they may hold
// anything, NaN included (the checker puts NaN there), and must not change the result. Scores on
// and below the diagonal are finite, up to 1e4 in magnitude. scale > 0 (1 / sqrt(head_dim) in
// attention). 1 <= batch_heads, 1 <= T, batch_heads * T * T < 2^31. Accuracy: use expf (not
// __expf) and sum in float. Enqueue the work on the default stream and return.
void softmax_causal(const float* scores, float* probs, int batch_heads, int T, float scale);
