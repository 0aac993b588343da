// 06_softmax_norms/cross_entropy: fused softmax cross-entropy, loss and gradient in one kernel.
// Reference solution (the readable one; cross_entropy_fast.cu adds what the long rows' target
// needs).
//
// Teaches: the online (running max, rescaled sum) logsumexp and how two such states merge;
// fusing a loss with its gradient, with the row kept on chip (in registers, or in the block's
// shared memory when it is long) so that the logits are read from device memory once and dlogits
// written once; -inf (masked) logits; why the maximum is subtracted before expf. Memory-bound:
// the checker reports the bandwidth next to a device-to-device copy.
//
// Run:  grader run 06/cross_entropy --solutions
// Contract: cross_entropy.h            Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "cross_entropy.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Where a row waits between its statistics and the gradient (the launcher picks by length):
//  - registers: each thread keeps kCachedFloats of the row, so a warp holds a row of up to 512
//    logits (kRegisterBlock / 32 rows per block) and a block of kRegisterBlock threads one of up
//    to 4096;
//  - shared memory: one block of kStagedBlock threads per row stages it in dynamic shared memory
//    (GPT-2's 50304 logits are 201 KB; an H100 block may have 227 KB);
//  - nowhere: a row longer than that is read a second time.
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas may squeeze a kernel like this into 32 registers and spill to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
constexpr int kStagedBlock = 1024;
// Loads a thread issues before it uses the first (64 KB in flight per SM for float4s).
constexpr int kLoadsInFlight = 4;

// The largest value seen and the sum of exp(value - max) over the values seen. Subtracting the
// maximum keeps every exponent <= 0: no term overflows, and the largest term is exactly 1.
// Nothing seen yet is {-FLT_MAX, 0}, not {-inf, 0}: merging two empty states then computes
// expf(0) * 0 = 0 instead of expf(-inf - -inf) = NaN, and an -inf logit adds expf(-inf) = 0.
struct SoftmaxState {
    float max;
    float sum;
};

// The state of the union of two sets: both sums are rescaled to the larger maximum (the factors
// are exp(<= 0): nothing overflows).
__device__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
    const float max = fmaxf(a.max, b.max);
    return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

// One more loaded vector: the new maximum first, then one rescale of the old sum and one
// exponential per value (5 expf per float4 instead of 2 per value).
__device__ float max_of(float v) { return v; }
__device__ float max_of(float4 v) { return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w)); }
__device__ float sum_of_exp(float v, float max) { return expf(v - max); }
__device__ float sum_of_exp(float4 v, float max) {
    return (expf(v.x - max) + expf(v.y - max)) + (expf(v.z - max) + expf(v.w - max));
}
template <class Vec>
__device__ SoftmaxState add(SoftmaxState state, Vec v) {
    const float max = fmaxf(state.max, max_of(v));
    return {max, state.sum * expf(state.max - max) + sum_of_exp(v, max)};
}

// logsumexp - x[target] = (max - x[target]) + log(sum): the difference of two large logits is
// taken first, exactly, instead of rounding max + log(sum) at max's scale.
__device__ float loss_of(SoftmaxState row, float target_logit) {
    return (row.max - target_logit) + logf(row.sum);
}

// dlogits of the logit in column `col`: (softmax - onehot) / rows, with 1 / sum and 1 / rows
// computed once per row instead of a division per element.
__device__ float gradient(float x, int col, int target, SoftmaxState row, float inv_sum,
                          float inv_rows) {
    const float probability = expf(x - row.max) * inv_sum;
    return (probability - (col == target ? 1.0f : 0.0f)) * inv_rows;
}
__device__ float4 gradient(float4 x, int col, int target, SoftmaxState row, float inv_sum,
                           float inv_rows) {
    return make_float4(gradient(x.x, col, target, row, inv_sum, inv_rows),
                       gradient(x.y, col + 1, target, row, inv_sum, inv_rows),
                       gradient(x.z, col + 2, target, row, inv_sum, inv_rows),
                       gradient(x.w, col + 3, target, row, inv_sum, inv_rows));
}

// Butterfly over the 32 lanes: every lane ends with the merge of all 32 states (the same bits in
// every lane: the merge is symmetric, and a + b == b + a in floating point too).
__device__ SoftmaxState warp_merge(SoftmaxState state) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const SoftmaxState other{__shfl_xor_sync(kFullMask, state.max, offset),
                                 __shfl_xor_sync(kFullMask, state.sum, offset)};
        state = merge(state, other);
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
        state = warp_merge(lane < kWarps ? warp_states[lane] : SoftmaxState{-FLT_MAX, 0.0f});
    }
    return state;
}

