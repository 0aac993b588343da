// 06_softmax_norms/cross_entropy: fused softmax cross-entropy, loss and gradient in one kernel.
// Reference solution.
//
// Teaches: the online (running max, rescaled sum) logsumexp and how two such states merge;
// fusing a loss with its gradient, with the row kept on chip (in registers, or in shared memory
// when it is long: on Hopper the shared memory of a cluster of blocks) so that the logits are read
// from device memory once and dlogits written once;
// -inf (masked) logits; why the maximum is subtracted before expf. Memory-bound: the checker
// reports the bandwidth next to a device-to-device copy.
//
// Run:  grader run 06/cross_entropy --solutions
// Contract: cross_entropy.h            Notes:  notes/06_softmax_norms.md
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "cross_entropy.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Where a row waits between its statistics and the gradient (the launcher picks by length):
//  - registers: each thread keeps kCachedFloats of the row (4 float4 or 16 floats), so a warp
//    holds a row of up to 512 logits (kRegisterBlock / 32 rows per block) and a block of
//    kRegisterBlock threads one of up to 4096;
//  - shared memory: longer rows are staged in dynamic shared memory. On Hopper a row is split over
//    a cluster of blocks of kClusterBlock threads, each staging a slice of up to kSliceBytes, and
//    the blocks merge their states through distributed shared memory: GPT-2's 50304 logits
//    (201 KB) take 2 blocks, and an SM holds 2 blocks of different rows, so one row's reduction
//    hides behind the other's loads. Before Hopper one block of kStagedBlock threads stages the
//    whole row (up to 163 KB on an A100): one row per SM;
//  - nowhere: a row longer than that is read a second time.
// Either way a thread has several 16-byte loads in flight (kCachedFloats / 4 or kLoadsInFlight).
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas may squeeze a kernel like this into 32 registers and spill to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
constexpr int kClusterBlock = 512;
constexpr std::size_t kSliceBytes = 100 * 1024;  // 2 slices per SM in its 227 KB
constexpr int kStagedBlock = 1024;
constexpr int kLoadsInFlight = 4;

// The largest value seen and the sum of exp(value - max) over the values seen. Subtracting the
// maximum keeps every exponent <= 0: no term overflows, and the largest term is exactly 1.
// Nothing seen yet (or only -inf): {-inf, 0}.
struct SoftmaxState {
    float max;
    float sum;
};

// The state of the union of two sets: both sums are rescaled to the larger maximum.
__device__ SoftmaxState softmax_merge(SoftmaxState a, SoftmaxState b) {
    const float max = fmaxf(a.max, b.max);
    if (max == -INFINITY) return a;  // neither saw a finite value: -inf - -inf would be NaN
    return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

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

// A second and last read of the logits, for rows too long for shared memory: __ldcs ("cache
// streaming") marks the lines evict-first in L1 and L2, so that L2 gives up lines that are
// finished with rather than those other rows still have to re-read.
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

// Adds a pack to a running state: the new maximum first, then one rescale of the old sum and
// kWidth exponentials (kWidth + 1 expf per pack instead of 2 per value). -inf values add
// expf(-inf) = 0 once the maximum is finite.
template <int kWidth>
__device__ SoftmaxState add_pack(SoftmaxState state, const Pack<kWidth>& pack) {
    float max = state.max;
    for (int k = 0; k < kWidth; ++k) max = fmaxf(max, pack.v[k]);
    if (max == -INFINITY) return state;             // only -inf so far
    float sum = state.sum * expf(state.max - max);  // expf(-inf) = 0 for an empty state
    for (int k = 0; k < kWidth; ++k) sum += expf(pack.v[k] - max);
    return {max, sum};
}

// logsumexp - x[target] = (max - x[target]) + log(sum): the difference of two large logits is
// taken first, exactly, instead of rounding max + log(sum) at max's scale.
__device__ float loss_of(SoftmaxState row, float target_logit) {
    return (row.max - target_logit) + logf(row.sum);
}

// dlogits of the pack that starts at column col: (softmax - onehot) / rows, with 1 / sum and
// 1 / rows computed once per row instead of a division per element.
template <int kWidth>
__device__ Pack<kWidth> gradient(const Pack<kWidth>& x, int col, int target, SoftmaxState row,
                                 float inv_sum, float inv_rows) {
    Pack<kWidth> out;
    for (int k = 0; k < kWidth; ++k) {
        const float probability = expf(x.v[k] - row.max) * inv_sum;
        const float onehot = col + k == target ? 1.0f : 0.0f;
        out.v[k] = (probability - onehot) * inv_rows;
    }
    return out;
}

// Butterfly over the 32 lanes: every lane ends with the merge of all 32 states (the same bits in
// every lane: the merge is symmetric, and a + b == b + a in floating point too).
__device__ SoftmaxState warp_merge(SoftmaxState state) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const SoftmaxState other{__shfl_xor_sync(kFullMask, state.max, offset),
                                 __shfl_xor_sync(kFullMask, state.sum, offset)};
        state = softmax_merge(state, other);
    }
    return state;
}

