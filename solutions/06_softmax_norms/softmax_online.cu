// 06_softmax_norms/softmax_online: the online softmax, one pass for the maximum and the sum
// together, then the write pass. Reference solution.
//
// Teaches: the online normalizer (a running maximum m and a sum d of exp(x - m) that is rescaled
// whenever m grows), the rule that merges two such partial results, and keeping the row on chip
// (in shared memory) between the two passes, so that device memory reads each row only once.
// The same (m, d) merge is the heart of flash attention in module 07.
//
// Run:  grader run 06/softmax_online --solutions
// Contract: softmax_online.h           Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "softmax_online.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// A partial softmax over the values seen so far: max = the largest of them, sum = the sum of
// exp(value - max) over them. "Nothing seen yet" is {-FLT_MAX, 0}, not {-inf, 0}: merging two
// empty states then computes expf(-FLT_MAX - (-FLT_MAX)) * 0 = 0 instead of expf(NaN), and an
// -inf value still contributes expf(-inf) = 0.
struct MaxSum {
    float max;
    float sum;
};

// Both sums were taken against their own maximum; rescale each to the common one. The
// factors are exp(<= 0), so nothing overflows.
__device__ MaxSum merge(MaxSum a, MaxSum b) {
    const float max = fmaxf(a.max, b.max);
    return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

__device__ float max_of(float v) { return v; }
__device__ float max_of(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ float sum_of_exp(float v, float max) { return expf(v - max); }
__device__ float sum_of_exp(float4 v, float max) {
    return (expf(v.x - max) + expf(v.y - max)) + (expf(v.z - max) + expf(v.w - max));
}
__device__ float normalized(float v, float max, float inv_sum) { return expf(v - max) * inv_sum; }
__device__ float4 normalized(float4 v, float max, float inv_sum) {
    return make_float4(expf(v.x - max) * inv_sum, expf(v.y - max) * inv_sum,
                       expf(v.z - max) * inv_sum, expf(v.w - max) * inv_sum);
}

// The online update with one vector: raise the maximum once for all its values, rescale the old
// sum by exp(old max - new max), add the vector's terms. 1 + floats-per-vector exponentials.
template <class Vec>
__device__ MaxSum add(MaxSum state, Vec v) {
    const float max = fmaxf(state.max, max_of(v));
    return {max, state.sum * expf(state.max - max) + sum_of_exp(v, max)};
}

// Butterfly over the warp, exchanging both halves of the state: every lane ends with the warp's.
__device__ MaxSum warp_merge(MaxSum s) {
    for (int offset = 16; offset > 0; offset /= 2)
        s = merge(s, {__shfl_xor_sync(kFullMask, s.max, offset), __shfl_xor_sync(kFullMask, s.sum, offset)});
    return s;
}

// The row's group: a warp (shuffles only) or the whole block (lane 0 of each warp posts the
// warp's state; after the barrier every warp merges the posted states itself).
template <int kGroup>
__device__ MaxSum group_merge(MaxSum s, float* max_partials, float* sum_partials) {
    s = warp_merge(s);
    if constexpr (kGroup == 32) {
        return s;
    } else {
        constexpr int kWarps = kGroup / 32;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) {
            max_partials[warp] = s.max;
            sum_partials[warp] = s.sum;
        }
        __syncthreads();  // every warp's state is posted before anyone reads them
        const MaxSum posted = lane < kWarps ? MaxSum{max_partials[lane], sum_partials[lane]} : MaxSum{-FLT_MAX, 0.0f};
        return warp_merge(posted);
    }
}

// kGroup threads per row (32: a warp, 8 rows per block of 256; else the whole block, one row).
// Vec is float4 when every row starts 16-byte aligned, else float. `staged`: the block's dynamic
// shared memory holds the whole row, so pass 2 reads it there instead of from L2/device memory.
template <class Vec, int kGroup, int kBlock>
__global__ void __launch_bounds__(kBlock)
    softmax_online_kernel(const float* in, float* out, int rows, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ float max_partials[32], sum_partials[32];
    constexpr int kRowsPerBlock = kBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int lane = threadIdx.x % kGroup;
    if (row >= rows) return;  // whole warps only (a group is at least a warp)

    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const int vecs = cols / kFloatsPerVec;
    const Vec* x = reinterpret_cast<const Vec*>(in + static_cast<std::size_t>(row) * cols);
    Vec* y = reinterpret_cast<Vec*>(out + static_cast<std::size_t>(row) * cols);
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);

    // Pass 1: maximum and sum together. Each thread keeps its own (max, sum) over vectors lane,
    // lane + kGroup, ... (coalesced, as in softmax_block) and parks each vector in shared memory.
    // A thread later reads back exactly the slots it wrote, so the stage needs no barrier.
    MaxSum state{-FLT_MAX, 0.0f};
#pragma unroll 4
    for (int k = lane; k < vecs; k += kGroup) {
        const Vec v = x[k];
        if (staged) stage[k] = v;
        state = add(state, v);
    }
    state = group_merge<kGroup>(state, max_partials, sum_partials);

    // Pass 2: write. The contract promises a finite entry, so state.max is finite and
    // state.sum >= 1 (the maximum's own term is exp(0)). Unstaged rows are read a second time
    // (from L1/L2 if still there) for the last time: __ldcs marks those lines evict-first.
    const float inv_sum = 1.0f / state.sum;
#pragma unroll 4
    for (int k = lane; k < vecs; k += kGroup)
        y[k] = normalized(staged ? stage[k] : __ldcs(x + k), state.max, inv_sum);
}

