// 06_softmax_norms/softmax_block: softmax with a warp or a block per row, the row kept on chip.
// Reference solution.
//
// Teaches: giving a row to a group of threads so that loads are coalesced, reducing the group's
// partial maxima and sums with warp shuffles and a small shared array, float4 loads where the
// alignment allows them, and holding the row on chip (in registers, or in shared memory when it
// is too long for registers: on Hopper the shared memory of a cluster of blocks) so that device
// memory reads each row exactly once.
//
// Run:  grader run 06/softmax_block --solutions
// Contract: softmax_block.h            Notes:  notes/06_softmax_norms.md
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "softmax_block.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpRowsBlock = 256;  // short rows: a warp per row, 8 rows per block of 256 threads
constexpr int kClusterBlock = 512;   // rows in shared memory on Hopper: a cluster of blocks of 512
constexpr std::size_t kSliceBytes = 100 * 1024;  // ... each with up to 100 KB, 2 blocks per SM
constexpr int kStageThreads = 1024;  // before Hopper: a block of 1024 threads per row
constexpr int kLoadsInFlight = 4;    // ... whose threads load 4 vectors each at a time

// What each pass does to one vector: a float, or a float4 holding 4 consecutive columns.
__device__ float max_of(float v) { return v; }
__device__ float max_of(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ float sum_of(float v) { return v; }
__device__ float sum_of(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ float exp_minus(float v, float row_max) { return expf(v - row_max); }
__device__ float4 exp_minus(float4 v, float row_max) {
    return make_float4(expf(v.x - row_max), expf(v.y - row_max), expf(v.z - row_max), expf(v.w - row_max));
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
    static_assert(kGroup % 32 == 0 && kGroup >= 32 && kGroup <= 1024, "a group is 1 to 32 whole warps");
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

// ---- Rows held in registers: up to 1024 columns with a warp per row, 16384 with a block ----

// kGroup threads per row: 32 (a warp; kBlock / 32 rows per block) or kBlock (the whole block).
// Thread `member` of the group holds the row's vectors member, member + kGroup, ...,
// member + (kVecsPerThread - 1) * kGroup in cache[0..kVecsPerThread - 1]: at each j the group
// reads one contiguous, coalesced stretch of the row. Slots past the end of the row (k >= vecs)
// are never loaded, used or written. Every loop over j is unrolled, so each cache[j] is a fixed
// register (an array indexed at run time would live in local memory, which is device memory).
// Vec is float4 when every row starts 16-byte aligned (cols % 4 == 0 and aligned pointers), else
// float; vecs = cols / (floats per Vec) then covers the row exactly, with no tail.
template <class Vec, int kVecsPerThread, int kGroup, int kBlock>
__global__ void __launch_bounds__(kBlock) softmax_in_registers(const float* in, float* out, int rows, int cols) {
    __shared__ float max_partials[32], sum_partials[32];
    constexpr int kRowsPerBlock = kBlock / kGroup;
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
    // flight at once (4 to 32 floats per thread), and the maximum is taken as they arrive.
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

// ---- Longer rows: the row held in shared memory ----

// Launched in clusters (Hopper), the blocks of a cluster share one row: each stages the slice
// course::cluster_slice gives it (a 50304-float row, 201 KB, takes 2 blocks of 100 KB; an SM holds
// 2 such blocks of different rows, so one row's barriers hide behind the other's loads), and the
// blocks merge their maxima and sums through distributed shared memory. Otherwise one block of
// kStageThreads holds the whole row (one row per SM). With `staged`, pass 1 parks each vector it
// loads in the block's dynamic shared memory and passes 2 and 3 read it back from there; a thread
// reads back only the slots it wrote itself, so the stage needs no barrier of its own. Without
// `staged` (a slice larger than a block's shared memory: more than 58048 floats on an H100 without
// clusters, 41664 on an A100), passes 2 and 3 read device memory again. Thread t walks vectors
// begin + t, begin + t + kBlock, ...: coalesced in every pass.
template <class Vec, int kBlock>
__global__ void __launch_bounds__(kBlock, kStageThreads / kBlock)
    softmax_in_shared(const float* in, float* out, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ float max_partials[32], sum_partials[32];
    __shared__ float block_max, block_sum;  // read by the other blocks of a cluster
    const unsigned slices = course::cluster_blocks();  // blocks per row: 1 without clusters
    const int row = static_cast<int>(blockIdx.x / slices);  // the grid has rows * slices blocks
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const Vec* x = reinterpret_cast<const Vec*>(in + static_cast<std::size_t>(row) * cols);
    Vec* y = reinterpret_cast<Vec*>(out + static_cast<std::size_t>(row) * cols);
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    // This block's vectors: shares rounded to 128 bytes (32 floats) so each starts on a line.
    const course::Slice slice =
        course::cluster_slice(cols / kFloatsPerVec, slices, course::cluster_rank(), 32 / kFloatsPerVec);

    // Pass 1, the read of device memory, in rounds of kLoadsInFlight vectors per thread: the
    // loads of a round are independent and each has its own guard, so all of them are in flight
    // together, even in the last, partial round. Each vector is parked in the stage and folded
    // into the maximum as it arrives.
    float thread_max = -INFINITY;
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
                thread_max = fmaxf(thread_max, max_of(v[u]));
            }
        }
    }
    float row_max = row_reduce<kBlock>(thread_max, Max{}, -INFINITY, max_partials);
    row_max = course::cluster_reduce(row_max, &block_max, Max{});  // the cluster's (course/cluster.h)

    // Pass 2, from the stage: the sum of exponentials.
    float thread_sum = 0.0f;
#pragma unroll 4
    for (int k = slice.begin + threadIdx.x; k < slice.end; k += kBlock)
        thread_sum += sum_of(exp_minus(staged ? stage[k - slice.begin] : x[k], row_max));
    float row_sum = row_reduce<kBlock>(thread_sum, Sum{}, 0.0f, sum_partials);
    row_sum = course::cluster_reduce(row_sum, &block_sum, Sum{});
    course::cluster_arrive();  // done reading the other blocks' maxima and sums

    // Pass 3, from the stage: the exponentials again, and the write. (Storing them in pass 2
    // instead would not make pass 2 any shorter, and a stage that stays a copy of the input lets
    // the unstaged fallback run the same code on the input itself.)
    // Unstaged, this is the row's last read: __ldcs marks its lines evict-first.
    const float inv_sum = 1.0f / row_sum;
#pragma unroll 4
    for (int k = slice.begin + threadIdx.x; k < slice.end; k += kBlock)
        y[k] = times(exp_minus(staged ? stage[k - slice.begin] : __ldcs(x + k), row_max), inv_sum);
    course::cluster_wait();  // the other blocks are done with our maximum and sum
}

// ---- Launchers: the row's length picks where it is kept ----

// Rows of up to kGroup * kFloatsPerThread floats in registers, kGroup threads per row.
template <class Vec, int kFloatsPerThread, int kGroup, int kBlock>
void launch_in_registers(const float* in, float* out, int rows, int cols) {
    constexpr int kVecsPerThread = kFloatsPerThread / (sizeof(Vec) / sizeof(float));
    constexpr int kRowsPerBlock = kBlock / kGroup;
    softmax_in_registers<Vec, kVecsPerThread, kGroup, kBlock>
        <<<course::ceil_div(rows, kRowsPerBlock), kBlock>>>(in, out, rows, cols);
    CUDA_CHECK_LAUNCH();
}

// A long row: in the shared memory of a cluster of blocks where `clusters` (Hopper), else of one
// block.
template <class Vec>
void launch_in_shared(const float* in, float* out, int rows, int cols, bool clusters) {
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
    const auto in_cluster = softmax_in_shared<Vec, kClusterBlock>;
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
    const auto one_block = softmax_in_shared<Vec, kStageThreads>;
    static const std::size_t capacity = course::opt_in_shared_bytes(one_block);
    const bool staged = row_bytes <= capacity;
    one_block<<<rows, kStageThreads, staged ? row_bytes : 0>>>(in, out, cols, staged);
    CUDA_CHECK_LAUNCH();
}

// Registers first: the 64K registers of an SM are 256 KB, more than its shared memory, and
// several rows then share an SM, so one row's barriers hide behind another's loads. Each
// configuration holds up to group * floats-per-thread columns: a warp with 4 or 32 floats per
// lane (128, 1024), a block of 256 threads with 16 floats each (4096). Shared memory takes the
// longer rows: on Hopper split over a cluster of blocks; before it, a block of 1024 threads with
// 16 floats each in registers first (16384, one row per SM), then one block's shared memory.
template <class Vec>
void launch_for_row_length(const float* in, float* out, int rows, int cols) {
    static const bool clusters = course::clusters_available(softmax_in_shared<Vec, kClusterBlock>);
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

void softmax_block(const float* in, float* out, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: the base pointers must be, and a row
    // of cols floats must be a whole number of float4s.
    if (cols % 4 == 0 && course::is_aligned(in, 16) && course::is_aligned(out, 16))
        launch_for_row_length<float4>(in, out, rows, cols);
    else
        launch_for_row_length<float>(in, out, rows, cols);
}
