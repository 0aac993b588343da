// 06_softmax_norms/softmax_online: the online softmax, one pass for the maximum and the sum
// together, then the write pass. Reference solution (the readable one; softmax_online_fast.cu
// adds what the long rows' target needs).
//
// Teaches: the online normalizer (a running maximum m and a sum d of exp(x - m) that is rescaled
// whenever m grows), the rule that merges two such partial results, and keeping the row on chip
// (in registers, or in the block's shared memory when it is long) between the two passes, so that
// device memory reads each row only once. One merge of (m, d) states per row, where softmax_block
// reduces twice (the maximum, then the sum). The same (m, d) merge is the heart of flash
// attention in module 07.
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
// Where a row waits between its statistics and the write (the launcher picks by length):
//  - registers: a warp holds a row of up to 1024 floats (32 per lane; kRegisterBlock / 32 rows
//    per block), a block of kRegisterBlock threads one of up to 4096 (kCachedFloats each);
//  - shared memory: one block of kStagedBlock threads per row stages it in dynamic shared memory
//    (a 50304-float row is 201 KB; an H100 block may have 227 KB);
//  - nowhere: a row longer than that is read a second time.
constexpr int kRegisterBlock = 256;
constexpr int kCachedFloats = 16;
constexpr int kStagedBlock = 1024;
constexpr int kLoadsInFlight = 4;  // loads a staging thread issues before it uses the first

// A partial softmax over the values seen so far: max = the largest of them, sum = the sum of
// exp(value - max) over them. Nothing seen yet is {-FLT_MAX, 0}, not {-inf, 0}: merging two
// empty states then computes expf(0) * 0 = 0 instead of expf(-inf - -inf) = NaN, and an -inf
// value still contributes expf(-inf) = 0.
struct SoftmaxState {
    float max;
    float sum;
};

// Both sums were taken against their own maximum; rescale each to the common one. The factors
// are exp(<= 0), so nothing overflows.
__device__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
    const float max = fmaxf(a.max, b.max);
    return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

__device__ float max_of(float v) { return v; }
__device__ float max_of(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ float sum_of_exp(float v, float max) { return expf(v - max); }
__device__ float sum_of_exp(float4 v, float max) {
    return (expf(v.x - max) + expf(v.y - max)) + (expf(v.z - max) + expf(v.w - max));
}

// The online update with one vector: raise the maximum once for all its values, rescale the old
// sum by exp(old max - new max), add the vector's terms. 1 + floats-per-vector exponentials.
template <class Vec>
__device__ SoftmaxState add(SoftmaxState state, Vec v) {
    const float max = fmaxf(state.max, max_of(v));
    return {max, state.sum * expf(state.max - max) + sum_of_exp(v, max)};
}

// The write: exp(x - max) / sum, as a multiply by 1 / sum.
__device__ float normalized(float v, float max, float inv_sum) { return expf(v - max) * inv_sum; }
__device__ float4 normalized(float4 v, float max, float inv_sum) {
    return make_float4(expf(v.x - max) * inv_sum, expf(v.y - max) * inv_sum,
                       expf(v.z - max) * inv_sum, expf(v.w - max) * inv_sum);
}

// Butterfly over the warp, exchanging both halves of the state: every lane ends with the warp's.
__device__ SoftmaxState warp_merge(SoftmaxState state) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const SoftmaxState other{__shfl_xor_sync(kFullMask, state.max, offset),
                                 __shfl_xor_sync(kFullMask, state.sum, offset)};
        state = merge(state, other);
    }
    return state;
}

// The row's group: a warp (shuffles only) or the whole block (lane 0 of each warp posts the
// warp's state; after the barrier every warp merges the posted states itself). Called once per
// block.
template <int kGroup>
__device__ SoftmaxState group_merge(SoftmaxState state) {
    state = warp_merge(state);
    if constexpr (kGroup > 32) {
        constexpr int kWarps = kGroup / 32;
        __shared__ SoftmaxState warp_states[kWarps];
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) warp_states[warp] = state;
        __syncthreads();  // every warp's state is posted before anyone reads them
        state = warp_merge(lane < kWarps ? warp_states[lane] : SoftmaxState{-FLT_MAX, 0.0f});
    }
    return state;
}

// ---- Rows held in registers: up to 1024 columns with a warp per row, 4096 with a block ----

