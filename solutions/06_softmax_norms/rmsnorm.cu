// 06_softmax_norms/rmsnorm: RMSNorm (Llama), one block (or warp) per row. Reference solution.
//
// Teaches: a block-wide sum reduction (warp shuffles, then shared memory across warps), float4
// loads and stores, keeping the row on chip (in registers, or in shared memory when it is long:
// on Hopper the shared memory of a cluster of blocks) between the sum and the write so that
// device memory reads x once, and why RMSNorm needs no Welford: a sum of squares has no
// cancellation. Memory-bound: the checker reports the
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
//  - registers: each thread keeps kCachedFloats of the row (4 float4 or 16 floats), so a warp
//    holds a row of up to 512 floats (kRegisterBlock / 32 rows per block) and a block of
//    kRegisterBlock threads one of up to 4096;
//  - shared memory: longer rows are staged in dynamic shared memory. On Hopper a row is split over
//    a cluster of blocks of kClusterBlock threads, each staging a slice of up to kSliceBytes, and
//    the blocks add their sums through distributed shared memory: a 50304-float row (201 KB)
//    takes 2 blocks, and an SM holds 2 blocks of different rows, so one row's reduction hides
//    behind the other's loads. Before Hopper one block of kStagedBlock threads stages the whole
//    row (up to 163 KB on an A100): one row per SM;
//  - nowhere: a row longer than that is read a second time.
// Either way a thread has several 16-byte loads in flight (kCachedFloats / 4 or kLoadsInFlight).
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas squeezed the float4 kernel into 32 registers and spilled to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
constexpr int kClusterBlock = 512;
constexpr std::size_t kSliceBytes = 100 * 1024;  // 2 slices per SM in its 227 KB
constexpr int kStagedBlock = 1024;
constexpr int kLoadsInFlight = 4;

// kWidth consecutive floats: one 16-byte float4 access when kWidth is 4, else a single float.
// (Aligned to its size, so that a pack copied to or from shared memory is one access too.)
template <int kWidth>
struct alignas(kWidth * sizeof(float)) Pack {
    float v[kWidth];
};

template <int kWidth>
__device__ Pack<kWidth> load_pack(const float* p) {
    if constexpr (kWidth == 4) {
        const float4 q = *reinterpret_cast<const float4*>(p);
        return {{q.x, q.y, q.z, q.w}};
    } else {
        return {{*p}};
    }
}

// A second and last read of x, for rows too long for shared memory: __ldcs ("cache streaming")
// marks the lines evict-first in L1 and L2, so that L2 gives up lines that are finished with
// rather than those other rows still have to re-read.
template <int kWidth>
__device__ Pack<kWidth> load_pack_last_use(const float* p) {
    if constexpr (kWidth == 4) {
        const float4 q = __ldcs(reinterpret_cast<const float4*>(p));
        return {{q.x, q.y, q.z, q.w}};
    } else {
        return {{__ldcs(p)}};
    }
}

template <int kWidth>
__device__ void store_pack(float* p, const Pack<kWidth>& pack) {
    if constexpr (kWidth == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(pack.v[0], pack.v[1], pack.v[2], pack.v[3]);
    } else {
        *p = pack.v[0];
    }
}

// All terms are >= 0: no cancellation, a plain float sum is accurate.
template <int kWidth>
__device__ float squares_of(const Pack<kWidth>& pack) {
    float sum = 0.0f;
    for (int k = 0; k < kWidth; ++k) sum += pack.v[k] * pack.v[k];
    return sum;
}

// 1 / sqrt(mean of the squares + eps): eps inside the square root, as in Llama.
__device__ float rms_scale(float sum_of_squares, int cols) {
    return rsqrtf(sum_of_squares / cols + kRmsNormEps);
}

