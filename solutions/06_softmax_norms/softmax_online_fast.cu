// 06_softmax_norms/softmax_online_fast: the online softmax, tuned for rows too long for registers.
// Fast reference: the readable solution (softmax_online.cu, included below) plus what the target
// at 4096 x 50304 needs on Hopper.
//
// Teaches: splitting a long row over a thread block cluster, each block staging its slice in
// shared memory and the blocks merging their (max, sum) states through distributed shared memory,
// so that an SM holds slices of two rows and one row's merge hides behind the other's loads.
// Short rows, and GPUs without clusters, take the readable solution's path. The module README
// compares the two.
//
// Run:  grader run 06/softmax_online --solutions  (the "softmax_online (fast)" row)
// Contract: softmax_online.h           Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "course/row_tiers.h"
#include "course/vec.h"
#include "softmax_online.h"

// The readable solution, whole: its online-softmax state, merges and short-row kernels serve here
// too, and readable::softmax_online runs every row this file does not take. (Every header it
// includes is included above, so that none of them lands inside the namespace.)
namespace readable {
#include "softmax_online.cu"
}  // namespace readable

namespace {

using readable::SoftmaxState;

// A slice of at most 100 KB of a row per block of 512 threads, 2 blocks per SM (2 x 100 KB of
// the 227 KB of an H100 SM): a 50304-float row takes a cluster of 2.
constexpr std::size_t kSliceBytes = 100 * 1024;
constexpr int kClusterBlock = 512;
constexpr int kClusterBlocksPerSm = 2;
constexpr int kLoadsInFlight = 4;

// One block's slice of a row, staged in shared memory (stage[0] is the slice's first vector).
// The blocks' states merge through distributed shared memory.
template <class Vec>
__global__ void __launch_bounds__(kClusterBlock, kClusterBlocksPerSm)
    softmax_online_in_cluster(const float* in, float* out, int cols) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ SoftmaxState block_state;  // read by the other blocks of the cluster
    const unsigned slices = course::cluster_blocks();
    const std::size_t row = blockIdx.x / slices;
    const Vec* x = reinterpret_cast<const Vec*>(in + row * cols);  // 64-bit offset
    Vec* y = reinterpret_cast<Vec*>(out + row * cols);
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    const course::Slice slice =
        course::cluster_slice(cols / course::kFloatsPerVec<Vec>, slices, course::cluster_rank(),
                              static_cast<int>(course::kSliceAlign / sizeof(Vec)));

    // Pass 1: maximum and sum together, in batches of loads, each vector parked in the stage. A
    // thread reads back only the slots it wrote itself, so the stage needs no barrier.
    SoftmaxState state{-FLT_MAX, 0.0f};
    for (int first = slice.begin + threadIdx.x; first < slice.end;
         first += kLoadsInFlight * kClusterBlock) {
        Vec batch[kLoadsInFlight];
        course::load_batch<kClusterBlock>(batch, x, first, slice.end);
#pragma unroll
        for (int u = 0; u < kLoadsInFlight; ++u) {
            const int k = first + u * kClusterBlock;
            if (k < slice.end) {
                stage[k - slice.begin] = batch[u];
                state = readable::add(state, batch[u]);
            }
        }
    }
    state = readable::group_merge<kClusterBlock>(state);
    state = course::cluster_reduce(
        state, &block_state, [](SoftmaxState a, SoftmaxState b) { return readable::merge(a, b); });
    course::cluster_arrive();  // done reading the other blocks' states

    // Pass 2: the write, from the stage.
    const float inv_sum = 1.0f / state.sum;
#pragma unroll 4
    for (int k = slice.begin + threadIdx.x; k < slice.end; k += kClusterBlock)
        y[k] = readable::normalized(stage[k - slice.begin], state.max, inv_sum);
    course::cluster_wait();  // the other blocks are done with our state
}

template <class Vec>
bool launch_in_clusters(const float* in, float* out, int rows, int cols) {
    return course::launch_split_rows<softmax_online_in_cluster<Vec>>(
        rows, cols / course::kFloatsPerVec<Vec>, sizeof(Vec), kClusterBlock, 0, kSliceBytes, in,
        out, cols);
}

}  // namespace

void softmax_online(const float* in, float* out, int rows, int cols) {
    // Rows the readable solution would stage in one block's shared memory go to a cluster, where
    // this GPU has them; everything else is the readable solution's.
    const bool long_rows = cols > readable::kRegisterBlock * readable::kCachedFloats;
    const bool vec4 = cols % 4 == 0 && course::is_aligned(in, 16) && course::is_aligned(out, 16);
    if (long_rows && (vec4 ? launch_in_clusters<float4>(in, out, rows, cols)
                           : launch_in_clusters<float>(in, out, rows, cols)))
        return;
    readable::softmax_online(in, out, rows, cols);
}
