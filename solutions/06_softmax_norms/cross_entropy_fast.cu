// 06_softmax_norms/cross_entropy_fast: fused cross-entropy, tuned for rows too long for registers.
// Fast reference: the readable solution (cross_entropy.cu, included below) plus what the target
// at 4096 x 50304 needs on Hopper.
//
// Teaches: splitting a long row over a thread block cluster, each block staging its slice in
// shared memory and the blocks merging their online-softmax states through distributed shared
// memory, so that an SM holds slices of two rows and one row's reduction hides behind the other's
// loads. Short rows, and GPUs without clusters, take the readable solution's path. The module
// README compares the two.
//
// Run:  grader run 06/cross_entropy --solutions   (the "cross_entropy (fast)" row)
// Contract: cross_entropy.h            Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "course/row_tiers.h"
#include "course/vec.h"
#include "cross_entropy.h"

// The readable solution, whole: its online-softmax state, merges and short-row kernels serve here
// too, and readable::cross_entropy runs every row this file does not take. (Every header it
// includes is included above, so that none of them lands inside the namespace.)
namespace readable {
#include "cross_entropy.cu"
}  // namespace readable

namespace {

using readable::SoftmaxState;

// A slice of at most 100 KB of a row per block of 512 threads, 2 blocks per SM (2 x 100 KB of
// the 227 KB of an H100 SM): GPT-2's 50304 logits take a cluster of 2.
constexpr std::size_t kSliceBytes = 100 * 1024;
constexpr int kClusterBlock = 512;
constexpr int kClusterBlocksPerSm = 2;
constexpr int kLoadsInFlight = 4;

// One block's slice of a row, staged in shared memory (stage[0] is the slice's first vector).
// The blocks' states merge through distributed shared memory; the first block writes the loss.
template <class Vec>
__global__ void __launch_bounds__(kClusterBlock, kClusterBlocksPerSm)
    cross_entropy_in_cluster(const float* __restrict__ logits, const int* __restrict__ targets,
                             float* __restrict__ losses, float* __restrict__ dlogits, int rows,
                             int vocab) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ SoftmaxState block_state;  // read by the other blocks of the cluster
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    const unsigned slices = course::cluster_blocks();
    const unsigned rank = course::cluster_rank();
    const std::size_t row = blockIdx.x / slices;
    const float* in = logits + row * vocab;  // 64-bit offset: rows * vocab can pass 2^31
    const Vec* x = reinterpret_cast<const Vec*>(in);
    Vec* grad = reinterpret_cast<Vec*>(dlogits + row * vocab);
    const int target = targets[row];  // in flight with the row
    const course::Slice slice =
        course::cluster_slice(vocab / course::kFloatsPerVec<Vec>, slices, rank,
                              static_cast<int>(course::kSliceAlign / sizeof(Vec)));

    // Pass 1: batches of loads, each vector parked in the stage and added to the thread's online
    // state. A thread reads back only the slots it wrote itself, so the stage needs no barrier.
    SoftmaxState state{-FLT_MAX, 0.0f};
    for (int first = slice.begin + threadIdx.x; first < slice.end;
         first += kLoadsInFlight * kClusterBlock) {
        Vec batch[kLoadsInFlight];
        course::load_batch<kClusterBlock>(batch, x, first, slice.end);
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kClusterBlock * j;
            if (k < slice.end) {
                stage[k - slice.begin] = batch[j];
                state = readable::add(state, batch[j]);
            }
        }
    }
    const bool writes_loss = threadIdx.x == 0 && rank == 0;
    const float target_logit = writes_loss ? in[target] : 0.0f;
    SoftmaxState row_state = readable::group_merge<kClusterBlock>(state);
    row_state = course::cluster_reduce(row_state, &block_state, [](SoftmaxState a, SoftmaxState b) {
        return readable::merge(a, b);
    });
    course::cluster_arrive();  // done reading the other blocks' states
    if (writes_loss) losses[row] = readable::loss_of(row_state, target_logit);

    // Pass 2: the gradient, from the stage.
    const float inv_sum = 1.0f / row_state.sum;
    const float inv_rows = 1.0f / rows;
#pragma unroll 4
    for (int k = slice.begin + threadIdx.x; k < slice.end; k += kClusterBlock)
        grad[k] = readable::gradient(stage[k - slice.begin], k * course::kFloatsPerVec<Vec>, target,
                                     row_state, inv_sum, inv_rows);
    course::cluster_wait();  // the other blocks are done with our state
}

template <class Vec>
bool launch_in_clusters(const float* logits, const int* targets, float* losses, float* dlogits,
                        int rows, int vocab) {
    return course::launch_split_rows<cross_entropy_in_cluster<Vec>>(
        rows, vocab / course::kFloatsPerVec<Vec>, sizeof(Vec), kClusterBlock, 0, kSliceBytes,
        logits, targets, losses, dlogits, rows, vocab);
}

}  // namespace

void cross_entropy(const float* logits, const int* targets, float* losses, float* dlogits, int rows,
                   int vocab) {
    // Rows the readable solution would stage in one block's shared memory go to a cluster, where
    // this GPU has them; everything else is the readable solution's.
    const bool long_rows = vocab > readable::kRegisterBlock * readable::kCachedFloats;
    const bool vec4 =
        vocab % 4 == 0 && course::is_aligned(logits, 16) && course::is_aligned(dlogits, 16);
    if (long_rows &&
        (vec4 ? launch_in_clusters<float4>(logits, targets, losses, dlogits, rows, vocab)
              : launch_in_clusters<float>(logits, targets, losses, dlogits, rows, vocab)))
        return;
    readable::cross_entropy(logits, targets, losses, dlogits, rows, vocab);
}
