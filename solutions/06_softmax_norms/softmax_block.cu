// 06_softmax_norms/softmax_block: softmax with a warp or a block per row, the row kept on chip.
// Reference solution (the readable one; softmax_block_fast.cu adds what the long rows' target
// needs).
//
// Teaches: giving a row to a group of threads so that loads are coalesced, reducing the group's
// partial maxima and sums with warp shuffles and a small shared array, float4 loads where the
// alignment allows them, and holding the row on chip (in registers, or in the block's shared
// memory when it is too long for registers) so that device memory reads each row exactly once.
//
// Run:  grader run 06/softmax_block --solutions
// Contract: softmax_block.h            Notes:  notes/06_softmax_norms.md
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "softmax_block.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
// Where a row waits between its reductions and the write (the launcher picks by length):
//  - registers: a warp holds a row of up to 1024 floats (32 per lane; kRegisterBlock / 32 rows
//    per block), a block of kRegisterBlock threads one of up to 4096 (kCachedFloats each);
//  - shared memory: one block of kStagedBlock threads per row stages it in dynamic shared memory
//    (a 50304-float row is 201 KB; an H100 block may have 227 KB);
//  - nowhere: a row longer than that is read three times.
constexpr int kRegisterBlock = 256;
constexpr int kCachedFloats = 16;
constexpr int kStagedBlock = 1024;
constexpr int kLoadsInFlight = 4;  // loads a staging thread issues before it uses the first

// What each pass does to one vector: a float, or a float4 holding 4 consecutive columns.
__device__ float max_of(float v) { return v; }
__device__ float max_of(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ float sum_of(float v) { return v; }
__device__ float sum_of(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ float exp_minus(float v, float row_max) { return expf(v - row_max); }
__device__ float4 exp_minus(float4 v, float row_max) {
    return make_float4(expf(v.x - row_max), expf(v.y - row_max), expf(v.z - row_max),
                       expf(v.w - row_max));
}
__device__ float times(float v, float factor) { return v * factor; }
__device__ float4 times(float4 v, float factor) {
    return make_float4(v.x * factor, v.y * factor, v.z * factor, v.w * factor);
}

struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};

// Butterfly: after the step with offset o, each lane holds the combination of its value and
// the one o lanes away, so after 16, 8, 4, 2, 1 every lane holds the whole warp's result.
template <class Op>
__device__ float warp_reduce(float v, Op op) {
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(kFullMask, v, offset));
    return v;
}

// Combines one value per thread of a row's group of kGroup threads. A warp (kGroup == 32) needs
// shuffles only. A block adds one round through shared memory: lane 0 of each warp posts its
// warp's result, and after the barrier every warp reduces the kGroup / 32 posted values itself,
// so every thread gets the result without a second broadcast. `partials` must not be reused by
// a later reduction of the same row: a fast warp would post its sum over a maximum that a slow
// warp has not read yet. The kernels give the max and the sum an array each.
template <int kGroup, class Op>
__device__ float row_reduce(float v, Op op, float identity, float* partials) {
    v = warp_reduce(v, op);
    if constexpr (kGroup == 32) {
        return v;
    } else {
        constexpr int kWarps = kGroup / 32;
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        if (lane == 0) partials[warp] = v;
        __syncthreads();  // every warp's partial is posted before anyone reads them
        return warp_reduce(lane < kWarps ? partials[lane] : identity, op);
    }
}

// ---- Rows held in registers: up to 1024 columns with a warp per row, 4096 with a block ----

// kGroup threads per row: 32 (a warp; kRegisterBlock / 32 rows per block) or kRegisterBlock
// (the whole block). Thread `member` of the group holds the row's vectors member, member +
// kGroup, ..., member + (kVecsPerThread - 1) * kGroup in cache[0..kVecsPerThread - 1]: at each j
// the group reads one contiguous, coalesced stretch of the row. Slots past the end of the row
// (k >= vecs) are never loaded, used or written. Every loop over j is unrolled, so each cache[j]
// is a fixed register (an array indexed at run time would live in local memory, which is device
// memory). Vec is float4 when every row starts 16-byte aligned (cols % 4 == 0 and aligned
// pointers), else float; vecs = cols / (floats per Vec) then covers the row exactly, no tail.
template <class Vec, int kVecsPerThread, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock)
    softmax_in_registers(const float* in, float* out, int rows, int cols) {
    __shared__ float max_partials[32], sum_partials[32];
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int member = threadIdx.x % kGroup;  // this thread's place in its row's group
    // Only whole warps leave (a group is at least a warp), so the shuffles of the others still
    // have all 32 lanes. A block group never leaves: the grid has exactly rows blocks then.
    if (row >= rows) return;

    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const int vecs = cols / kFloatsPerVec;
    const Vec* x = reinterpret_cast<const Vec*>(in + static_cast<std::size_t>(row) * cols);
    Vec* y = reinterpret_cast<Vec*>(out + static_cast<std::size_t>(row) * cols);

    // The only read of the row. The kVecsPerThread loads are independent, so all of them are in
    // flight at once (16 or 32 floats per thread), and the maximum is taken as they arrive.
    Vec cache[kVecsPerThread];
    float thread_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = member + j * kGroup;
        if (k < vecs) {
            cache[j] = x[k];
            thread_max = fmaxf(thread_max, max_of(cache[j]));
        }
    }
    const float row_max = row_reduce<kGroup>(thread_max, Max{}, -INFINITY, max_partials);

    // The exponentials replace the row in the registers: the write needs them, not the inputs.
    // The contract promises a finite entry per row, so row_max is finite and -inf entries give
    // expf(-inf) = 0; the row's largest entry gives exp(0) = 1, so the sum is at least 1.
    float thread_sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        if (member + j * kGroup < vecs) {
            cache[j] = exp_minus(cache[j], row_max);
            thread_sum += sum_of(cache[j]);
        }
    }
    const float row_sum = row_reduce<kGroup>(thread_sum, Sum{}, 0.0f, sum_partials);

    // One write pass, from the registers: a multiply by 1 / sum rather than a division each.
    const float inv_sum = 1.0f / row_sum;
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = member + j * kGroup;
        if (k < vecs) y[k] = times(cache[j], inv_sum);
    }
}

