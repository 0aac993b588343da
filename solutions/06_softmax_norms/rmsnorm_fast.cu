// 06_softmax_norms/rmsnorm_fast: RMSNorm, tuned for rows too long for registers.
// Fast reference: the readable solution (rmsnorm.cu, included below) plus what the target at
// 4096 x 50304 needs on Hopper.
//
// Teaches: splitting a long row over a thread block cluster, each block staging its slice in
// shared memory and the blocks adding their sums through distributed shared memory, so that an
// SM holds slices of two rows and one row's reduction hides behind the other's loads. Short rows,
// and GPUs without clusters, take the readable solution's path. The module README compares them.
//
// Run:  grader run 06/rmsnorm --solutions         (the "rmsnorm (fast)" row)
// Contract: rmsnorm.h                  Notes:  notes/06_softmax_norms.md
#include <cstddef>

#include "course/exercise.h"
#include "course/row_tiers.h"
#include "course/vec.h"
#include "rmsnorm.h"

// The readable solution, whole: its reductions and short-row kernels serve here too, and
// readable::rmsnorm runs every row this file does not take. (Every header it includes is
// included above, so that none of them lands inside the namespace.)
namespace readable {
#include "rmsnorm.cu"
}  // namespace readable

namespace {

// A slice of at most 100 KB of a row per block of 512 threads, 2 blocks per SM (2 x 100 KB of
// the 227 KB of an H100 SM): a 50304-float row takes a cluster of 2.
constexpr std::size_t kSliceBytes = 100 * 1024;
constexpr int kClusterBlock = 512;
constexpr int kClusterBlocksPerSm = 2;
constexpr int kLoadsInFlight = 4;  // per thread, in both passes

// One block's slice of a row, staged in shared memory (stage[0] is the slice's first vector).
// The blocks' sums of squares are added through distributed shared memory.
template <class Vec>
__global__ void __launch_bounds__(kClusterBlock, kClusterBlocksPerSm)
    rmsnorm_in_cluster(const float* __restrict__ x, const float* __restrict__ weight,
                       float* __restrict__ y, int cols) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ float block_squares;  // read by the other blocks of the cluster
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    const unsigned slices = course::cluster_blocks();
    const std::size_t row = blockIdx.x / slices;
    const Vec* x_row = reinterpret_cast<const Vec*>(x + row * cols);  // 64-bit offset
    Vec* y_row = reinterpret_cast<Vec*>(y + row * cols);
    const Vec* w = reinterpret_cast<const Vec*>(weight);
    const course::Slice slice =
        course::cluster_slice(cols / course::kFloatsPerVec<Vec>, slices, course::cluster_rank(),
                              static_cast<int>(course::kSliceAlign / sizeof(Vec)));

    // Pass 1: batches of loads, each vector parked in the stage and its squares added. A thread
    // reads back only the slots it wrote itself, so the stage needs no barrier.
    float squares = 0.0f;
    for (int first = slice.begin + threadIdx.x; first < slice.end;
         first += kLoadsInFlight * kClusterBlock) {
        Vec batch[kLoadsInFlight];
        course::load_batch<kClusterBlock>(batch, x_row, first, slice.end);
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kClusterBlock * j;
            if (k < slice.end) {
                stage[k - slice.begin] = batch[j];
                squares += readable::squares_of(batch[j]);
            }
        }
    }
    squares = readable::group_sum<kClusterBlock>(squares);
    squares =
        course::cluster_reduce(squares, &block_squares, [](float a, float b) { return a + b; });
    course::cluster_arrive();  // done reading the other blocks' sums
    const float scale = readable::rms_scale(squares, cols);

    // Pass 2: from the stage, in batches again so that the weight's loads (from L2) are in
    // flight together.
    for (int first = slice.begin + threadIdx.x; first < slice.end;
         first += kLoadsInFlight * kClusterBlock) {
        Vec in[kLoadsInFlight], weights[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kClusterBlock * j;
            if (k < slice.end) {
                in[j] = stage[k - slice.begin];
                weights[j] = w[k];
            }
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kClusterBlock * j;
            if (k < slice.end) y_row[k] = readable::normalize(in[j], weights[j], scale);
        }
    }
    course::cluster_wait();  // the other blocks are done with our sum
}

template <class Vec>
bool launch_in_clusters(const float* x, const float* weight, float* y, int rows, int cols) {
    return course::launch_split_rows<rmsnorm_in_cluster<Vec>>(
        rows, cols / course::kFloatsPerVec<Vec>, sizeof(Vec), kClusterBlock, 0, kSliceBytes, x,
        weight, y, cols);
}

}  // namespace

void rmsnorm(const float* x, const float* weight, float* y, int rows, int cols) {
    // Rows the readable solution would stage in one block's shared memory go to a cluster, where
    // this GPU has them; everything else is the readable solution's.
    const bool long_rows = cols > readable::kRegisterBlock * readable::kCachedFloats;
    const bool vec4 = cols % 4 == 0 && course::is_aligned(x, 16) && course::is_aligned(y, 16) &&
                      course::is_aligned(weight, 16);
    if (long_rows && (vec4 ? launch_in_clusters<float4>(x, weight, y, rows, cols)
                           : launch_in_clusters<float>(x, weight, y, rows, cols)))
        return;
    readable::rmsnorm(x, weight, y, rows, cols);
}
