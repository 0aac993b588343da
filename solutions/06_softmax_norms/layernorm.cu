// 06_softmax_norms/layernorm: LayerNorm forward, one block (or warp) per row, Welford statistics.
// Reference solution.
//
// Teaches: Welford's mean and variance, and how two partial Welford states merge (the same
// merge serves a float4, a thread, a warp and the block); block-wide reductions of a struct;
// float4 loads; keeping the row on chip (in registers, or in shared memory when it is long)
// between the statistics and the write, so that device memory reads x once; saving the
// statistics for the backward pass. Memory-bound: the checker reports the bandwidth next to a
// device-to-device copy.
//
// Run:  grader run 06/layernorm --solutions
// Contract: layernorm.h                Notes:  notes/06_softmax_norms.md
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "layernorm.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Where a row waits between its statistics and its write (the launcher picks by length):
//  - registers: each thread keeps kCachedFloats of the row (4 float4 or 16 floats), so a warp
//    holds a row of up to 512 floats (kRegisterBlock / 32 rows per block) and a block of
//    kRegisterBlock threads one of up to 4096;
//  - shared memory: longer rows get a block of kStagedBlock threads each, and the row is staged in
//    the block's dynamic shared memory (up to 227 KB, 58,000 floats, on an H100);
//  - nowhere: a row longer than that is read a second time.
// Either way a thread has several 16-byte loads in flight (kCachedFloats / 4 or kLoadsInFlight),
// so that even one block per SM keeps enough bytes on their way to saturate device memory.
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas squeezed the float4 kernel into 32 registers and spilled to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
constexpr int kStagedBlock = 1024;
constexpr int kLoadsInFlight = 4;

// Count, mean and M2 (the sum of squared deviations from the mean) of a set of values. The
// variance is m2 / count. The count is a float: it is exact up to 2^24 and saves conversions.
struct Welford {
    float count;
    float mean;
    float m2;
};

// The state of the union of two disjoint sets (Chan et al.). With delta = b.mean - a.mean, the
// mean moves towards b by its share of the count, and M2 gains the spread between the two means:
//   mean = a.mean + delta * nb / n,   m2 = a.m2 + b.m2 + delta^2 * na * nb / n.
// Nothing is subtracted from a large sum of squares, which is why this stays accurate when the
// mean is large next to the spread (E[x^2] - E[x]^2 does not).
__device__ Welford welford_merge(Welford a, Welford b) {
    const float count = a.count + b.count;
    if (count == 0.0f) return a;  // both empty: a thread that had no columns
    const float delta = b.mean - a.mean;
    const float b_share = b.count / count;
    return {count, a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * a.count * b_share};
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

// The Welford state of one pack, computed directly. The pairwise sum keeps a pack of equal
// values exact (x + x and 2x + 2x are), so a constant row gets its exact mean and M2 = 0.
template <int kWidth>
__device__ Welford welford_of(const Pack<kWidth>& pack) {
    if constexpr (kWidth == 4) {
        const float mean = ((pack.v[0] + pack.v[1]) + (pack.v[2] + pack.v[3])) * 0.25f;
        const float d0 = pack.v[0] - mean, d1 = pack.v[1] - mean;
        const float d2 = pack.v[2] - mean, d3 = pack.v[3] - mean;
        return {4.0f, mean, (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)};
    } else {
        return {1.0f, pack.v[0], 0.0f};
    }
}

// rstd = 1 / sqrt(var + eps), with the biased variance m2 / cols.
__device__ float rstd_of(const Welford& row, int cols) {
    return rsqrtf(row.m2 / cols + kLayerNormEps);
}

// y for the pack of x that starts at column col. gamma and beta are read by every row: they come
// from L1 or L2.
template <int kWidth>
__device__ Pack<kWidth> normalize(const Pack<kWidth>& in, const float* gamma, const float* beta,
                                  int col, float row_mean, float row_rstd) {
    const Pack<kWidth> scale = load_pack<kWidth>(gamma + col);
    const Pack<kWidth> shift = load_pack<kWidth>(beta + col);
    Pack<kWidth> out;
    for (int k = 0; k < kWidth; ++k)
        out.v[k] = (in.v[k] - row_mean) * row_rstd * scale.v[k] + shift.v[k];
    return out;
}

// Butterfly over the 32 lanes: after the 5 steps every lane holds the merge of all 32 states.
__device__ Welford warp_merge(Welford state) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const Welford other{__shfl_xor_sync(kFullMask, state.count, offset),
                            __shfl_xor_sync(kFullMask, state.mean, offset),
                            __shfl_xor_sync(kFullMask, state.m2, offset)};
        state = welford_merge(state, other);
    }
    return state;
}

// Merge of the states of the kGroup threads of a row (a warp, or a whole block of kGroup
// threads), returned to each of them. A block: lane 0 of each warp posts its warp's state, and
// after the barrier every warp merges the posted states itself. Called once per block.
template <int kGroup>
__device__ Welford group_merge(Welford state) {
    state = warp_merge(state);
    if constexpr (kGroup > 32) {
        constexpr int kWarps = kGroup / 32;
        __shared__ Welford warp_states[kWarps];
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
        if (lane == 0) warp_states[warp] = state;
        __syncthreads();  // every warp's state is posted before anyone reads them
        state = warp_merge(lane < kWarps ? warp_states[lane] : Welford{0.0f, 0.0f, 0.0f});
    }
    // Every lane merged the same states, but in its own order (lane i puts its own side first),
    // and welford_merge(a, b) does not round exactly like welford_merge(b, a): lanes may differ in
    // the last bit. Taking lane 0's result (the same in every warp) normalizes the whole row, and
    // saves its mean and rstd, with one set of numbers.
    return {__shfl_sync(kFullMask, state.count, 0), __shfl_sync(kFullMask, state.mean, 0),
            __shfl_sync(kFullMask, state.m2, 0)};
}

