// 06_softmax_norms/cross_entropy: fused softmax cross-entropy, loss and gradient in one kernel.
// Reference solution.
//
// Teaches: the online (running max, rescaled sum) logsumexp and how two such states merge;
// fusing a loss with its gradient, with the row kept on chip (in registers, or in shared memory
// when it is long) so that the logits are read from device memory once and dlogits written once;
// -inf (masked) logits; why the maximum is subtracted before expf. Memory-bound: the checker
// reports the bandwidth next to a device-to-device copy.
//
// Run:  grader run 06/cross_entropy --solutions
// Contract: cross_entropy.h            Notes:  notes/06_softmax_norms.md
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "cross_entropy.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Where a row waits between its statistics and the gradient (the launcher picks by length):
//  - registers: each thread keeps kCachedFloats of the row (4 float4 or 16 floats), so a warp
//    holds a row of up to 512 logits (kRegisterBlock / 32 rows per block) and a block of
//    kRegisterBlock threads one of up to 4096;
//  - shared memory: longer rows get a block of kStagedBlock threads each, and the row is staged in
//    the block's dynamic shared memory (up to 227 KB, 58,000 logits, on an H100);
//  - nowhere: a row longer than that is read a second time.
// Either way a thread has several 16-byte loads in flight (kCachedFloats / 4 or kLoadsInFlight),
// so that even one block per SM keeps enough bytes on their way to saturate device memory.
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas may squeeze a kernel like this into 32 registers and spill to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
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

// Longer rows: one block of kStagedBlock threads per row. `staged`: the block's dynamic shared
// memory holds the whole row (vocab floats), and the gradient reads it there; otherwise (a row
// longer than shared memory) the gradient reads the logits a second time.
template <int kWidth>
__global__ void __launch_bounds__(kStagedBlock)
    cross_entropy_staged(const float* __restrict__ logits, const int* __restrict__ targets,
                         float* __restrict__ losses, float* __restrict__ dlogits, int rows,
                         int vocab, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    Pack<kWidth>* stage = reinterpret_cast<Pack<kWidth>*>(stage_bytes);
    const std::size_t row = blockIdx.x;
    const float* in = logits + row * vocab;  // 64-bit offset: rows * vocab can pass 2^31
    float* grad = dlogits + row * vocab;
    const int packs = vocab / kWidth;
    const int target = targets[row];  // in flight with the row

    // Pass 1: thread t reads packs t, t + kStagedBlock, ... (coalesced), kLoadsInFlight of them
    // issued before the first is used. Each is parked in shared memory at its own index and
    // added to the thread's online state. A thread later reads back exactly the slots it wrote
    // itself, so the stage needs no barrier.
    SoftmaxState state{-INFINITY, 0.0f};
    for (int first = threadIdx.x; first < packs; first += kLoadsInFlight * kStagedBlock) {
        Pack<kWidth> batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kStagedBlock * j;
            if (p < packs) batch[j] = load_pack<kWidth>(in + p * kWidth);
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kStagedBlock * j;
            if (p < packs) {
                if (staged) stage[p] = batch[j];
                state = add_pack(state, batch[j]);
            }
        }
    }
    const float target_logit = threadIdx.x == 0 ? in[target] : 0.0f;  // read as above
    const SoftmaxState row_state = group_merge<kStagedBlock>(state);
    if (threadIdx.x == 0) losses[row] = loss_of(row_state, target_logit);

    // Pass 2: the same packs, from shared memory (or from a last read of the logits).
    const float inv_sum = 1.0f / row_state.sum;
    const float inv_rows = 1.0f / rows;
#pragma unroll 4
    for (int p = threadIdx.x; p < packs; p += kStagedBlock) {
        const Pack<kWidth> x = staged ? stage[p] : load_pack_last_use<kWidth>(in + p * kWidth);
        store_pack(grad + p * kWidth,
                   gradient(x, p * kWidth, target, row_state, inv_sum, inv_rows));
    }
}

// Shared memory a block of `kernel` may use beyond its static arrays on this GPU (227 KB on an
// H100, 163 KB on an A100, 64 KB on a T4), opted into once per kernel: above 48 KB a kernel must
// ask for it explicitly.
template <class Kernel>
std::size_t opt_in_stage_bytes(Kernel kernel) {
    int device = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const int bytes = optin - static_cast<int>(attributes.sharedSizeBytes);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return static_cast<std::size_t>(bytes);
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
    } else if (vocab <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 classes: a block per row, in registers (16 KB: several rows per SM).
        cross_entropy_in_registers<kWidth, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(logits, targets, losses, dlogits, rows, vocab);
    } else {
        // More: a block per row, staged in shared memory when it fits. GPT-2's 50304 logits are
        // 201 KB: one block per SM, whose 1024 threads keep 64 KB of loads in flight.
        const auto kernel = cross_entropy_staged<kWidth>;
        static const std::size_t stage_capacity = opt_in_stage_bytes(kernel);
        const std::size_t row_bytes = static_cast<std::size_t>(vocab) * sizeof(float);
        const bool staged = row_bytes <= stage_capacity;
        kernel<<<rows, kStagedBlock, staged ? row_bytes : 0>>>(logits, targets, losses, dlogits,
                                                               rows, vocab, staged);
    }
    CUDA_CHECK_LAUNCH();
}

bool aligned_16(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

}  // namespace

void cross_entropy(const float* logits, const int* targets, float* losses, float* dlogits, int rows,
                   int vocab) {
    // float4 needs every row start on a 16-byte boundary: vocab % 4 == 0 and aligned pointers.
    if (vocab % 4 == 0 && aligned_16(logits) && aligned_16(dlogits))
        launch<4>(logits, targets, losses, dlogits, rows, vocab);
    else
        launch<1>(logits, targets, losses, dlogits, rows, vocab);
}
