// 06_softmax_norms/layernorm_fast: LayerNorm forward, tuned for rows too long for registers.
// Fast reference: the readable solution (layernorm.cu, included below) plus what the target at
// 4096 x 50304 needs on Hopper.
//
// Teaches: splitting a long row over a thread block cluster, each block keeping its slice of the
// row partly in registers and partly in shared memory, so that an SM holds slices of three rows
// and one row's reductions and parameter reads hide behind the others' loads. Short rows, and
// GPUs without clusters, take the readable solution's path. The module README compares the two.
// Beyond the exercise, layernorm_bf16 (layernorm_bf16.h): the same LayerNorm of the GPT trainer's
// bf16 rows, a warp per row and 16 bytes (8 values) per access, so that the trainer's bf16 mode
// needs no float copies around it.
//
// Run:  grader run 06/layernorm --solutions       (the "layernorm (fast)" row)
// Contract: layernorm.h, layernorm_bf16.h   Notes:  notes/06_softmax_norms.md,
// dev/tuning/06_softmax_norms.md
#include <cstddef>

#include <cuda_bf16.h>

#include "course/activation.h"
#include "course/exercise.h"
#include "course/row_tiers.h"
#include "course/vec.h"
#include "layernorm.h"
#include "layernorm_bf16.h"

// The readable solution, whole: its Welford merge, reductions and short-row kernels serve here
// too, and readable::layernorm runs every row this file does not take. (Every header it includes
// is included above, so that none of them lands inside the namespace.)
namespace readable {
#include "layernorm.cu"
}  // namespace readable

namespace {

using readable::Welford;

// A 100 KB slice of a row per block, 3 blocks of 384 threads per SM: each thread holds kHeldVecs
// float4s of its block's slice in registers (30 KB per block) and the rest goes to shared memory
// (70 KB; 3 x 70 KB fit the 227 KB of an H100 SM). A 50304-float row takes a cluster of 2.
// dev/tuning/06_softmax_norms.md has the layouts measured against this one.
constexpr std::size_t kSliceBytes = 100 * 1024;
constexpr int kClusterBlock = 384;
constexpr int kClusterBlocksPerSm = 3;
constexpr int kHeldVecs = 5;
// Loads of the staged part in flight per thread (the held vectors are in flight already), and
// output vectors written per round (each needs x from the stage and gamma, beta from L2).
constexpr int kLoadsInFlight = 3;
constexpr int kWritesInFlight = 3;

// One block's slice of a row. Thread t holds vectors begin + t + kClusterBlock * j (j <
// kHeldVecs) in registers; the vectors from stage_begin on are staged in shared memory (stage[0]
// is vector stage_begin). The blocks' Welford states merge through distributed shared memory.
template <class Vec>
__global__ void __launch_bounds__(kClusterBlock, kClusterBlocksPerSm)
    layernorm_in_cluster(const float* __restrict__ x, const float* __restrict__ gamma,
                         const float* __restrict__ beta, float* __restrict__ y,
                         float* __restrict__ mean, float* __restrict__ rstd, int cols) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ Welford block_state;  // read by the other blocks of the cluster
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    const unsigned slices = course::cluster_blocks();
    const unsigned rank = course::cluster_rank();
    const std::size_t row = blockIdx.x / slices;
    const Vec* x_row = reinterpret_cast<const Vec*>(x + row * cols);  // 64-bit offset
    Vec* y_row = reinterpret_cast<Vec*>(y + row * cols);
    const Vec* scale = reinterpret_cast<const Vec*>(gamma);
    const Vec* shift = reinterpret_cast<const Vec*>(beta);
    const course::Slice slice =
        course::cluster_slice(cols / course::kFloatsPerVec<Vec>, slices, rank,
                              static_cast<int>(course::kSliceAlign / sizeof(Vec)));
    const int stage_begin = min(slice.begin + kHeldVecs * kClusterBlock, slice.end);
    const int held_first = slice.begin + threadIdx.x;