// y for a pack of x and the same columns of the weight.
template <int kWidth>
__device__ Pack<kWidth> normalize(const Pack<kWidth>& in, const Pack<kWidth>& w, float scale) {
    Pack<kWidth> out;
    for (int k = 0; k < kWidth; ++k) out.v[k] = in.v[k] * scale * w.v[k];
    return out;
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
// packs lane, lane + kGroup, lane + 2 * kGroup, ...: at each step the group reads kGroup
// consecutive packs (coalesced). kWidth divides cols, so every row starts aligned for packs.
template <int kWidth, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock, kMinRegisterBlocksPerSm)
    rmsnorm_in_registers(const float* __restrict__ x, const float* __restrict__ weight,
                         float* __restrict__ y, int rows, int cols) {
    constexpr int kPacks = kCachedFloats / kWidth;  // per thread
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int lane = threadIdx.x % kGroup;
    // Only a warp-wide group can be past the last row, and it leaves as a whole (a block-wide
    // group always has its row: the grid is exactly rows blocks, and no thread skips the barrier).
    if (row >= rows) return;
    // 64-bit offset: rows * cols can pass 2^31.
    const std::size_t offset = static_cast<std::size_t>(row) * cols;
    const float* x_row = x + offset;
    float* y_row = y + offset;
    const int packs = cols / kWidth;

    // The only read of the row: the kPacks loads are independent, so all of them are in flight
    // together. Fully unrolled loops make every index into `cache` a compile-time constant, which
    // is what lets the array live in registers. Slots past the end of the row are not loaded, and
    // stay out of the sum and the write.
    Pack<kWidth> cache[kPacks];
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
        const int p = lane + kGroup * j;
        if (p < packs) cache[j] = load_pack<kWidth>(x_row + p * kWidth);
    }
    float squares = 0.0f;
#pragma unroll
    for (int j = 0; j < kPacks; ++j)
        if (lane + kGroup * j < packs) squares += squares_of(cache[j]);
    const float scale = rms_scale(group_sum<kGroup>(squares), cols);

    // The write, from the registers. The weight is read by every row: it comes from L1 or L2.
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
        const int p = lane + kGroup * j;
        if (p < packs)
            store_pack(y_row + p * kWidth,
                       normalize(cache[j], load_pack<kWidth>(weight + p * kWidth), scale));
    }
}

// Longer rows, staged in shared memory. Launched in clusters (Hopper), the blocks of a cluster
// share one row, each staging the slice course::cluster_slice gives it; otherwise one block holds
// the whole row. `staged`: the slice fits in the block's dynamic shared memory, and the write
// reads it there; otherwise (a row too long even for that) the write reads x a second time.
template <int kWidth, int kBlock>
__global__ void __launch_bounds__(kBlock, kStagedBlock / kBlock)
    rmsnorm_staged(const float* __restrict__ x, const float* __restrict__ weight,
                   float* __restrict__ y, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ float block_squares;  // read by the other blocks of the cluster
    Pack<kWidth>* stage = reinterpret_cast<Pack<kWidth>*>(stage_bytes);
    const unsigned slices = course::cluster_blocks();  // blocks per row: 1 without clusters
    const std::size_t row = blockIdx.x / slices;
    const float* x_row = x + row * cols;  // 64-bit offset: rows * cols can pass 2^31
    float* y_row = y + row * cols;
    // This block's packs: shares rounded to 128 bytes (32 floats) so each starts on a line.
    const course::Slice slice =
        course::cluster_slice(cols / kWidth, slices, course::cluster_rank(), 32 / kWidth);

    // Pass 1: thread t reads packs begin + t, begin + t + kBlock, ... (coalesced), kLoadsInFlight
    // of them issued before the first is used. Each is parked in shared memory and its squares
    // added to the thread's sum. A thread later reads back exactly the slots it wrote itself, so
    // the stage needs no barrier.
    float squares = 0.0f;
    for (int first = slice.begin + threadIdx.x; first < slice.end; first += kLoadsInFlight * kBlock) {
        Pack<kWidth> batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) batch[j] = load_pack<kWidth>(x_row + p * kWidth);
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) {
                if (staged) stage[p - slice.begin] = batch[j];
                squares += squares_of(batch[j]);
            }
        }
    }
    squares = group_sum<kBlock>(squares);
    // In a cluster, the blocks' sums are added too (course/cluster.h).
    squares = course::cluster_reduce(squares, &block_squares, [](float a, float b) { return a + b; });
    course::cluster_arrive();  // done reading the other blocks' sums
    const float scale = rms_scale(squares, cols);

    // Pass 2: the same packs, from shared memory (or from a last read of x), in batches again so
    // that the weight's loads (from L2) are in flight together.
    for (int first = slice.begin + threadIdx.x; first < slice.end; first += kLoadsInFlight * kBlock) {
        Pack<kWidth> in[kLoadsInFlight], w[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) {
                in[j] = staged ? stage[p - slice.begin] : load_pack_last_use<kWidth>(x_row + p * kWidth);
                w[j] = load_pack<kWidth>(weight + p * kWidth);
            }
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) store_pack(y_row + p * kWidth, normalize(in[j], w[j], scale));
        }
    }
    course::cluster_wait();  // the other blocks are done with our sum
}

