// 06_softmax_norms/rmsnorm: RMSNorm (Llama), a warp or a block per row.
// Reference solution (the readable one; rmsnorm_fast.cu adds what the long rows' target needs).
//
// Teaches: a block-wide sum reduction (warp shuffles, then shared memory across warps), float4
// loads and stores, keeping the row on chip between the sum and the write (in registers, or in
// the block's shared memory when it is long) so that device memory reads x once, and why RMSNorm
// needs no Welford: a sum of squares has no cancellation. Memory-bound: the checker reports the
// bandwidth next to a device-to-device copy.
//
// Run:  grader run 06/rmsnorm --solutions
// Contract: rmsnorm.h                  Notes:  notes/06_softmax_norms.md
#include <cstddef>

#include "course/exercise.h"
#include "rmsnorm.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Where a row waits between its sum of squares and its write (the launcher picks by length):
//  - registers: each thread keeps kCachedFloats of the row, so a warp holds a row of up to 512
//    floats (kRegisterBlock / 32 rows per block) and a block of kRegisterBlock threads one of up
//    to 4096;
//  - shared memory: one block of kStagedBlock threads per row stages it in dynamic shared memory;
//  - nowhere: a row longer than that is read a second time.
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas squeezed the float4 kernel into 32 registers and spilled to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
constexpr int kStagedBlock = 1024;
// Loads a thread issues before it uses the first (64 KB in flight per SM for float4s).
constexpr int kLoadsInFlight = 4;

// All terms are >= 0: no cancellation, a plain float sum is accurate.
__device__ float squares_of(float v) { return v * v; }
__device__ float squares_of(float4 v) { return (v.x * v.x + v.y * v.y) + (v.z * v.z + v.w * v.w); }

// 1 / sqrt(mean of the squares + eps): eps inside the square root, as in Llama.
__device__ float rms_scale(float sum_of_squares, int cols) {
    return rsqrtf(sum_of_squares / cols + kRmsNormEps);
}

// y for a vector of x and the same columns of the weight.
__device__ float normalize(float x, float weight, float scale) { return x * scale * weight; }
__device__ float4 normalize(float4 x, float4 weight, float scale) {
    return make_float4(x.x * scale * weight.x, x.y * scale * weight.y, x.z * scale * weight.z,
                       x.w * scale * weight.w);
}

// Butterfly: after 5 steps every lane holds the sum of the 32 lanes' values.
__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}

// Sum over the kGroup threads of a row (a warp, or a whole block of kGroup threads), returned to
// each of them. A block: lane 0 of each warp posts its warp's sum, and after the barrier every
// warp adds the posted sums itself (the same additions in the same order: the same total
// everywhere). Called once per block.
template <int kGroup>
__device__ float group_sum(float value) {
    value = warp_sum(value);
    if constexpr (kGroup > 32) {
        constexpr int kWarps = kGroup / 32;
        __shared__ float warp_sums[kWarps];
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        if (lane == 0) warp_sums[warp] = value;
        __syncthreads();  // every warp's sum is posted before anyone reads them
        value = warp_sum(lane < kWarps ? warp_sums[lane] : 0.0f);
    }
    return value;
}

// Rows of up to kGroup * kCachedFloats floats, held in registers. kGroup threads per row: 32 (a
// warp; kRegisterBlock / 32 rows per block) or kRegisterBlock (the block). Thread `lane` keeps
// vectors lane, lane + kGroup, lane + 2 * kGroup, ...: at each step the group reads kGroup
// consecutive vectors (coalesced). Vec is float4 when every row starts 16-byte aligned, else
// float; the row is then cols / (floats per Vec) vectors, with no tail.
template <class Vec, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock, kMinRegisterBlocksPerSm)
    rmsnorm_in_registers(const float* __restrict__ x, const float* __restrict__ weight,
                         float* __restrict__ y, int rows, int cols) {
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    constexpr int kVecsPerThread = kCachedFloats / kFloatsPerVec;
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int lane = threadIdx.x % kGroup;
    // Only a warp-wide group can be past the last row, and it leaves as a whole (a block-wide
    // group always has its row: the grid is exactly rows blocks, and no thread skips the barrier).
    if (row >= rows) return;
    // 64-bit offset: rows * cols can pass 2^31.
    const std::size_t offset = static_cast<std::size_t>(row) * cols;
    const Vec* x_row = reinterpret_cast<const Vec*>(x + offset);
    Vec* y_row = reinterpret_cast<Vec*>(y + offset);
    const Vec* w = reinterpret_cast<const Vec*>(weight);
    const int vecs = cols / kFloatsPerVec;

    // The only read of the row: the loads are independent, so all of them are in flight
    // together. Fully unrolled loops make every index into `cache` a compile-time constant, which
    // is what lets the array live in registers. Slots past the end of the row are not loaded, and
    // stay out of the sum and the write.
    Vec cache[kVecsPerThread];
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = lane + kGroup * j;
        if (k < vecs) cache[j] = x_row[k];
    }
    float squares = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j)
        if (lane + kGroup * j < vecs) squares += squares_of(cache[j]);
    const float scale = rms_scale(group_sum<kGroup>(squares), cols);

    // The write, from the registers. The weight is read by every row: it comes from L1 or L2.
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = lane + kGroup * j;
        if (k < vecs) y_row[k] = normalize(cache[j], w[k], scale);
    }
}

