// 06_softmax_norms/softmax_online: the online softmax, one pass for the maximum and the sum
// together, then the write pass. Reference solution.
//
// Teaches: the online normalizer (a running maximum m and a sum d of exp(x - m) that is rescaled
// whenever m grows), the rule that merges two such partial results, and keeping the row on chip
// (in registers, or in shared memory when it is long: on Hopper the shared memory of a cluster of
// blocks) between the two passes, so that device memory reads each row only once. One merge of
// (m, d) states per row, where softmax_block reduces twice (the maximum, then the sum). The same
// (m, d) merge is the heart of flash attention in module 07.
//
// Run:  grader run 06/softmax_online --solutions
// Contract: softmax_online.h           Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "softmax_online.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpRowsBlock = 256;  // short rows: a warp per row, 8 rows per block of 256 threads
constexpr int kClusterBlock = 512;   // rows in shared memory on Hopper: a cluster of blocks of 512
constexpr std::size_t kSliceBytes = 100 * 1024;  // ... each with up to 100 KB, 2 blocks per SM
constexpr int kStageThreads = 1024;  // before Hopper: a block of 1024 threads per row
constexpr int kLoadsInFlight = 4;    // ... whose threads load 4 vectors each at a time

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

// ---- Rows held in registers: up to 1024 columns with a warp per row, 16384 with a block ----

// kGroup threads per row: 32 (a warp; kBlock / 32 rows per block) or kBlock (the whole block).
// Thread `member` of the group holds the row's vectors member, member + kGroup, ... in
// cache[0..kVecsPerThread - 1] (coalesced at each j; fully unrolled loops keep each cache[j] in a
// register, as in softmax_block). Vec is float4 when every row starts 16-byte aligned, else float.
template <class Vec, int kVecsPerThread, int kGroup, int kBlock>
__global__ void __launch_bounds__(kBlock)
    softmax_online_in_registers(const float* in, float* out, int rows, int cols) {
    __shared__ float max_partials[32], sum_partials[32];
    constexpr int kRowsPerBlock = kBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int member = threadIdx.x % kGroup;
    // Only whole warps leave (a group is at least a warp); a block group always has its row (the
    // grid has exactly rows blocks then), so no thread skips the barrier.
    if (row >= rows) return;

    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const int vecs = cols / kFloatsPerVec;
    const Vec* x = reinterpret_cast<const Vec*>(in + static_cast<std::size_t>(row) * cols);
    Vec* y = reinterpret_cast<Vec*>(out + static_cast<std::size_t>(row) * cols);

    // Pass 1, the only read of the row: all kVecsPerThread loads in flight at once, then the
    // maximum and the sum together, one online update per vector.
    Vec cache[kVecsPerThread];
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = member + j * kGroup;
        if (k < vecs) cache[j] = x[k];
    }
    MaxSum state{-FLT_MAX, 0.0f};
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j)
        if (member + j * kGroup < vecs) state = add(state, cache[j]);
    state = group_merge<kGroup>(state, max_partials, sum_partials);

    // Pass 2, from the registers. The contract promises a finite entry, so state.max is finite
    // and state.sum >= 1 (the maximum's own term is exp(0)).
    const float inv_sum = 1.0f / state.sum;
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = member + j * kGroup;
        if (k < vecs) y[k] = normalized(cache[j], state.max, inv_sum);
    }
}

// ---- Longer rows: the row held in shared memory ----

// Launched in clusters (Hopper), the blocks of a cluster share one row: each stages the slice
// course::cluster_slice gives it (a 50304-float row, 201 KB, takes 2 blocks of 100 KB; an SM holds
// 2 such blocks of different rows, so one row's merge hides behind the other's loads), and the
// blocks merge their states through distributed shared memory. Otherwise one block of
// kStageThreads holds the whole row (one row per SM). `staged`: pass 1 parks each vector in the
// block's dynamic shared memory and pass 2 reads it back there (a thread reads back only the
// slots it wrote, so the stage needs no barrier); without it (a slice larger than shared memory),
// pass 2 reads the row a second time.
template <class Vec, int kBlock>
__global__ void __launch_bounds__(kBlock, kStageThreads / kBlock)
    softmax_online_staged(const float* in, float* out, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ float max_partials[32], sum_partials[32];
    __shared__ MaxSum block_state;  // read by the other blocks of a cluster
    const unsigned slices = course::cluster_blocks();  // blocks per row: 1 without clusters
    const int row = static_cast<int>(blockIdx.x / slices);  // the grid has rows * slices blocks
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const Vec* x = reinterpret_cast<const Vec*>(in + static_cast<std::size_t>(row) * cols);
    Vec* y = reinterpret_cast<Vec*>(out + static_cast<std::size_t>(row) * cols);
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    // This block's vectors: shares rounded to 128 bytes (32 floats) so each starts on a line.
    const course::Slice slice =
        course::cluster_slice(cols / kFloatsPerVec, slices, course::cluster_rank(), 32 / kFloatsPerVec);

    // Pass 1: maximum and sum together, in rounds of kLoadsInFlight independent loads per thread,
    // each vector parked in the stage.
    MaxSum state{-FLT_MAX, 0.0f};
    for (int first = slice.begin + threadIdx.x; first < slice.end; first += kLoadsInFlight * kBlock) {
        Vec v[kLoadsInFlight];
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {
            const int k = first + u * kBlock;
            if (k < slice.end) v[u] = x[k];
        }
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {
            const int k = first + u * kBlock;
            if (k < slice.end) {
                if (staged) stage[k - slice.begin] = v[u];
                state = add(state, v[u]);
            }
        }
    }
    state = group_merge<kBlock>(state, max_partials, sum_partials);
    state = course::cluster_reduce(state, &block_state, [](MaxSum a, MaxSum b) { return merge(a, b); });
    course::cluster_arrive();  // done reading the other blocks' states

    // Pass 2: write. Unstaged rows are read a second time, for the last time: __ldcs marks those
    // lines evict-first.
    const float inv_sum = 1.0f / state.sum;
#pragma unroll 4
    for (int k = slice.begin + threadIdx.x; k < slice.end; k += kBlock)
        y[k] = normalized(staged ? stage[k - slice.begin] : __ldcs(x + k), state.max, inv_sum);
    course::cluster_wait();  // the other blocks are done with our state
}

