// 06_softmax_norms/layernorm: LayerNorm forward, a warp or a block per row, Welford statistics.
// Reference solution (the readable one; layernorm_fast.cu adds what the long rows' target needs).
//
// Teaches: Welford's mean and variance, and how two partial Welford states merge (the same merge
// serves a float4, a thread, a warp and the block); block-wide reductions of a struct; float4
// loads; keeping the row on chip between the statistics and the write (in registers, or in the
// block's shared memory when it is long), so that device memory reads x once; saving the
// statistics for the backward pass. Memory-bound: the checker reports the bandwidth next to a
// device-to-device copy.
//
// Run:  grader run 06/layernorm --solutions
// Contract: layernorm.h                Notes:  notes/06_softmax_norms.md
#include <cstddef>

#include "course/exercise.h"
#include "layernorm.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Where a row waits between its statistics and its write (the launcher picks by length):
//  - registers: each thread keeps kCachedFloats of the row, so a warp holds a row of up to 512
//    floats (kRegisterBlock / 32 rows per block) and a block of kRegisterBlock threads one of up
//    to 4096;
//  - shared memory: one block of kStagedBlock threads per row stages it in dynamic shared memory
//    (a 50304-float row is 201 KB; an H100 block may have 227 KB);
//  - nowhere: a row longer than that is read a second time.
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas squeezed the float4 kernel into 32 registers and spilled to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
constexpr int kStagedBlock = 1024;
// Loads a thread issues before it uses the first (64 KB in flight per SM for float4s).
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
    // __fdividef: two instructions where `/` makes an IEEE-exact division of about ten, and the
    // merge runs once per float4 of the row (b_share is in [0, 1]; its 2-ulp error is harmless).
    const float b_share = __fdividef(b.count, count);
    return {count, a.mean + delta * b_share, a.m2 + b.m2 + delta * delta * a.count * b_share};
}

// The Welford state of one loaded vector, computed directly. The pairwise sum keeps a float4 of
// equal values exact (x + x and 2x + 2x are), so a constant row gets its exact mean and M2 = 0.
__device__ Welford welford_of(float v) { return {1.0f, v, 0.0f}; }
__device__ Welford welford_of(float4 v) {
    const float mean = ((v.x + v.y) + (v.z + v.w)) * 0.25f;
    const float dx = v.x - mean, dy = v.y - mean, dz = v.z - mean, dw = v.w - mean;
    return {4.0f, mean, (dx * dx + dy * dy) + (dz * dz + dw * dw)};
}

// rstd = 1 / sqrt(var + eps), with the biased variance m2 / cols.
__device__ float rstd_of(const Welford& row, int cols) {
    return rsqrtf(row.m2 / cols + kLayerNormEps);
}

// y for a vector of x and the same columns of gamma (scale) and beta (shift).
__device__ float normalize(float x, float scale, float shift, float row_mean, float row_rstd) {
    return (x - row_mean) * row_rstd * scale + shift;
}
__device__ float4 normalize(float4 x, float4 scale, float4 shift, float row_mean, float row_rstd) {
    return make_float4(normalize(x.x, scale.x, shift.x, row_mean, row_rstd),
                       normalize(x.y, scale.y, shift.y, row_mean, row_rstd),
                       normalize(x.z, scale.z, shift.z, row_mean, row_rstd),
                       normalize(x.w, scale.w, shift.w, row_mean, row_rstd));
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
// vectors lane, lane + kGroup, lane + 2 * kGroup, ...: at each step the group reads kGroup
// consecutive vectors (coalesced). Vec is float4 when every row starts 16-byte aligned, else
// float; the row is then cols / (floats per Vec) vectors, with no tail.
template <class Vec, int kGroup>
__global__ void __launch_bounds__(kRegisterBlock, kMinRegisterBlocksPerSm)
    layernorm_in_registers(const float* __restrict__ x, const float* __restrict__ gamma,
                           const float* __restrict__ beta, float* __restrict__ y,
                           float* __restrict__ mean, float* __restrict__ rstd, int rows, int cols) {
    constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);
    constexpr int kVecsPerThread = kCachedFloats / kFloatsPerVec;
    constexpr int kRowsPerBlock = kRegisterBlock / kGroup;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / kGroup;
    const int lane = threadIdx.x % kGroup;
    // Only a warp-wide group can be past the last row, and it leaves as a whole (a block-wide
    // group always has its row: the grid is exactly rows blocks, and no thread skips the barrier).
    if (row >= rows) return;
    // 64-bit offset: rows * cols can pass 2^31.
    const std::size_t offset = static_cast<std::size_t>(row) * cols;
    const Vec* x_row = reinterpret_cast<const Vec*>(x + offset);
    Vec* y_row = reinterpret_cast<Vec*>(y + offset);
    const Vec* scale = reinterpret_cast<const Vec*>(gamma);
    const Vec* shift = reinterpret_cast<const Vec*>(beta);
    const int vecs = cols / kFloatsPerVec;

    // The only read of the row: the loads are independent, so all of them are in flight
    // together. Fully unrolled loops make every index into `cache` a compile-time constant, which
    // is what lets the array live in registers. Slots past the end of the row are not loaded, and
    // stay out of the statistics and the write.
    Vec cache[kVecsPerThread];
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = lane + kGroup * j;
        if (k < vecs) cache[j] = x_row[k];
    }
    Welford state{0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j)
        if (lane + kGroup * j < vecs) state = welford_merge(state, welford_of(cache[j]));
    const Welford row_state = group_merge<kGroup>(state);
    const float row_rstd = rstd_of(row_state, cols);
    if (lane == 0) {
        mean[row] = row_state.mean;
        rstd[row] = row_rstd;
    }

    // The write, from the registers. gamma and beta are read by every row: L1 or L2 has them.