    // Pass 1: the held vectors are loaded first, all at once; meanwhile the staged ones arrive in
    // batches, each parked in shared memory and merged into the thread's state. The held vectors,
    // arrived by then, are merged last. A thread reads back only the slots it wrote itself, so
    // the stage needs no barrier.
    Vec held[kHeldVecs];
    course::load_batch<kClusterBlock>(held, x_row, held_first, slice.end);
    Welford state{0.0f, 0.0f, 0.0f};
    for (int first = stage_begin + threadIdx.x; first < slice.end;
         first += kLoadsInFlight * kClusterBlock) {
        Vec batch[kLoadsInFlight];
        course::load_batch<kClusterBlock>(batch, x_row, first, slice.end);
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kClusterBlock * j;
            if (k < slice.end) {
                stage[k - stage_begin] = batch[j];
                state = readable::welford_merge(state, readable::welford_of(batch[j]));
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kHeldVecs; ++j)
        if (held_first + kClusterBlock * j < slice.end)
            state = readable::welford_merge(state, readable::welford_of(held[j]));
    Welford row_state = readable::group_merge<kClusterBlock>(state);
    row_state = course::cluster_reduce(row_state, &block_state, [](Welford a, Welford b) {
        return readable::welford_merge(a, b);
    });
    course::cluster_arrive();  // done reading the other blocks' states
    const float row_rstd = readable::rstd_of(row_state, cols);
    if (threadIdx.x == 0 && rank == 0) {
        mean[row] = row_state.mean;
        rstd[row] = row_rstd;
    }

    // Pass 2: the held vectors, then the staged ones in rounds, so that the loads of gamma and
    // beta (from L2) are in flight together. __stcs: y is not read again, so its lines give way
    // in L2 before gamma and beta, which the next rows read.
#pragma unroll
    for (int j = 0; j < kHeldVecs; ++j) {
        const int k = held_first + kClusterBlock * j;
        if (k < slice.end)
            __stcs(y_row + k,
                   readable::normalize(held[j], scale[k], shift[k], row_state.mean, row_rstd));
    }
    for (int first = stage_begin + threadIdx.x; first < slice.end;
         first += kWritesInFlight * kClusterBlock) {
        Vec in[kWritesInFlight], scales[kWritesInFlight], shifts[kWritesInFlight];
#pragma unroll
        for (int j = 0; j < kWritesInFlight; ++j) {
            const int k = first + kClusterBlock * j;
            if (k < slice.end) {
                in[j] = stage[k - stage_begin];
                scales[j] = scale[k];
                shifts[j] = shift[k];
            }
        }
#pragma unroll
        for (int j = 0; j < kWritesInFlight; ++j) {
            const int k = first + kClusterBlock * j;
            if (k < slice.end)
                __stcs(y_row + k,
                       readable::normalize(in[j], scales[j], shifts[j], row_state.mean, row_rstd));
        }
    }
    course::cluster_wait();  // the other blocks are done with our state
}

template <class Vec>
bool launch_in_clusters(const float* x, const float* gamma, const float* beta, float* y,
                        float* mean, float* rstd, int rows, int cols) {
    return course::launch_split_rows<layernorm_in_cluster<Vec>>(
        rows, cols / course::kFloatsPerVec<Vec>, sizeof(Vec), kClusterBlock, kHeldVecs, kSliceBytes,
        x, gamma, beta, y, mean, rstd, cols);
}

}  // namespace

void layernorm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
               float* rstd, int rows, int cols) {
    // Rows the readable solution would stage in one block's shared memory go to a cluster, where
    // this GPU has them; everything else is the readable solution's.
    const bool long_rows = cols > readable::kRegisterBlock * readable::kCachedFloats;
    const bool vec4 = cols % 4 == 0 && course::is_aligned(x, 16) && course::is_aligned(y, 16) &&
                      course::is_aligned(gamma, 16) && course::is_aligned(beta, 16);
    if (long_rows && (vec4 ? launch_in_clusters<float4>(x, gamma, beta, y, mean, rstd, rows, cols)
                           : launch_in_clusters<float>(x, gamma, beta, y, mean, rstd, rows, cols)))
        return;
    readable::layernorm(x, gamma, beta, y, mean, rstd, rows, cols);
}

// ---- layernorm_bf16 (layernorm_bf16.h): the trainer's bf16 rows ----