// Shared memory a block may use on this GPU beyond the kernel's static arrays (227 KB on an
// H100, 163 KB on an A100, 64 KB on a T4), opted into once per kernel: above 48 KB a kernel
// must ask for it explicitly.
template <class Kernel>
std::size_t opt_in_stage_bytes(Kernel kernel) {
    int device = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const int bytes = optin - static_cast<int>(attributes.sharedSizeBytes);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return static_cast<std::size_t>(bytes);
}

// Short rows: a warp per row, 8 rows per block. A row is at most 4 KB and its second read hits
// L1, so there is nothing to stage.
template <class Vec>
void launch_warp_rows(const float* in, float* out, int rows, int cols) {
    constexpr int kBlock = 256, kRowsPerBlock = kBlock / 32;
    softmax_online_kernel<Vec, 32, kBlock><<<course::ceil_div(rows, kRowsPerBlock), kBlock>>>(in, out, rows, cols, false);
    CUDA_CHECK_LAUNCH();
}

// Long rows: a block per row, the row staged in shared memory when it fits. For a 50304-float
// row (201 KB) that is one block per SM; without the stage the second read would miss L2
// (132 such rows in flight, plus the writes, are more than L2 holds) and cost ~15% of the
// bandwidth.
template <class Vec, int kThreads>
void launch_block_rows(const float* in, float* out, int rows, int cols) {
    const auto kernel = softmax_online_kernel<Vec, kThreads, kThreads>;
    static const std::size_t stage_capacity = opt_in_stage_bytes(kernel);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
    const bool staged = row_bytes <= stage_capacity;
    kernel<<<rows, kThreads, staged ? row_bytes : 0>>>(in, out, rows, cols, staged);
    CUDA_CHECK_LAUNCH();
}

template <class Vec>
void launch_for_row_length(const float* in, float* out, int rows, int cols) {
    if (cols <= 1024)
        launch_warp_rows<Vec>(in, out, rows, cols);
    else if (cols <= 16384)
        launch_block_rows<Vec, 512>(in, out, rows, cols);
    else
        launch_block_rows<Vec, 1024>(in, out, rows, cols);
}

bool aligned_16(const float* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

void softmax_online(const float* in, float* out, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary (see softmax_block).
    if (cols % 4 == 0 && aligned_16(in) && aligned_16(out))
        launch_for_row_length<float4>(in, out, rows, cols);
    else
        launch_for_row_length<float>(in, out, rows, cols);
}