// Longer rows, one block of kStagedBlock threads per row. `staged`: the row fits in the block's
// dynamic shared memory, and the write reads it there; otherwise (a row too long even for that)
// the write reads x a second time. Thread t walks vectors t, t + kStagedBlock, ...: coalesced.
template <class Vec>
__global__ void __launch_bounds__(kStagedBlock)
    rmsnorm_staged(const float* __restrict__ x, const float* __restrict__ weight,
                   float* __restrict__ y, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    const std::size_t row = blockIdx.x;
    const Vec* x_row = reinterpret_cast<const Vec*>(x + row * cols);  // 64-bit offset
    Vec* y_row = reinterpret_cast<Vec*>(y + row * cols);
    const Vec* w = reinterpret_cast<const Vec*>(weight);
    const int vecs = cols / static_cast<int>(sizeof(Vec) / sizeof(float));

    // Pass 1, the read of device memory, in rounds of kLoadsInFlight loads per thread: the loads
    // of a round are independent, so all of them are in flight together. Each vector is parked in
    // the stage and its squares added to the thread's sum. A thread later reads back exactly the
    // slots it wrote itself, so the stage needs no barrier.
    float squares = 0.0f;
    for (int first = threadIdx.x; first < vecs; first += kLoadsInFlight * kStagedBlock) {
        Vec batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kStagedBlock * j;
            if (k < vecs) batch[j] = x_row[k];
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kStagedBlock * j;
            if (k < vecs) {
                if (staged) stage[k] = batch[j];
                squares += squares_of(batch[j]);
            }
        }
    }
    const float scale = rms_scale(group_sum<kStagedBlock>(squares), cols);

    // Pass 2: the same vectors, from the stage (or from x again), scaled and written.
#pragma unroll 4
    for (int k = threadIdx.x; k < vecs; k += kStagedBlock)
        y_row[k] = normalize(staged ? stage[k] : x_row[k], w[k], scale);
}

template <class Vec>
void launch(const float* x, const float* weight, float* y, int rows, int cols) {
    if (cols <= 32 * kCachedFloats) {
        // Up to 512 floats: a warp per row, in registers.
        constexpr int kRowsPerBlock = kRegisterBlock / 32;
        rmsnorm_in_registers<Vec, 32>
            <<<course::ceil_div(rows, kRowsPerBlock), kRegisterBlock>>>(x, weight, y, rows, cols);
    } else if (cols <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 floats: a block per row, in registers (16 KB: several rows per SM).
        rmsnorm_in_registers<Vec, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(x, weight, y, rows, cols);
    } else {
        // Longer: staged in shared memory where the block's opt-in allows (asked once per kernel).
        static const std::size_t capacity = course::opt_in_shared_bytes(rmsnorm_staged<Vec>);
        const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
        const bool staged = row_bytes <= capacity;
        rmsnorm_staged<Vec>
            <<<rows, kStagedBlock, staged ? row_bytes : 0>>>(x, weight, y, cols, staged);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float* y, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: cols % 4 == 0 and aligned pointers.
    if (cols % 4 == 0 && course::is_aligned(x, 16) && course::is_aligned(y, 16) &&
        course::is_aligned(weight, 16))
        launch<float4>(x, weight, y, rows, cols);
    else
        launch<float>(x, weight, y, rows, cols);
}