// ---- Launchers: the row's length picks where it is kept ----

// Rows of up to kGroup * kFloatsPerThread floats in registers, kGroup threads per row.
template <class Vec, int kFloatsPerThread, int kGroup, int kBlock>
void launch_in_registers(const float* in, float* out, int rows, int cols) {
    constexpr int kVecsPerThread = kFloatsPerThread / (sizeof(Vec) / sizeof(float));
    constexpr int kRowsPerBlock = kBlock / kGroup;
    softmax_online_in_registers<Vec, kVecsPerThread, kGroup, kBlock>
        <<<course::ceil_div(rows, kRowsPerBlock), kBlock>>>(in, out, rows, cols);
    CUDA_CHECK_LAUNCH();
}

// A long row: in the shared memory of a cluster of blocks where `clusters` (Hopper), else of one
// block.
template <class Vec>
void launch_in_shared(const float* in, float* out, int rows, int cols, bool clusters) {
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
    const auto in_cluster = softmax_online_staged<Vec, kClusterBlock>;
    static const std::size_t cluster_capacity = course::opt_in_shared_bytes(in_cluster);
    const int slices = static_cast<int>(course::ceil_div(row_bytes, kSliceBytes));
    if (clusters && slices <= static_cast<int>(course::kMaxClusterBlocks)) {
        // The first slice is the longest (at most kSliceBytes).
        const course::Slice first =
            course::cluster_slice(cols / kFloatsPerVec, slices, 0, 32 / kFloatsPerVec);
        const std::size_t slice_bytes = (first.end - first.begin) * sizeof(Vec);
        course::launch_in_clusters(in_cluster, rows * slices, kClusterBlock, slices, slice_bytes,
                                   in, out, cols, slice_bytes <= cluster_capacity);
        return;
    }
    const auto one_block = softmax_online_staged<Vec, kStageThreads>;
    static const std::size_t capacity = course::opt_in_shared_bytes(one_block);
    const bool staged = row_bytes <= capacity;
    one_block<<<rows, kStageThreads, staged ? row_bytes : 0>>>(in, out, cols, staged);
    CUDA_CHECK_LAUNCH();
}

// The same tiers as softmax_block: a warp with 4 or 32 floats per lane (128, 1024 columns), a
// block of 256 threads with 16 floats each (4096), then shared memory: on Hopper split over a
// cluster of blocks; before it, a block of 1024 threads with 16 floats each in registers first
// (16384), then one block's shared memory.
template <class Vec>
void launch_for_row_length(const float* in, float* out, int rows, int cols) {
    static const bool clusters = course::clusters_available(softmax_online_staged<Vec, kClusterBlock>);
    if (cols <= 32 * 4)
        launch_in_registers<Vec, 4, 32, kWarpRowsBlock>(in, out, rows, cols);
    else if (cols <= 32 * 32)
        launch_in_registers<Vec, 32, 32, kWarpRowsBlock>(in, out, rows, cols);
    else if (cols <= 256 * 16)
        launch_in_registers<Vec, 16, 256, 256>(in, out, rows, cols);
    else if (cols <= 1024 * 16 && !clusters)
        launch_in_registers<Vec, 16, 1024, 1024>(in, out, rows, cols);
    else
        launch_in_shared<Vec>(in, out, rows, cols, clusters);
}

}  // namespace

void softmax_online(const float* in, float* out, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary (see softmax_block).
    if (cols % 4 == 0 && course::is_aligned(in, 16) && course::is_aligned(out, 16))
        launch_for_row_length<float4>(in, out, rows, cols);
    else
        launch_for_row_length<float>(in, out, rows, cols);
}