// kGroup threads per row: 32 (a warp; kRegisterBlock / 32 rows per block) or kRegisterBlock
// (the whole block). Thread `member` of the group holds the row's vectors member, member +
// kGroup, ... in cache[0..kVecsPerThread - 1] (coalesced at each j; fully unrolled loops keep
// each cache[j] in a register). Vec is float4 when every row starts 16-byte aligned, else float.
template <class Vec, int kVecsPerThread, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock)
    softmax_online_in_registers(const float* in, float* out, int rows, int cols) {
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
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
    SoftmaxState state{-FLT_MAX, 0.0f};
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j)
        if (member + j * kGroup < vecs) state = add(state, cache[j]);
    state = group_merge<kGroup>(state);

    // Pass 2, from the registers. The contract promises a finite entry, so state.max is finite
    // and state.sum >= 1 (the maximum's own term is exp(0)).
    const float inv_sum = 1.0f / state.sum;
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = member + j * kGroup;
        if (k < vecs) y[k] = normalized(cache[j], state.max, inv_sum);
    }
}

// ---- Longer rows: a block per row, the row staged in its shared memory ----

// `staged`: pass 1 parks each vector in the block's dynamic shared memory and pass 2 reads it
// back there (a thread reads back only the slots it wrote, so the stage needs no barrier);
// without it (a row larger than a block's shared memory), pass 2 reads the row a second time.
template <class Vec>
__global__ void __launch_bounds__(kStagedBlock)
    softmax_online_staged(const float* in, float* out, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const int vecs = cols / kFloatsPerVec;
    const Vec* x = reinterpret_cast<const Vec*>(in + static_cast<std::size_t>(blockIdx.x) * cols);
    Vec* y = reinterpret_cast<Vec*>(out + static_cast<std::size_t>(blockIdx.x) * cols);
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);

    // Pass 1: maximum and sum together, in rounds of kLoadsInFlight independent loads per thread
    // (all in flight together, even in the last, partial round), each vector parked in the stage.
    SoftmaxState state{-FLT_MAX, 0.0f};
    for (int first = threadIdx.x; first < vecs; first += kLoadsInFlight * kStagedBlock) {
        Vec batch[kLoadsInFlight];
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {
            const int k = first + u * kStagedBlock;
            if (k < vecs) batch[u] = x[k];
        }
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {
            const int k = first + u * kStagedBlock;
            if (k < vecs) {
                if (staged) stage[k] = batch[u];
                state = add(state, batch[u]);
            }
        }
    }
    state = group_merge<kStagedBlock>(state);

    // Pass 2: the write, from the stage (or from the row again).
    const float inv_sum = 1.0f / state.sum;
#pragma unroll 4
    for (int k = threadIdx.x; k < vecs; k += kStagedBlock)
        y[k] = normalized(staged ? stage[k] : x[k], state.max, inv_sum);
}

// ---- The launcher: the row's length picks where it is kept ----

template <class Vec>
void launch(const float* in, float* out, int rows, int cols) {
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    if (cols <= 32 * 32) {
        // A warp per row, 32 floats per lane: kRegisterBlock / 32 rows per block.
        softmax_online_in_registers<Vec, 32 / kFloatsPerVec, 32>
            <<<course::ceil_div(rows, kRegisterBlock / 32), kRegisterBlock>>>(in, out, rows, cols);
    } else if (cols <= kRegisterBlock * kCachedFloats) {
        // A block per row, kCachedFloats per thread.
        softmax_online_in_registers<Vec, kCachedFloats / kFloatsPerVec, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(in, out, rows, cols);
    } else {
        // One block's shared memory, opted into once per kernel; longer rows are read again.
        static const std::size_t capacity = course::opt_in_shared_bytes(softmax_online_staged<Vec>);
        const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
        const bool staged = row_bytes <= capacity;
        softmax_online_staged<Vec>
            <<<rows, kStagedBlock, staged ? row_bytes : 0>>>(in, out, cols, staged);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_online(const float* in, float* out, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: the base pointers must be, and a row
    // of cols floats must be a whole number of float4s.
    if (cols % 4 == 0 && course::is_aligned(in, 16) && course::is_aligned(out, 16))
        launch<float4>(in, out, rows, cols);
    else
        launch<float>(in, out, rows, cols);
}
