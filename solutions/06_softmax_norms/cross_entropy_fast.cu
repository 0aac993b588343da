// 06_softmax_norms/cross_entropy_fast: fused cross-entropy, tuned for rows too long for registers.
// Fast reference: the readable solution (cross_entropy.cu, included below) plus what the target
// at 4096 x 50304 needs on Hopper.
//
// Teaches: splitting a long row over a thread block cluster, each block staging its slice in
// shared memory and the blocks merging their online-softmax states through distributed shared
// memory, so that an SM holds slices of two rows and one row's reduction hides behind the other's
// loads. Short rows, and GPUs without clusters, take the readable solution's path. The module
// README compares the two. Beyond the exercise, cross_entropy_bf16 (cross_entropy_bf16.h): the
// loss and gradient of the GPT trainer's bf16 logits, rows padded past the vocabulary, the
// gradient written over them: a block per row, staged in shared memory as bf16 (GPT-2's 50304
// are 98 KB: two rows per SM without a cluster), so that the trainer's bf16 mode needs no float
// copy of its 1.6 GB of logits.
//
// Run:  grader run 06/cross_entropy --solutions   (the "cross_entropy (fast)" row)
// Contract: cross_entropy.h, cross_entropy_bf16.h   Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include <cuda_bf16.h>

#include "course/activation.h"
#include "course/exercise.h"
#include "course/row_tiers.h"
#include "course/vec.h"
#include "cross_entropy.h"
#include "cross_entropy_bf16.h"

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

// ---- cross_entropy_bf16 (cross_entropy_bf16.h): the trainer's bf16 logits ----

namespace {

using bf16 = __nv_bfloat16;
using course::from_float;
using course::to_float;

// A block of kBf16Block threads per row; a row up to the block's shared memory is staged there as
// bf16 (GPT-2's padded 50304 logits: 98 KB, two blocks per SM of an H100), a longer one is read
// again for the gradient. kBf16LoadsInFlight loads per thread before the first is used.
constexpr int kBf16Block = 512;
constexpr int kBf16LoadsInFlight = 4;

// kWidth bf16 values moved as one access: 8 (16 bytes) where every row starts on a 16-byte
// boundary, else 1.
template <int kWidth>
struct alignas(2 * kWidth) Bf16Pack {
    bf16 value[kWidth];
};

// The pack at column `first` added to the online state, its columns past the vocabulary (the
// padding) left out as -inf logits are (exp(-inf) = 0: no probability).
template <int kWidth>
__device__ SoftmaxState add_pack(SoftmaxState state, const Bf16Pack<kWidth>& pack, int first,
                                 int vocab) {
    float v[kWidth];
    float max = state.max;
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
        v[k] = first + k < vocab ? to_float(pack.value[k]) : -INFINITY;
        max = fmaxf(max, v[k]);
    }
    float sum = state.sum * expf(state.max - max);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sum += expf(v[k] - max);
    return {max, sum};
}

template <int kWidth>
__global__ void __launch_bounds__(kBf16Block)
    cross_entropy_bf16_rows(const bf16* logits, const int* __restrict__ targets,
                            float* __restrict__ losses, bf16* dlogits, float scale, int vocab,
                            int stride, bool staged) {
    using Pack = Bf16Pack<kWidth>;
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    Pack* stage = reinterpret_cast<Pack*>(stage_bytes);
    const std::size_t row = blockIdx.x;
    const Pack* x = reinterpret_cast<const Pack*>(logits + row * stride);
    const int target = targets[row];                      // in flight with the row
    const int classes = course::ceil_div(vocab, kWidth);  // packs holding a class
    const int packs = stride / kWidth;

    // Pass 1: the packs that hold classes, staged and added to the thread's online state. A
    // thread reads back only the slots it wrote itself, so the stage needs no barrier.
    SoftmaxState state{-FLT_MAX, 0.0f};
    for (int first = threadIdx.x; first < classes; first += kBf16LoadsInFlight * kBf16Block) {
        Pack batch[kBf16LoadsInFlight];
#pragma unroll
        for (int j = 0; j < kBf16LoadsInFlight; ++j) {
            const int k = first + kBf16Block * j;
            if (k < classes) batch[j] = x[k];
        }
#pragma unroll
        for (int j = 0; j < kBf16LoadsInFlight; ++j) {
            const int k = first + kBf16Block * j;
            if (k < classes) {
                if (staged) stage[k] = batch[j];
                state = add_pack(state, batch[j], k * kWidth, vocab);
            }
        }
    }
    // Read before the barrier below: every read of the row precedes every write of the
    // gradient, which may go over the logits (in place).
    const float target_logit = threadIdx.x == 0 ? to_float(logits[row * stride + target]) : 0.0f;
    const SoftmaxState row_state = readable::group_merge<kBf16Block>(state);
    if (threadIdx.x == 0) losses[row] = readable::loss_of(row_state, target_logit);
    if (dlogits == nullptr) return;

    // Pass 2: the gradient, (softmax - onehot) * scale, 0 in the padding. A thread reads (from the
    // stage, or the logits again) each pack it then writes.
    Pack* grad = reinterpret_cast<Pack*>(dlogits + row * stride);
    const float inv_sum = 1.0f / row_state.sum;
    for (int k = threadIdx.x; k < packs; k += kBf16Block) {
        Pack in{};
        if (k < classes) in = staged ? stage[k] : x[k];
        Pack out;
#pragma unroll
        for (int e = 0; e < kWidth; ++e) {
            const int col = k * kWidth + e;
            const float probability = expf(to_float(in.value[e]) - row_state.max) * inv_sum;
            out.value[e] = from_float<bf16>(
                col < vocab ? (probability - (col == target ? 1.0f : 0.0f)) * scale : 0.0f);
        }
        grad[k] = out;
    }
}

template <int kWidth>
void launch_bf16(const bf16* logits, const int* targets, float* losses, bf16* dlogits, float scale,
                 int rows, int vocab, int stride) {
    static const std::size_t capacity =
        course::opt_in_shared_bytes(cross_entropy_bf16_rows<kWidth>);
    const std::size_t row_bytes = static_cast<std::size_t>(stride) * sizeof(bf16);
    const bool staged = row_bytes <= capacity;
    cross_entropy_bf16_rows<kWidth><<<rows, kBf16Block, staged ? row_bytes : 0>>>(
        logits, targets, losses, dlogits, scale, vocab, stride, staged);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void cross_entropy_bf16(const bf16* logits, const int* targets, float* losses, bf16* dlogits,
                        float scale, int rows, int vocab, int stride) {
    // 16-byte packs need every row start on a 16-byte boundary: stride % 8 == 0 and aligned
    // pointers (dlogits too, where there is one).
    if (stride % 8 == 0 && course::is_aligned(logits, 16) &&
        (dlogits == nullptr || course::is_aligned(dlogits, 16)))
        launch_bf16<8>(logits, targets, losses, dlogits, scale, rows, vocab, stride);
    else
        launch_bf16<1>(logits, targets, losses, dlogits, scale, rows, vocab, stride);
}
