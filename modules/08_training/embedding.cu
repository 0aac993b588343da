// 08_training/embedding: token and position embedding, forward (a gather) and backward (a
// deterministic scatter-add), float and bf16 activations.
//
// Teaches: the forward as a gather that moves 16 bytes per access (each output row is the sum of
// two table rows), and the backward, where many positions add into the same table row: a race
// with plain +=, and a result that changes from run to run with float atomicAdd, whose order is
// the hardware's. Grouping the positions by token first (TokenBuckets, built by the trainer on
// the host) gives every row of the gradient one owner that sums in a fixed order: no atomics, the
// same bits on every run. Memory-bound: the checker times the forward against a device copy.
//
// Run:  grader run 08/embedding        Stuck:  grader hint 08/embedding
// Contract: embedding.h                Notes:  notes/08_training.md
#include <cuda_bf16.h>

#include "course/activation.h"
#include "course/exercise.h"
#include "embedding.h"

using course::from_float;
using course::to_float;

// TODO: embedding_forward_kernel<Act>: one thread per element (then per 16 bytes) of out:
//       position = b * T + t, token = tokens[position],
//       out[position][c] = from_float<Act>(to_float(wte[token][c]) + to_float(wpe[t][c])).
// TODO: token_embedding_backward_kernel<Act>: one block per bucket k of TokenBuckets; its threads
//       own channels c; each sums dout[positions[p]][c] for p in [start[k], start[k + 1]) in that
//       order and adds the sum to dwte[token[k]][c]. No atomicAdd: one owner per row.
// TODO: position_embedding_backward_kernel<Act>: one thread per (t, c) adds the sum over b of
//       dout[b][t][c] to dwpe[t][c].

template <typename Act>
void forward(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
    // TODO: launch the forward kernel (grid from course::ceil_div), then CUDA_CHECK_LAUNCH().
    COURSE_TODO("embedding_forward: write the kernel and launch it, then delete this line");
}

template <typename Act>
void backward(float* dwte, float* dwpe, const Act* dout, const TokenBuckets& buckets, int B, int T,
              int C) {
    // TODO: launch the token kernel with buckets.count blocks, then the position kernel;
    //       CUDA_CHECK_LAUNCH() after each.
    COURSE_TODO("embedding_backward: write the kernels and launch them, then delete this line");
}

void embedding_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
    forward(out, tokens, wte, wpe, B, T, C);
}
void embedding_forward(__nv_bfloat16* out, const int* tokens, const __nv_bfloat16* wte,
                       const __nv_bfloat16* wpe, int B, int T, int C) {
    forward(out, tokens, wte, wpe, B, T, C);
}
void embedding_backward(float* dwte, float* dwpe, const float* dout, const TokenBuckets& buckets,
                        int B, int T, int C) {
    backward(dwte, dwpe, dout, buckets, B, T, C);
}
void embedding_backward(float* dwte, float* dwpe, const __nv_bfloat16* dout,
                        const TokenBuckets& buckets, int B, int T, int C) {
    backward(dwte, dwpe, dout, buckets, B, T, C);
}
