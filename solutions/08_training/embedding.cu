// 08_training/embedding: token and position embedding, forward (a gather) and backward (a
// deterministic scatter-add), float and bf16 activations. Reference solution.
//
// Teaches: the forward as a gather that moves 16 bytes per access (each output row is the sum of
// two table rows), and the backward, where many positions add into the same table row: a race
// with plain +=, and a result that changes from run to run with float atomicAdd, whose order is
// the hardware's. Grouping the positions by token first (TokenBuckets, built by the trainer on
// the host) gives every row of the gradient one owner that sums in a fixed order: no atomics, the
// same bits on every run. Memory-bound: the checker times the forward against a device copy.
//
// Run:  grader run 08/embedding --solutions
// Contract: embedding.h                Notes:  notes/08_training.md
#include <cuda_bf16.h>

#include "course/activation.h"
#include "course/exercise.h"
#include "embedding.h"

using course::from_float;
using course::to_float;

namespace {

constexpr int kThreads = 256;

// kWidth values moved as one access (16 bytes when kWidth * sizeof(Act) = 16).
template <typename Act, int kWidth>
struct alignas(sizeof(Act) * kWidth) Pack {
    Act value[kWidth];
};

template <typename Act>
constexpr int kVector = 16 / sizeof(Act);

// One thread per pack of kWidth channels of one position: out[position][c..] = wte[token][c..] +
// wpe[t][c..]. Consecutive threads take consecutive packs of a row, so each warp reads whole
// stretches of the two table rows and writes one of out (coalesced). B * T * C < 2^31 (the
// contract): int indices do.
template <typename Act, int kWidth>
__global__ void embedding_forward_kernel(Act* out, const int* tokens, const Act* wte,
                                         const Act* wpe, int positions, int T, int C) {
    using P = Pack<Act, kWidth>;
    const int row_packs = C / kWidth;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // pack index in out
    if (i >= positions * row_packs) return;
    const int position = i / row_packs;  // b * T + t
    const int c = i % row_packs;
    const int t = position % T;
    const P token_row = reinterpret_cast<const P*>(wte)[tokens[position] * row_packs + c];
    const P position_row = reinterpret_cast<const P*>(wpe)[t * row_packs + c];
    P sum;
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
        sum.value[k] =
            from_float<Act>(to_float(token_row.value[k]) + to_float(position_row.value[k]));
    reinterpret_cast<P*>(out)[i] = sum;
}

// One block per bucket (a distinct token): its threads own channels c, c + blockDim.x, ... and
// each sums dout over the bucket's positions in the order they are listed, then adds that sum to
// the token's row. No other thread ever touches the row, so no atomics; and the order of every
// sum is fixed, so the bits are the same on every run. Consecutive threads read consecutive
// channels of one dout row (coalesced).
template <typename Act>
__global__ void token_embedding_backward_kernel(float* dwte, const Act* dout, const int* token,
                                                const int* start, const int* positions, int C) {
    const int bucket = blockIdx.x;
    const int first = start[bucket], last = start[bucket + 1];
    float* row = dwte + token[bucket] * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int p = first; p < last; ++p) sum += to_float(dout[positions[p] * C + c]);
        row[c] += sum;
    }
}

// One thread per (t, c): the sum over the batch, in order, added to dwpe[t][c].
template <typename Act>
__global__ void position_embedding_backward_kernel(float* dwpe, const Act* dout, int B, int T,
                                                   int C) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // t * C + c
    if (i >= T * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; ++b) sum += to_float(dout[b * T * C + i]);
    dwpe[i] += sum;
}

template <typename Act>
void forward(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
    // 16 bytes per access where every row of out, wte and wpe starts on a 16-byte boundary: the
    // tensors do and C is a whole number of packs. Else one value per access.
    constexpr int kWide = kVector<Act>;
    const int positions = B * T;
    if (C % kWide == 0 && course::is_aligned(out, 16) && course::is_aligned(wte, 16) &&
        course::is_aligned(wpe, 16)) {
        const int packs = positions * (C / kWide);
        embedding_forward_kernel<Act, kWide><<<course::ceil_div(packs, kThreads), kThreads>>>(
            out, tokens, wte, wpe, positions, T, C);
    } else {
        embedding_forward_kernel<Act, 1><<<course::ceil_div(positions * C, kThreads), kThreads>>>(
            out, tokens, wte, wpe, positions, T, C);
    }
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void backward(float* dwte, float* dwpe, const Act* dout, const TokenBuckets& buckets, int B, int T,
              int C) {
    token_embedding_backward_kernel<Act><<<buckets.count, kThreads>>>(
        dwte, dout, buckets.token, buckets.start, buckets.positions, C);
    CUDA_CHECK_LAUNCH();
    position_embedding_backward_kernel<Act>
        <<<course::ceil_div(T * C, kThreads), kThreads>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

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