// Rows of up to kGroup * kCachedFloats floats, held in registers. kGroup threads per row: 32 (a
// warp; kRegisterBlock / 32 rows per block) or kRegisterBlock (the block). Thread `lane` keeps
// packs lane, lane + kGroup, lane + 2 * kGroup, ...: at each step the group reads kGroup
// consecutive packs (coalesced). kWidth divides cols, so every row starts aligned for packs.
template <int kWidth, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock, kMinRegisterBlocksPerSm)
    layernorm_in_registers(const float* __restrict__ x, const float* __restrict__ gamma,
                           const float* __restrict__ beta, float* __restrict__ y,
                           float* __restrict__ mean, float* __restrict__ rstd, int rows, int cols) {
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
    // stay out of the statistics and the write.
    Pack<kWidth> cache[kPacks];
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
        const int p = lane + kGroup * j;
        if (p < packs) cache[j] = load_pack<kWidth>(x_row + p * kWidth);
    }
    Welford state{0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kPacks; ++j)
        if (lane + kGroup * j < packs) state = welford_merge(state, welford_of(cache[j]));
    const Welford row_state = group_merge<kGroup>(state);
    const float row_rstd = rstd_of(row_state, cols);
    if (lane == 0) {
        mean[row] = row_state.mean;
        rstd[row] = row_rstd;
    }

    // The write, from the registers.
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
        const int p = lane + kGroup * j;
        if (p < packs)
            store_pack(y_row + p * kWidth,
                       normalize(cache[j], gamma, beta, p * kWidth, row_state.mean, row_rstd));
    }
}

// Longer rows: one block of kStagedBlock threads per row. `staged`: the block's dynamic shared
// memory holds the whole row (cols floats), and the write reads it there; otherwise (a row
// longer than shared memory) the write reads x a second time.
template <int kWidth>
__global__ void __launch_bounds__(kStagedBlock)
    layernorm_staged(const float* __restrict__ x, const float* __restrict__ gamma,
                     const float* __restrict__ beta, float* __restrict__ y,
                     float* __restrict__ mean, float* __restrict__ rstd, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    Pack<kWidth>* stage = reinterpret_cast<Pack<kWidth>*>(stage_bytes);
    const std::size_t row = blockIdx.x;
    const float* x_row = x + row * cols;  // 64-bit offset: rows * cols can pass 2^31
    float* y_row = y + row * cols;
    const int packs = cols / kWidth;

    // Pass 1: thread t reads packs t, t + kStagedBlock, ... (coalesced), kLoadsInFlight of them
    // issued before the first is used. Each is parked in shared memory at its own index and
    // merged into the thread's state. A thread later reads back exactly the slots it wrote
    // itself, so the stage needs no barrier.
    Welford state{0.0f, 0.0f, 0.0f};
    for (int first = threadIdx.x; first < packs; first += kLoadsInFlight * kStagedBlock) {
        Pack<kWidth> batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kStagedBlock * j;
            if (p < packs) batch[j] = load_pack<kWidth>(x_row + p * kWidth);
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kStagedBlock * j;
            if (p < packs) {
                if (staged) stage[p] = batch[j];
                state = welford_merge(state, welford_of(batch[j]));
            }
        }
    }
    const Welford row_state = group_merge<kStagedBlock>(state);
    const float row_rstd = rstd_of(row_state, cols);
    if (threadIdx.x == 0) {
        mean[row] = row_state.mean;
        rstd[row] = row_rstd;
    }

    // Pass 2: the same packs, from shared memory (or from a last read of x).
#pragma unroll 4
    for (int p = threadIdx.x; p < packs; p += kStagedBlock) {
        const Pack<kWidth> in = staged ? stage[p] : load_pack_last_use<kWidth>(x_row + p * kWidth);
        store_pack(y_row + p * kWidth,
                   normalize(in, gamma, beta, p * kWidth, row_state.mean, row_rstd));
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
void launch(const float* x, const float* gamma, const float* beta, float* y, float* mean,
            float* rstd, int rows, int cols) {
    if (cols <= 32 * kCachedFloats) {
        // Up to 512 floats: a warp per row, in registers.
        constexpr int kRowsPerBlock = kRegisterBlock / 32;
        layernorm_in_registers<kWidth, 32>
            <<<course::ceil_div(rows, kRowsPerBlock), kRegisterBlock>>>(x, gamma, beta, y, mean,
                                                                        rstd, rows, cols);
    } else if (cols <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 floats: a block per row, in registers (16 KB: several rows per SM).
        layernorm_in_registers<kWidth, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(x, gamma, beta, y, mean, rstd, rows, cols);
    } else {
        // Longer: a block per row, staged in shared memory when it fits. A 50304-float row is
        // 201 KB: one block per SM, whose 1024 threads keep 64 KB of loads in flight.
        const auto kernel = layernorm_staged<kWidth>;
        static const std::size_t stage_capacity = opt_in_stage_bytes(kernel);
        const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
        const bool staged = row_bytes <= stage_capacity;
        kernel<<<rows, kStagedBlock, staged ? row_bytes : 0>>>(x, gamma, beta, y, mean, rstd, cols,
                                                               staged);
    }
    CUDA_CHECK_LAUNCH();
}

bool aligned_16(const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

}  // namespace

void layernorm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
               float* rstd, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: cols % 4 == 0 and aligned pointers.
    if (cols % 4 == 0 && aligned_16(x) && aligned_16(y) && aligned_16(gamma) && aligned_16(beta))
        launch<4>(x, gamma, beta, y, mean, rstd, rows, cols);
    else
        launch<1>(x, gamma, beta, y, mean, rstd, rows, cols);
}