// ---- Longer rows: a block per row, the row staged in its shared memory ----

// With `staged`, pass 1 parks each vector it loads in the block's dynamic shared memory and
// passes 2 and 3 read it back from there; a thread reads back only the slots it wrote itself, so
// the stage needs no barrier of its own. Without `staged` (a row larger than a block's shared
// memory: more than 58048 floats on an H100, 41664 on an A100), passes 2 and 3 read device memory
// again. Thread t walks vectors t, t + kStagedBlock, ...: coalesced in every pass.
template <class Vec>
__global__ void __launch_bounds__(kStagedBlock)
    softmax_in_shared(const float* in, float* out, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ float max_partials[32], sum_partials[32];
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const int vecs = cols / kFloatsPerVec;
    const Vec* x = reinterpret_cast<const Vec*>(in + static_cast<std::size_t>(blockIdx.x) * cols);
    Vec* y = reinterpret_cast<Vec*>(out + static_cast<std::size_t>(blockIdx.x) * cols);
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);

    // Pass 1, the read of device memory, in rounds of kLoadsInFlight vectors per thread: the
    // loads of a round are independent and each has its own guard, so all of them are in flight
    // together, even in the last, partial round. Each vector is parked in the stage and folded
    // into the maximum as it arrives.
    float thread_max = -INFINITY;
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
                thread_max = fmaxf(thread_max, max_of(batch[u]));
            }
        }
    }
    const float row_max = row_reduce<kStagedBlock>(thread_max, Max{}, -INFINITY, max_partials);

    // Pass 2, from the stage: the sum of exponentials.
    float thread_sum = 0.0f;
#pragma unroll 4
    for (int k = threadIdx.x; k < vecs; k += kStagedBlock)
        thread_sum += sum_of(exp_minus(staged ? stage[k] : x[k], row_max));
    const float row_sum = row_reduce<kStagedBlock>(thread_sum, Sum{}, 0.0f, sum_partials);

    // Pass 3, from the stage: the exponentials again, and the write. (Storing them in pass 2
    // instead would not make pass 2 any shorter, and a stage that stays a copy of the input lets
    // the unstaged fallback run the same code on the input itself.)
    const float inv_sum = 1.0f / row_sum;
#pragma unroll 4
    for (int k = threadIdx.x; k < vecs; k += kStagedBlock)
        y[k] = times(exp_minus(staged ? stage[k] : x[k], row_max), inv_sum);
}

// ---- The launcher: the row's length picks where it is kept ----

// Rows of up to kGroup * kFloatsPerThread floats in registers, kGroup threads per row.
template <class Vec, int kFloatsPerThread, int kGroup>
void launch_in_registers(const float* in, float* out, int rows, int cols) {
    constexpr int kVecsPerThread = kFloatsPerThread / (sizeof(Vec) / sizeof(float));
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
    softmax_in_registers<Vec, kVecsPerThread, kGroup>
        <<<course::ceil_div(rows, kRowsPerBlock), kRegisterBlock>>>(in, out, rows, cols);
}

// Registers first: the 64K registers of an SM are 256 KB, more than its shared memory, and
// several rows then share an SM, so one row's barriers hide behind another's loads. A warp with
// 32 floats per lane takes rows up to 1024 columns, a block with kCachedFloats per thread up to
// 4096; longer rows go to one block's shared memory (opted into once per kernel).
template <class Vec>
void launch(const float* in, float* out, int rows, int cols) {
    if (cols <= 32 * 32) {
        launch_in_registers<Vec, 32, 32>(in, out, rows, cols);
    } else if (cols <= kRegisterBlock * kCachedFloats) {
        launch_in_registers<Vec, kCachedFloats, kRegisterBlock>(in, out, rows, cols);
    } else {
        static const std::size_t capacity = course::opt_in_shared_bytes(softmax_in_shared<Vec>);
        const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
        const bool staged = row_bytes <= capacity;
        softmax_in_shared<Vec>
            <<<rows, kStagedBlock, staged ? row_bytes : 0>>>(in, out, cols, staged);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void softmax_block(const float* in, float* out, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: the base pointers must be, and a row
    // of cols floats must be a whole number of float4s.
    if (cols % 4 == 0 && course::is_aligned(in, 16) && course::is_aligned(out, 16))
        launch<float4>(in, out, rows, cols);
    else
        launch<float>(in, out, rows, cols);
}