// Merge of the states of the kGroup threads of a row (a warp, or a whole block of kGroup
// threads), returned to each of them. A block: lane 0 of each warp posts its warp's state, and
// after the barrier every warp merges the posted states itself. Called once per block.
template <int kGroup>
__device__ SoftmaxState group_merge(SoftmaxState state) {
    state = warp_merge(state);
    if constexpr (kGroup > 32) {
        constexpr int kWarps = kGroup / 32;
        __shared__ SoftmaxState warp_states[kWarps];
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        if (lane == 0) warp_states[warp] = state;
        __syncthreads();  // every warp's state is posted before anyone reads them
        state = warp_merge(lane < kWarps ? warp_states[lane] : SoftmaxState{-INFINITY, 0.0f});
    }
    return state;
}

// Rows of up to kGroup * kCachedFloats logits, held in registers. kGroup threads per row: 32 (a
// warp; kRegisterBlock / 32 rows per block) or kRegisterBlock (the block). Thread `lane` keeps
// packs lane, lane + kGroup, lane + 2 * kGroup, ...: at each step the group reads kGroup
// consecutive packs (coalesced). kWidth divides vocab, so every row starts aligned for packs.
template <int kWidth, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock, kMinRegisterBlocksPerSm)
    cross_entropy_in_registers(const float* __restrict__ logits, const int* __restrict__ targets,
                               float* __restrict__ losses, float* __restrict__ dlogits, int rows,
                               int vocab) {
    constexpr int kPacks = kCachedFloats / kWidth;  // per thread
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int lane = threadIdx.x % kGroup;
    // Only a warp-wide group can be past the last row, and it leaves as a whole (a block-wide
    // group always has its row: the grid is exactly rows blocks, and no thread skips the barrier).
    if (row >= rows) return;
    // 64-bit offset: rows * vocab can pass 2^31.
    const std::size_t offset = static_cast<std::size_t>(row) * vocab;
    const float* in = logits + offset;
    float* grad = dlogits + offset;
    const int packs = vocab / kWidth;

    // The only read of the row: the kPacks loads are independent, so all of them are in flight
    // together. Fully unrolled loops make every index into `cache` a compile-time constant, which
    // is what lets the array live in registers. Slots past the end of the row are not loaded, and
    // stay out of the statistics and the write.
    Pack<kWidth> cache[kPacks];
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
        const int p = lane + kGroup * j;
        if (p < packs) cache[j] = load_pack<kWidth>(in + p * kWidth);
    }
    const int target = targets[row];  // in flight with the row

    // Maximum and sum of exponentials in one sweep over the registers (online softmax).
    SoftmaxState state{-INFINITY, 0.0f};
#pragma unroll
    for (int j = 0; j < kPacks; ++j)
        if (lane + kGroup * j < packs) state = add_pack(state, cache[j]);
    // The target's logit, for the loss, is one float that some thread of the group holds; a
    // 4-byte read (the row was just read: L1 or L2) is simpler than finding it. Issued before
    // the merge, it arrives while the merge runs.
    const float target_logit = lane == 0 ? in[target] : 0.0f;
    const SoftmaxState row_state = group_merge<kGroup>(state);
    if (lane == 0) losses[row] = loss_of(row_state, target_logit);

    // The gradient, from the registers.
    const float inv_sum = 1.0f / row_state.sum;
    const float inv_rows = 1.0f / rows;
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
        const int p = lane + kGroup * j;
        if (p < packs)
            store_pack(grad + p * kWidth,
                       gradient(cache[j], p * kWidth, target, row_state, inv_sum, inv_rows));
    }
}