namespace {

using bf16 = __nv_bfloat16;
using course::from_float;
using course::to_float;

// A warp per row: GPT-2's rows are 768 values, 96 packs of 8, three per lane. The packs a lane
// loads first stay in registers between the statistics and the write (a row of up to
// 32 x kBf16HeldPacks packs: 1024 values); the rest of a longer row is read again, from L1 or L2.
constexpr int kBf16Block = 256;
constexpr int kBf16RowsPerBlock = kBf16Block / 32;
constexpr int kBf16HeldPacks = 4;

// kWidth bf16 values moved as one access: 8 (16 bytes) where every row starts on a 16-byte
// boundary, else 1.
template <int kWidth>
struct alignas(2 * kWidth) Bf16Pack {
    bf16 value[kWidth];
};

// The Welford state of one pack, computed directly; the pairwise sum keeps a pack of equal values
// exact, as readable::welford_of does for a float4.
__device__ Welford welford_of(const Bf16Pack<1>& pack) {
    return readable::welford_of(to_float(pack.value[0]));
}
__device__ Welford welford_of(const Bf16Pack<8>& pack) {
    float v[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = to_float(pack.value[k]);
    const float mean = (((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]))) * 0.125f;
    float m2 = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) m2 += (v[k] - mean) * (v[k] - mean);
    return {8.0f, mean, m2};
}

template <int kWidth>
__device__ Bf16Pack<kWidth> normalize(const Bf16Pack<kWidth>& x, const Bf16Pack<kWidth>& scale,
                                      const Bf16Pack<kWidth>& shift, float row_mean,
                                      float row_rstd) {
    Bf16Pack<kWidth> y;
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
        y.value[k] =
            from_float<bf16>(readable::normalize(to_float(x.value[k]), to_float(scale.value[k]),
                                                 to_float(shift.value[k]), row_mean, row_rstd));
    return y;
}

template <int kWidth>
__global__ void __launch_bounds__(kBf16Block)
    layernorm_bf16_rows(const bf16* __restrict__ x, const bf16* __restrict__ gamma,
                        const bf16* __restrict__ beta, bf16* __restrict__ y,
                        float* __restrict__ mean, float* __restrict__ rstd, int rows, int cols) {
    using Pack = Bf16Pack<kWidth>;
    const int row = blockIdx.x * kBf16RowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp: it shares the row
    const std::size_t offset = static_cast<std::size_t>(row) * cols;
    const Pack* x_row = reinterpret_cast<const Pack*>(x + offset);
    Pack* y_row = reinterpret_cast<Pack*>(y + offset);
    const Pack* scale = reinterpret_cast<const Pack*>(gamma);
    const Pack* shift = reinterpret_cast<const Pack*>(beta);
    const int packs = cols / kWidth;

    // The statistics: the held packs' loads all in flight first, then the rest of a long row.
    Pack held[kBf16HeldPacks];
#pragma unroll
    for (int j = 0; j < kBf16HeldPacks; ++j)
        if (lane + 32 * j < packs) held[j] = x_row[lane + 32 * j];
    Welford state{0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kBf16HeldPacks; ++j)
        if (lane + 32 * j < packs) state = readable::welford_merge(state, welford_of(held[j]));
    for (int p = lane + 32 * kBf16HeldPacks; p < packs; p += 32)
        state = readable::welford_merge(state, welford_of(x_row[p]));
    const Welford row_state = readable::group_merge<32>(state);
    const float row_rstd = readable::rstd_of(row_state, cols);
    if (lane == 0) {
        mean[row] = row_state.mean;
        rstd[row] = row_rstd;
    }

    // The write: the held packs from the registers, the rest read again.
#pragma unroll
    for (int j = 0; j < kBf16HeldPacks; ++j) {
        const int p = lane + 32 * j;
        if (p < packs) y_row[p] = normalize(held[j], scale[p], shift[p], row_state.mean, row_rstd);
    }
    for (int p = lane + 32 * kBf16HeldPacks; p < packs; p += 32)
        y_row[p] = normalize(x_row[p], scale[p], shift[p], row_state.mean, row_rstd);
}

}  // namespace

void layernorm_bf16(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean,
                    float* rstd, int rows, int cols) {
    const unsigned blocks = static_cast<unsigned>(course::ceil_div(rows, kBf16RowsPerBlock));
    // 16-byte packs need every row start on a 16-byte boundary: cols % 8 == 0 and aligned
    // pointers (all four: a view may start anywhere).
    if (cols % 8 == 0 && course::is_aligned(x, 16) && course::is_aligned(y, 16) &&
        course::is_aligned(gamma, 16) && course::is_aligned(beta, 16))
        layernorm_bf16_rows<8><<<blocks, kBf16Block>>>(x, gamma, beta, y, mean, rstd, rows, cols);
    else
        layernorm_bf16_rows<1><<<blocks, kBf16Block>>>(x, gamma, beta, y, mean, rstd, rows, cols);
    CUDA_CHECK_LAUNCH();
}
