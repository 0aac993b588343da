// 06_softmax_norms/softmax_causal: causal masked, scaled softmax over attention scores.
// Reference solution.
//
// Teaches: rows of different lengths (query i sees keys 0..i), reading only the live part of a
// row and writing the masked part as exact zeros, folding the scale into the exponent, and
// keeping a whole row in registers when it is short enough (T <= 1024: 32 floats per lane).
//
// Run:  grader run 06/softmax_causal --solutions
// Contract: softmax_causal.h           Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "softmax_causal.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// ---- One loaded vector (a float, or a float4 of 4 consecutive columns starting at `col`) ----

// Columns after i are masked: they become -inf, whatever the score holds (even NaN), so they
// drop out of the maximum and give exp(-inf) = 0. Only columns of the vector holding column i
// can be masked: the loops never load a vector that starts after i.
__device__ float masked(float v, int col, int i) { return col <= i ? v : -INFINITY; }
__device__ float4 masked(float4 v, int col, int i) {
    return make_float4(masked(v.x, col, i), masked(v.y, col + 1, i), masked(v.z, col + 2, i),
                       masked(v.w, col + 3, i));
}
__device__ float max_of(float v) { return v; }
__device__ float max_of(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ float sum_of(float v) { return v; }
__device__ float sum_of(float4 v) { return (v.x + v.y) + (v.z + v.w); }
// exp(scale * s - max over k of scale * s_k) = exp((s - row_max) * scale) for scale > 0, with
// row_max the largest raw score. Subtracting first keeps the exponent exact where it matters
// (scale * s rounded first would be off by u * |scale * s|, 1e-4 relative for scores of 1e4).
__device__ float exp_scaled(float v, float row_max, float scale) {
    return expf((v - row_max) * scale);
}
__device__ float4 exp_scaled(float4 v, float row_max, float scale) {
    return make_float4(exp_scaled(v.x, row_max, scale), exp_scaled(v.y, row_max, scale),
                       exp_scaled(v.z, row_max, scale), exp_scaled(v.w, row_max, scale));
}
__device__ float times(float v, float factor) { return v * factor; }
__device__ float4 times(float4 v, float factor) {
    return make_float4(v.x * factor, v.y * factor, v.z * factor, v.w * factor);
}
template <class Vec>
__device__ Vec filled(float value);
template <>
__device__ float filled<float>(float value) {
    return value;
}
template <>
__device__ float4 filled<float4>(float value) {
    return make_float4(value, value, value, value);
}

// ---- Short rows (T <= 1024): a warp per row, the live part held in registers ----

// Each lane caches kVecsPerLane vectors, lane-interleaved (vector k = lane + 32 * j, so each step
// j is one coalesced 32-vector stretch): 32 * kVecsPerLane vectors = 1024 floats, a whole row of
// a T <= 1024 head. The row is read from memory once; max, sum and the output come from registers.
template <class Vec, int kVecsPerLane>
__global__ void __launch_bounds__(256)
    softmax_causal_warp_kernel(const float* scores, float* probs, int total_rows, int T,
                               float scale) {
    constexpr int kRowsPerBlock = 256 / 32, kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= total_rows) return;  // a whole warp: its row does not exist
    const int i = row % T;          // query position in its head: columns 0..i are live
    const int vecs = T / kFloatsPerVec;
    const int live_vecs = i / kFloatsPerVec + 1;  // vectors holding columns 0..i
    const Vec* s = reinterpret_cast<const Vec*>(scores + static_cast<std::size_t>(row) * T);
    Vec* p = reinterpret_cast<Vec*>(probs + static_cast<std::size_t>(row) * T);

    // Load the live vectors (all loads are independent: up to kVecsPerLane in flight per lane);
    // everything past them is masked and never read.
    Vec cache[kVecsPerLane];
    float row_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kVecsPerLane; ++j) {
        const int k = lane + 32 * j;
        cache[j] = k < live_vecs ? masked(s[k], k * kFloatsPerVec, i) : filled<Vec>(-INFINITY);
        row_max = fmaxf(row_max, max_of(cache[j]));
    }
    for (int offset = 16; offset > 0; offset /= 2)
        row_max = fmaxf(row_max, __shfl_xor_sync(kFullMask, row_max, offset));

    // Column i is live and finite, so row_max is finite; masked slots become exp(-inf) = 0.
    float row_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecsPerLane; ++j) {
        cache[j] = exp_scaled(cache[j], row_max, scale);
        row_sum += sum_of(cache[j]);
    }
    for (int offset = 16; offset > 0; offset /= 2)
        row_sum += __shfl_xor_sync(kFullMask, row_sum, offset);

    // Every column of the row is written: live ones with their probability, masked ones with
    // 0 * inv_sum = 0 exactly.
    const float inv_sum = 1.0f / row_sum;
#pragma unroll
    for (int j = 0; j < kVecsPerLane; ++j) {
        const int k = lane + 32 * j;
        if (k < vecs) p[k] = times(cache[j], inv_sum);
    }
}