// A long row: in the shared memory of a cluster of blocks on Hopper, else of one block.
template <int kWidth>
void launch_staged(const float* x, const float* weight, float* y, int rows, int cols) {
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
    const auto in_cluster = rmsnorm_staged<kWidth, kClusterBlock>;
    static const bool clusters = course::clusters_available(in_cluster);
    static const std::size_t cluster_capacity = course::opt_in_shared_bytes(in_cluster);
    const int slices = static_cast<int>(course::ceil_div(row_bytes, kSliceBytes));
    if (clusters && slices <= static_cast<int>(course::kMaxClusterBlocks)) {
        // The first slice is the longest (at most kSliceBytes).
        const course::Slice first = course::cluster_slice(cols / kWidth, slices, 0, 32 / kWidth);
        const std::size_t slice_bytes = (first.end - first.begin) * sizeof(Pack<kWidth>);
        course::launch_in_clusters(in_cluster, rows * slices, kClusterBlock, slices, slice_bytes,
                                   x, weight, y, cols, slice_bytes <= cluster_capacity);
        return;
    }
    const auto one_block = rmsnorm_staged<kWidth, kStagedBlock>;
    static const std::size_t capacity = course::opt_in_shared_bytes(one_block);
    const bool staged = row_bytes <= capacity;
    one_block<<<rows, kStagedBlock, staged ? row_bytes : 0>>>(x, weight, y, cols, staged);
    CUDA_CHECK_LAUNCH();
}

template <int kWidth>
void launch(const float* x, const float* weight, float* y, int rows, int cols) {
    if (cols <= 32 * kCachedFloats) {
        // Up to 512 floats: a warp per row, in registers.
        constexpr int kRowsPerBlock = kRegisterBlock / 32;
        rmsnorm_in_registers<kWidth, 32>
            <<<course::ceil_div(rows, kRowsPerBlock), kRegisterBlock>>>(x, weight, y, rows, cols);
        CUDA_CHECK_LAUNCH();
    } else if (cols <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 floats: a block per row, in registers (16 KB: several rows per SM).
        rmsnorm_in_registers<kWidth, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(x, weight, y, rows, cols);
        CUDA_CHECK_LAUNCH();
    } else {
        launch_staged<kWidth>(x, weight, y, rows, cols);
    }
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float* y, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: cols % 4 == 0 and aligned pointers.
    if (cols % 4 == 0 && course::is_aligned(x, 16) && course::is_aligned(y, 16) &&
        course::is_aligned(weight, 16))
        launch<4>(x, weight, y, rows, cols);
    else
        launch<1>(x, weight, y, rows, cols);
}
