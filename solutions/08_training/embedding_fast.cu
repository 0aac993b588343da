// 08_training/embedding_fast: token and position embedding, the forward with several packs in
// flight per thread and out stored past L2's keeping. Fast reference (the readable one is
// embedding.cu: one 16-byte pack per thread).
//
// Teaches: what the gather's last points of bandwidth are made of. In the readable forward each
// thread loads a token id, waits for it, then loads one pack of the token's row: one dependent
// pair of loads per 16 bytes. Here each thread takes four packs (possibly of four token rows):
// their four token ids are loaded together, then their eight table packs, so that a thread has
// 128 bytes on their way instead of 32 and the id's latency is paid once per four packs. And out,
// which this kernel never reads again, is stored with the streaming hint (st.global.cs: evicted
// first from L2), so that L2 keeps the rows of wte instead: a token met again a few thousand
// positions later is read from L2, not from device memory. The backward is the readable's (a
// deterministic scatter-add: it is one small kernel of a training step).
//
// Run:  grader run 08/embedding --solutions      (the "embedding (fast)" row)
// Contract: embedding.h                Notes:  notes/08_training.md
#include <cuda_bf16.h>

#include "course/activation.h"
#include "course/exercise.h"
#include "embedding.h"

using course::from_float;
using course::to_float;

namespace {

constexpr int kThreads = 256;
// Packs per thread, all loaded before the first is stored: 4 x 32 bytes of table rows in flight
// per thread, 256 KB per SM of an H100 at full occupancy (device memory needs about 23 KB per SM
// in flight to stay busy; the rest hides the token ids' latency).
constexpr int kPacksPerThread = 4;

// kWidth values moved as one access (16 bytes when kWidth * sizeof(Act) = 16).
template <typename Act, int kWidth>
struct alignas(sizeof(Act) * kWidth) Pack {
    Act value[kWidth];
};

template <typename Act>
constexpr int kVector = 16 / sizeof(Act);

// A pack stored with the streaming hint: 16-byte packs as one uint4 (__stcs has no overload for
// our struct), narrower ones (the one-value path) plainly.
template <typename P>
__device__ void store_streaming(P* to, const P& value) {
    if constexpr (sizeof(P) == 16) {
        __stcs(reinterpret_cast<uint4*>(to), *reinterpret_cast<const uint4*>(&value));
    } else {
        *to = value;
    }
}

// Each thread takes the packs first, first + blockDim.x, ..., first + 3 * blockDim.x of its
// block's 4 * blockDim.x consecutive packs of out: at every step the warp's 32 packs are
// consecutive (coalesced), as in the readable kernel. out[position][c..] = wte[token][c..] +
// wpe[t][c..]. Pack indices in unsigned: B * T * C < 2^31 (the contract), and the last block's
// packs past the end reach at most 2^31 + 4 * blockDim.x.
template <typename Act, int kWidth>
__global__ void embedding_forward_kernel(Act* __restrict__ out, const int* __restrict__ tokens,
                                         const Act* __restrict__ wte, const Act* __restrict__ wpe,
                                         int positions, int T, int C) {
    using P = Pack<Act, kWidth>;
    const unsigned row_packs = C / kWidth;
    const unsigned packs = static_cast<unsigned>(positions) * row_packs;
    const unsigned first = blockIdx.x * (kPacksPerThread * blockDim.x) + threadIdx.x;
    unsigned pack[kPacksPerThread], position[kPacksPerThread];
    int token[kPacksPerThread];
    // The token ids first, all four loads issued before any is used.
#pragma unroll
    for (int u = 0; u < kPacksPerThread; ++u) {
        pack[u] = first + u * blockDim.x;
        position[u] = pack[u] / row_packs;  // b * T + t
        if (pack[u] < packs) token[u] = tokens[position[u]];
    }
    // Then the eight table packs.
    P token_row[kPacksPerThread], position_row[kPacksPerThread];
#pragma unroll
    for (int u = 0; u < kPacksPerThread; ++u) {
        if (pack[u] >= packs) continue;
        const unsigned c = pack[u] - position[u] * row_packs;
        token_row[u] =
            reinterpret_cast<const P*>(wte)[static_cast<unsigned>(token[u]) * row_packs + c];
        position_row[u] = reinterpret_cast<const P*>(wpe)[(position[u] % T) * row_packs + c];
    }
#pragma unroll
    for (int u = 0; u < kPacksPerThread; ++u) {
        if (pack[u] >= packs) continue;
        P sum;
#pragma unroll
        for (int k = 0; k < kWidth; ++k)
            sum.value[k] = from_float<Act>(to_float(token_row[u].value[k]) +
                                           to_float(position_row[u].value[k]));
        store_streaming(reinterpret_cast<P*>(out) + pack[u], sum);
    }
}

// The backward, as the readable solution has it. One block per bucket (a distinct token): its
// threads own channels c, c + blockDim.x, ... and each sums dout over the bucket's positions in
// the order they are listed, then adds that sum to the token's row. No other thread ever touches
// the row, so no atomics; and the order of every sum is fixed, so the bits are the same on every
// run.
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

template <typename Act, int kWidth>
void launch_forward(Act* out, const int* tokens, const Act* wte, const Act* wpe, int positions,
                    int T, int C) {
    const int packs = positions * (C / kWidth);
    const int blocks = course::ceil_div(packs, kPacksPerThread * kThreads);
    embedding_forward_kernel<Act, kWidth>
        <<<blocks, kThreads>>>(out, tokens, wte, wpe, positions, T, C);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void forward(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T, int C) {
    // 16 bytes per access where every row of out, wte and wpe starts on a 16-byte boundary: the
    // tensors do and C is a whole number of packs. Else one value per access.
    constexpr int kWide = kVector<Act>;
    if (C % kWide == 0 && course::is_aligned(out, 16) && course::is_aligned(wte, 16) &&
        course::is_aligned(wpe, 16)) {
        launch_forward<Act, kWide>(out, tokens, wte, wpe, B * T, T, C);
    } else {
        launch_forward<Act, 1>(out, tokens, wte, wpe, B * T, T, C);
    }
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