// Longer rows, staged in shared memory. Launched in clusters (Hopper), the blocks of a cluster
// share one row, each staging the slice course::cluster_slice gives it; otherwise one block holds
// the whole row. `staged`: the slice fits in the block's dynamic shared memory, and the gradient
// reads it there; otherwise (a row too long even for that) it reads the logits a second time.
template <int kWidth, int kBlock>
__global__ void __launch_bounds__(kBlock, kStagedBlock / kBlock)
    cross_entropy_staged(const float* __restrict__ logits, const int* __restrict__ targets,
                         float* __restrict__ losses, float* __restrict__ dlogits, int rows,
                         int vocab, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ SoftmaxState block_state;  // read by the other blocks of the cluster
    Pack<kWidth>* stage = reinterpret_cast<Pack<kWidth>*>(stage_bytes);
    const unsigned slices = course::cluster_blocks();  // blocks per row: 1 without clusters
    const unsigned rank = course::cluster_rank();
    const std::size_t row = blockIdx.x / slices;
    const float* in = logits + row * vocab;  // 64-bit offset: rows * vocab can pass 2^31
    float* grad = dlogits + row * vocab;
    const int target = targets[row];  // in flight with the row
    // This block's packs: shares rounded to 128 bytes (32 floats) so each starts on a line.
    const course::Slice slice = course::cluster_slice(vocab / kWidth, slices, rank, 32 / kWidth);

    // Pass 1: thread t reads packs begin + t, begin + t + kBlock, ... (coalesced), kLoadsInFlight
    // of them issued before the first is used. Each is parked in shared memory and added to the
    // thread's online state. A thread later reads back exactly the slots it wrote itself, so the
    // stage needs no barrier.
    SoftmaxState state{-INFINITY, 0.0f};
    for (int first = slice.begin + threadIdx.x; first < slice.end; first += kLoadsInFlight * kBlock) {
        Pack<kWidth> batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) batch[j] = load_pack<kWidth>(in + p * kWidth);
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) {
                if (staged) stage[p - slice.begin] = batch[j];
                state = add_pack(state, batch[j]);
            }
        }
    }
    // The loss is the first block's to write (see cross_entropy_in_registers).
    const bool writes_loss = threadIdx.x == 0 && rank == 0;
    const float target_logit = writes_loss ? in[target] : 0.0f;
    SoftmaxState row_state = group_merge<kBlock>(state);
    // In a cluster, the blocks' states are merged too (course/cluster.h).
    row_state = course::cluster_reduce(row_state, &block_state, [](SoftmaxState a, SoftmaxState b) {
        return softmax_merge(a, b);
    });
    course::cluster_arrive();  // done reading the other blocks' states
    if (writes_loss) losses[row] = loss_of(row_state, target_logit);

    // Pass 2: the same packs, from shared memory (or from a last read of the logits).
    const float inv_sum = 1.0f / row_state.sum;
    const float inv_rows = 1.0f / rows;
#pragma unroll 4
    for (int p = slice.begin + threadIdx.x; p < slice.end; p += kBlock) {
        const Pack<kWidth> x = staged ? stage[p - slice.begin] : load_pack_last_use<kWidth>(in + p * kWidth);
        store_pack(grad + p * kWidth,
                   gradient(x, p * kWidth, target, row_state, inv_sum, inv_rows));
    }
    course::cluster_wait();  // the other blocks are done with our state
}

// A long row: in the shared memory of a cluster of blocks on Hopper, else of one block.
template <int kWidth>
void launch_staged(const float* logits, const int* targets, float* losses, float* dlogits,
                   int rows, int vocab) {
    const std::size_t row_bytes = static_cast<std::size_t>(vocab) * sizeof(float);
    const auto in_cluster = cross_entropy_staged<kWidth, kClusterBlock>;
    static const bool clusters = course::clusters_available(in_cluster);
    static const std::size_t cluster_capacity = course::opt_in_shared_bytes(in_cluster);
    const int slices = static_cast<int>(course::ceil_div(row_bytes, kSliceBytes));
    if (clusters && slices <= static_cast<int>(course::kMaxClusterBlocks)) {
        // The first slice is the longest (at most kSliceBytes).
        const course::Slice first = course::cluster_slice(vocab / kWidth, slices, 0, 32 / kWidth);
        const std::size_t slice_bytes = (first.end - first.begin) * sizeof(Pack<kWidth>);
        course::launch_in_clusters(in_cluster, rows * slices, kClusterBlock, slices, slice_bytes,
                                   logits, targets, losses, dlogits, rows, vocab,
                                   slice_bytes <= cluster_capacity);
        return;
    }
    const auto one_block = cross_entropy_staged<kWidth, kStagedBlock>;
    static const std::size_t capacity = course::opt_in_shared_bytes(one_block);
    const bool staged = row_bytes <= capacity;
    one_block<<<rows, kStagedBlock, staged ? row_bytes : 0>>>(logits, targets, losses, dlogits,
                                                              rows, vocab, staged);
    CUDA_CHECK_LAUNCH();
}

template <int kWidth>
void launch(const float* logits, const int* targets, float* losses, float* dlogits, int rows,
            int vocab) {
    if (vocab <= 32 * kCachedFloats) {
        // Up to 512 classes: a warp per row, in registers.
        constexpr int kRowsPerBlock = kRegisterBlock / 32;
        cross_entropy_in_registers<kWidth, 32>
            <<<course::ceil_div(rows, kRowsPerBlock), kRegisterBlock>>>(logits, targets, losses,
                                                                        dlogits, rows, vocab);
        CUDA_CHECK_LAUNCH();
    } else if (vocab <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 classes: a block per row, in registers (16 KB: several rows per SM).
        cross_entropy_in_registers<kWidth, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(logits, targets, losses, dlogits, rows, vocab);
        CUDA_CHECK_LAUNCH();
    } else {
        launch_staged<kWidth>(logits, targets, losses, dlogits, rows, vocab);
    }
}

}  // namespace

void cross_entropy(const float* logits, const int* targets, float* losses, float* dlogits, int rows,
                   int vocab) {
    // float4 needs every row start on a 16-byte boundary: vocab % 4 == 0 and aligned pointers.
    if (vocab % 4 == 0 && course::is_aligned(logits, 16) && course::is_aligned(dlogits, 16))
        launch<4>(logits, targets, losses, dlogits, rows, vocab);
    else
        launch<1>(logits, targets, losses, dlogits, rows, vocab);
}
