// Contract of 08_training/embedding. Read-only: the checker calls exactly this (and the trainer's
// learner table, trainer/ops.h, calls it as its embedding_forward and embedding_backward).
#pragma once

#include <cuda_bf16.h>

// Where each token of a micro-batch sits, grouped by token id: the same struct, field for field,
// as trainer/ops.h's trainer::TokenBuckets (the trainer builds it on the host by sorting the
// (token, position) pairs, then uploads the arrays). The struct itself is a host value; its
// arrays are device pointers.
struct TokenBuckets {
    int count;             // number of distinct tokens in the micro-batch
    const int* token;      // [count]: the token id of each bucket
    const int* start;      // [count + 1]: bucket k holds positions[start[k] .. start[k + 1])
    const int* positions;  // [B * T]: flat positions b * T + t, in increasing order per bucket
};

// The token and position embedding of GPT-2, for B sequences of T tokens with C channels.
// tokens [B][T] (int, each in [0, V)), wte [V][C] (one row per token id), wpe [at least T][C]
// (one row per position), out and dout [B][T][C]; all row-major and dense.
//
// embedding_forward: out[b][t][c] = wte[tokens[b][t]][c] + wpe[t][c], the sum in float rounded
// once to the activation type.
//
// embedding_backward ACCUMULATES into the gradients (the trainer adds micro-batches up):
//   dwte[v][c] += sum of dout[b][t][c] over the positions b * T + t of bucket k, v = token[k]
//   dwpe[t][c] += sum over b of dout[b][t][c]
// Rows of dwte whose token is not in the micro-batch, and rows of dwpe past T, are left as they
// are. A token may repeat thousands of times in a micro-batch, so many positions add into one
// row: the result must be DETERMINISTIC, the same bits on every call with the same inputs (no
// floating-point atomicAdd, whose order changes from run to run; sum each row in a fixed order:
// the buckets give one). The sums are in float.
//
// Activations (out, wte, wpe in the forward; dout in the backward) are float, or bf16
// (__nv_bfloat16, the trainer's mixed precision: compute capability 8.0 or newer); gradients are
// always float. Every pointer is a device pointer aligned to its element only (a view may start
// anywhere); no output overlaps an input or another output.
// B, T, C >= 1, none a multiple of anything (C = 768 in GPT-2 124M); B * T * C and V * C are
// below 2^31, so int offsets do.
// Enqueue the work on the default stream and return; the checker synchronizes.
void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);
void embedding_forward(__nv_bfloat16* out, const int* tokens, const __nv_bfloat16* wte,
                       const __nv_bfloat16* wpe, int B, int T, int C);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const TokenBuckets& buckets,
                        int B, int T, int C);
void embedding_backward(float* dwte, float* dwpe, const __nv_bfloat16* dout,
                        const TokenBuckets& buckets, int B, int T, int C);