// Rows of up to kGroup * kCachedFloats logits, held in registers. kGroup threads per row: 32 (a
// warp; kRegisterBlock / 32 rows per block) or kRegisterBlock (the block). Thread `lane` keeps
// vectors lane, lane + kGroup, lane + 2 * kGroup, ...: at each step the group reads kGroup
// consecutive vectors (coalesced). Vec is float4 when every row starts 16-byte aligned, else
// float; the row is then vocab / (floats per Vec) vectors, with no tail.
template <class Vec, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock, kMinRegisterBlocksPerSm)
    cross_entropy_in_registers(const float* __restrict__ logits, const int* __restrict__ targets,
                               float* __restrict__ losses, float* __restrict__ dlogits, int rows,
                               int vocab) {
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    constexpr int kVecsPerThread = kCachedFloats / kFloatsPerVec;
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int lane = threadIdx.x % kGroup;
    // Only a warp-wide group can be past the last row, and it leaves as a whole (a block-wide
    // group always has its row: the grid is exactly rows blocks, and no thread skips the barrier).
    if (row >= rows) return;
    // 64-bit offset: rows * vocab can pass 2^31.
    const std::size_t offset = static_cast<std::size_t>(row) * vocab;
    const float* in = logits + offset;
    const Vec* x = reinterpret_cast<const Vec*>(in);
    Vec* grad = reinterpret_cast<Vec*>(dlogits + offset);
    const int vecs = vocab / kFloatsPerVec;

    // The only read of the row: the loads are independent, so all of them are in flight
    // together. Fully unrolled loops make every index into `cache` a compile-time constant, which
    // is what lets the array live in registers. Slots past the end of the row are not loaded, and
    // stay out of the statistics and the write.
    Vec cache[kVecsPerThread];
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = lane + kGroup * j;
        if (k < vecs) cache[j] = x[k];
    }
    const int target = targets[row];  // in flight with the row

    // Maximum and sum of exponentials in one sweep over the registers (online softmax).
    SoftmaxState state{-FLT_MAX, 0.0f};
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j)
        if (lane + kGroup * j < vecs) state = add(state, cache[j]);
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
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = lane + kGroup * j;
        if (k < vecs)
            grad[k] = gradient(cache[j], k * kFloatsPerVec, target, row_state, inv_sum, inv_rows);
    }
}

// Longer rows, one block of kStagedBlock threads per row. `staged`: the row fits in the block's
// dynamic shared memory, and the gradient reads it there; otherwise (a row too long even for
// that) it reads the logits a second time. Thread t walks vectors t, t + kStagedBlock, ...
template <class Vec>
__global__ void __launch_bounds__(kStagedBlock)
    cross_entropy_staged(const float* __restrict__ logits, const int* __restrict__ targets,
                         float* __restrict__ losses, float* __restrict__ dlogits, int rows,
                         int vocab, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    const std::size_t row = blockIdx.x;
    const float* in = logits + row * vocab;  // 64-bit offset: rows * vocab can pass 2^31
    const Vec* x = reinterpret_cast<const Vec*>(in);
    Vec* grad = reinterpret_cast<Vec*>(dlogits + row * vocab);
    const int target = targets[row];  // in flight with the row
    const int vecs = vocab / kFloatsPerVec;

    // Pass 1, the read of device memory, in rounds of kLoadsInFlight loads per thread: the loads
    // of a round are independent, so all of them are in flight together. Each vector is parked in
    // the stage and added to the thread's online state. A thread later reads back exactly the
    // slots it wrote itself, so the stage needs no barrier.
    SoftmaxState state{-FLT_MAX, 0.0f};
    for (int first = threadIdx.x; first < vecs; first += kLoadsInFlight * kStagedBlock) {
        Vec batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kStagedBlock * j;
            if (k < vecs) batch[j] = x[k];
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kStagedBlock * j;
            if (k < vecs) {
                if (staged) stage[k] = batch[j];
                state = add(state, batch[j]);
            }
        }
    }
    const float target_logit = threadIdx.x == 0 ? in[target] : 0.0f;
    const SoftmaxState row_state = group_merge<kStagedBlock>(state);
    if (threadIdx.x == 0) losses[row] = loss_of(row_state, target_logit);

    // Pass 2: the same vectors, from the stage (or from the logits again).
    const float inv_sum = 1.0f / row_state.sum;
    const float inv_rows = 1.0f / rows;
#pragma unroll 4
    for (int k = threadIdx.x; k < vecs; k += kStagedBlock)
        grad[k] = gradient(staged ? stage[k] : x[k], k * kFloatsPerVec, target, row_state, inv_sum,
                           inv_rows);
}

template <class Vec>
void launch(const float* logits, const int* targets, float* losses, float* dlogits, int rows,
            int vocab) {
    if (vocab <= 32 * kCachedFloats) {
        // Up to 512 classes: a warp per row, in registers.
        constexpr int kRowsPerBlock = kRegisterBlock / 32;
        cross_entropy_in_registers<Vec, 32>
            <<<course::ceil_div(rows, kRowsPerBlock), kRegisterBlock>>>(logits, targets, losses,
                                                                        dlogits, rows, vocab);
    } else if (vocab <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 classes: a block per row, in registers (16 KB: several rows per SM).
        cross_entropy_in_registers<Vec, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(logits, targets, losses, dlogits, rows, vocab);
    } else {
        // Longer: staged in shared memory where the block's opt-in allows (asked once per kernel).
        static const std::size_t capacity = course::opt_in_shared_bytes(cross_entropy_staged<Vec>);
        const std::size_t row_bytes = static_cast<std::size_t>(vocab) * sizeof(float);
        const bool staged = row_bytes <= capacity;
        cross_entropy_staged<Vec><<<rows, kStagedBlock, staged ? row_bytes : 0>>>(
            logits, targets, losses, dlogits, rows, vocab, staged);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void cross_entropy(const float* logits, const int* targets, float* losses, float* dlogits, int rows,
                   int vocab) {
    // float4 needs every row start on a 16-byte boundary: vocab % 4 == 0 and aligned pointers.
    if (vocab % 4 == 0 && course::is_aligned(logits, 16) && course::is_aligned(dlogits, 16))
        launch<float4>(logits, targets, losses, dlogits, rows, vocab);
    else
        launch<float>(logits, targets, losses, dlogits, rows, vocab);
}