#pragma unroll
    for (int j = 0; j < kVecsPerThread; ++j) {
        const int k = lane + kGroup * j;
        if (k < vecs) y_row[k] = normalize(cache[j], scale[k], shift[k], row_state.mean, row_rstd);
    }
}

// Longer rows, one block of kStagedBlock threads per row. `staged`: the row fits in the block's
// dynamic shared memory, and the write reads it there; otherwise (a row too long even for that)
// the write reads x a second time. Thread t walks vectors t, t + kStagedBlock, ...: coalesced.
template <class Vec>
__global__ void __launch_bounds__(kStagedBlock)
    layernorm_staged(const float* __restrict__ x, const float* __restrict__ gamma,
                     const float* __restrict__ beta, float* __restrict__ y,
                     float* __restrict__ mean, float* __restrict__ rstd, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    Vec* stage = reinterpret_cast<Vec*>(stage_bytes);
    const std::size_t row = blockIdx.x;
    const Vec* x_row = reinterpret_cast<const Vec*>(x + row * cols);  // 64-bit offset
    Vec* y_row = reinterpret_cast<Vec*>(y + row * cols);
    const Vec* scale = reinterpret_cast<const Vec*>(gamma);
    const Vec* shift = reinterpret_cast<const Vec*>(beta);
    const int vecs = cols / static_cast<int>(sizeof(Vec) / sizeof(float));

    // Pass 1, the read of device memory, in rounds of kLoadsInFlight loads per thread: the loads
    // of a round are independent, so all of them are in flight together. Each vector is parked in
    // the stage and merged into the thread's state. A thread later reads back exactly the slots
    // it wrote itself, so the stage needs no barrier.
    Welford state{0.0f, 0.0f, 0.0f};
    for (int first = threadIdx.x; first < vecs; first += kLoadsInFlight * kStagedBlock) {
        Vec batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kStagedBlock * j;
            if (k < vecs) batch[j] = x_row[k];
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int k = first + kStagedBlock * j;
            if (k < vecs) {
                if (staged) stage[k] = batch[j];
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

    // Pass 2: the same vectors, from the stage (or from x again), normalized and written.
#pragma unroll 4
    for (int k = threadIdx.x; k < vecs; k += kStagedBlock)
        y_row[k] =
            normalize(staged ? stage[k] : x_row[k], scale[k], shift[k], row_state.mean, row_rstd);
}

template <class Vec>
void launch(const float* x, const float* gamma, const float* beta, float* y, float* mean,
            float* rstd, int rows, int cols) {
    if (cols <= 32 * kCachedFloats) {
        // Up to 512 floats: a warp per row, in registers.
        constexpr int kRowsPerBlock = kRegisterBlock / 32;
        layernorm_in_registers<Vec, 32><<<course::ceil_div(rows, kRowsPerBlock), kRegisterBlock>>>(
            x, gamma, beta, y, mean, rstd, rows, cols);
    } else if (cols <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 floats: a block per row, in registers (16 KB: several rows per SM).
        layernorm_in_registers<Vec, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(x, gamma, beta, y, mean, rstd, rows, cols);
    } else {
        // Longer: staged in shared memory where the block's opt-in allows (asked once per kernel).
        static const std::size_t capacity = course::opt_in_shared_bytes(layernorm_staged<Vec>);
        const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
        const bool staged = row_bytes <= capacity;
        layernorm_staged<Vec><<<rows, kStagedBlock, staged ? row_bytes : 0>>>(
            x, gamma, beta, y, mean, rstd, cols, staged);
    }
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void layernorm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
               float* rstd, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: cols % 4 == 0 and aligned pointers.
    if (cols % 4 == 0 && course::is_aligned(x, 16) && course::is_aligned(y, 16) &&
        course::is_aligned(gamma, 16) && course::is_aligned(beta, 16))
        launch<float4>(x, gamma, beta, y, mean, rstd, rows, cols);
    else
        launch<float>(x, gamma, beta, y, mean, rstd, rows, cols);
}