// ---- Long rows (T > 1024): a block per row, online (max, sum), then the write pass ----

// The online normalizer of softmax_online, with the scale folded into the exponents.
// "Nothing seen yet" is {-FLT_MAX, 0} so that merging two empty states gives no NaN.
struct SoftmaxState {
    float max;  // largest raw score seen
    float sum;  // sum of exp((score - max) * scale) over the scores seen
};

__device__ SoftmaxState merge(SoftmaxState a, SoftmaxState b, float scale) {
    const float max = fmaxf(a.max, b.max);
    return {max, a.sum * expf((a.max - max) * scale) + b.sum * expf((b.max - max) * scale)};
}

template <class Vec>
__device__ SoftmaxState add(SoftmaxState state, Vec v, float scale) {
    const float max = fmaxf(state.max, max_of(v));
    return {max, state.sum * expf((state.max - max) * scale) + sum_of(exp_scaled(v, max, scale))};
}

__device__ SoftmaxState warp_merge(SoftmaxState s, float scale) {
    for (int offset = 16; offset > 0; offset /= 2)
        s = merge(
            s,
            {__shfl_xor_sync(kFullMask, s.max, offset), __shfl_xor_sync(kFullMask, s.sum, offset)},
            scale);
    return s;
}

template <class Vec, int kThreads>
__global__ void __launch_bounds__(kThreads)
    softmax_causal_block_kernel(const float* scores, float* probs, int T, float scale) {
    __shared__ float max_partials[32], sum_partials[32];
    constexpr int kWarps = kThreads / 32, kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const int row = blockIdx.x;  // one block per row: the grid has exactly batch_heads * T blocks
    const int i = row % T;
    const int vecs = T / kFloatsPerVec;
    const int live_vecs = i / kFloatsPerVec + 1;
    const Vec* s = reinterpret_cast<const Vec*>(scores + static_cast<std::size_t>(row) * T);
    Vec* p = reinterpret_cast<Vec*>(probs + static_cast<std::size_t>(row) * T);

    // Pass 1, over the live part only: each thread's (max, sum), then the block's (lane 0 of
    // each warp posts its warp's state; after the barrier every warp merges the posted ones).
    SoftmaxState state{-FLT_MAX, 0.0f};
#pragma unroll 4
    for (int k = threadIdx.x; k < live_vecs; k += kThreads)
        state = add(state, masked(s[k], k * kFloatsPerVec, i), scale);
    state = warp_merge(state, scale);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) {
        max_partials[warp] = state.max;
        sum_partials[warp] = state.sum;
    }
    __syncthreads();
    state = warp_merge(lane < kWarps ? SoftmaxState{max_partials[lane], sum_partials[lane]}
                                     : SoftmaxState{-FLT_MAX, 0.0f},
                       scale);

    // Pass 2 writes the whole row: the live part from a second read (its last use: __ldcs and
    // __stcs mark the lines evict-first, so they do not crowd out rows other blocks still read),
    // the masked part as zeros without reading anything.
    const float inv_sum = 1.0f / state.sum;
#pragma unroll 4
    for (int k = threadIdx.x; k < vecs; k += kThreads) {
        const Vec probability =
            k < live_vecs
                ? times(exp_scaled(masked(__ldcs(s + k), k * kFloatsPerVec, i), state.max, scale),
                        inv_sum)
                : filled<Vec>(0.0f);
        __stcs(p + k, probability);
    }
}

template <class Vec>
void launch(const float* scores, float* probs, int batch_heads, int T, float scale) {
    const int total_rows = batch_heads * T;
    if (T <= 1024) {
        // 32 lanes x kVecsPerLane vectors = 1024 floats: room for the longest row of this path.
        constexpr int kVecsPerLane = 1024 / 32 / (sizeof(Vec) / sizeof(float));
        constexpr int kRowsPerBlock = 256 / 32;
        softmax_causal_warp_kernel<Vec, kVecsPerLane>
            <<<course::ceil_div(total_rows, kRowsPerBlock), 256>>>(scores, probs, total_rows, T,
                                                                   scale);
    } else if (T <= 2048) {
        // About 4 vectors per thread per pass: 128 threads for rows up to 2048, 256 beyond.
        softmax_causal_block_kernel<Vec, 128><<<total_rows, 128>>>(scores, probs, T, scale);
    } else {
        softmax_causal_block_kernel<Vec, 256><<<total_rows, 256>>>(scores, probs, T, scale);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_causal(const float* scores, float* probs, int batch_heads, int T, float scale) {
    // float4 needs every row start on a 16-byte boundary: aligned base pointers and T % 4 == 0.
    if (T % 4 == 0 && course::is_aligned(scores, 16) && course::is_aligned(probs, 16))
        launch<float4>(scores, probs, batch_heads, T, scale);
    else
        launch<float>(scores, probs, batch_heads, T, scale);
}
