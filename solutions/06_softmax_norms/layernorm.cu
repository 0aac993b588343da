// 06_softmax_norms/layernorm: LayerNorm forward, one block (or warp) per row, Welford statistics.
// Reference solution.
//
// Teaches: Welford's mean and variance, and how two partial Welford states merge (the same merge
// serves a float4, a thread, a warp and the block); block-wide reductions of a struct; float4
// loads; keeping the row on chip (in registers, and when it is long in registers and shared memory:
// on Hopper those of a cluster of blocks) between the statistics and the write, so that device
// memory reads x once; saving the statistics for the backward pass. Memory-bound: the checker
// reports the bandwidth next to a device-to-device copy.
//
// Run:  grader run 06/layernorm --solutions
// Contract: layernorm.h                Notes:  notes/06_softmax_norms.md
#include <cstddef>

#include "course/exercise.h"
#include "layernorm.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// Where a row waits between its statistics and its write (the launcher picks by length):
//  - registers: each thread keeps kCachedFloats of the row (4 float4 or 16 floats), so a warp
//    holds a row of up to 512 floats (kRegisterBlock / 32 rows per block) and a block of
//    kRegisterBlock threads one of up to 4096;
//  - registers and shared memory: longer rows are staged. On Hopper a row is split over a cluster
//    of blocks of kClusterBlock threads, each keeping a slice of up to kSliceBytes, and the blocks
//    merge their statistics through distributed shared memory: a 50304-float row (201 KB) takes
//    2 blocks. Each thread holds kHeldPacks packs of its block's slice in registers and the rest
//    goes to dynamic shared memory, so that an SM holds 3 blocks of different rows and one row's
//    reduction hides behind the others' loads. Before Hopper one block of kStagedBlock threads
//    keeps the whole row the same way (up to 80 KB in registers and 163 KB of shared memory on
//    an A100): one row per SM;
//  - nowhere: the part of a row that does not fit is read a second time.
// Either way a thread has several 16-byte loads in flight (kCachedFloats / 4, or kHeldPacks and
// kLoadsInFlight).
constexpr int kCachedFloats = 16;
constexpr int kRegisterBlock = 256;
// At least 4 register-tier blocks resident per SM: a budget of 64 registers per thread. (Left to
// itself, ptxas squeezed the float4 kernel into 32 registers and spilled to local memory.)
constexpr int kMinRegisterBlocksPerSm = 4;
constexpr std::size_t kSliceBytes = 100 * 1024;
// A 100 KB slice is 30 KB in the registers of 384 threads (5 packs each) and 70 KB of shared
// memory: 3 blocks per SM (3 x 70 KB of its 227 KB), with 56 registers per thread. Measured at
// 4096 x 50304 on an H100, % of the copy: 91.1; all 100 KB in shared memory, 2 blocks of 512
// threads per SM: 89.3; 3 blocks of 256 or 320 threads (7 or 6 packs held): 85-88; 2 blocks of
// 512 threads holding 2 packs each: 86.
constexpr int kClusterBlock = 384;
constexpr int kClusterBlocksPerSm = 3;
constexpr int kHeldPacks = 5;
constexpr int kStagedBlock = 1024;
// The staged packs are read 3 at a time per thread (the 5 held packs are already in flight):
// 1, 2, 3, 4 give 90.2, 90.1, 90.8, 88.7% of the copy at 4096 x 50304 (with 2 write packs).
constexpr int kLoadsInFlight = 3;
// The write loads 3 packs per output pack (x from the stage, gamma and beta from L2), 3 output
// packs at a time: 1 leaves the write waiting on L2 (77% of the copy at 4096 x 50304), 2 gives
// 90.8%, 3 gives 91.1%, and 4 spills registers.
constexpr int kWritesInFlight = 3;

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
    // Worth 1.3-1.8 points of the copy bandwidth at 4096 x 50304.
    const float b_share = __fdividef(b.count, count);
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

// A store of y for rows too long for registers: __stcs ("cache streaming") marks the lines
// evict-first in L2, so that the freshly written y gives way before gamma and beta, which the next
// rows read again (+0.3 points of the copy bandwidth at 4096 x 50304).
template <int kWidth>
__device__ void store_pack_streaming(float* p, const Pack<kWidth>& pack) {
    if constexpr (kWidth == 4) {
        const float4 q = make_float4(pack.v[0], pack.v[1], pack.v[2], pack.v[3]);
        __stcs(reinterpret_cast<float4*>(p), q);
    } else {
        __stcs(p, pack.v[0]);
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

// y for a pack of x and the same columns of gamma (scale) and beta (shift).
template <int kWidth>
__device__ Pack<kWidth> normalize(const Pack<kWidth>& in, const Pack<kWidth>& scale,
                                  const Pack<kWidth>& shift, float row_mean, float row_rstd) {
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

    // The write, from the registers. gamma and beta are read by every row: L1 or L2 has them.
#pragma unroll
    for (int j = 0; j < kPacks; ++j) {
        const int p = lane + kGroup * j;
        if (p < packs)
            store_pack(y_row + p * kWidth,
                       normalize(cache[j], load_pack<kWidth>(gamma + p * kWidth),
                                 load_pack<kWidth>(beta + p * kWidth), row_state.mean, row_rstd));
    }
}

// Longer rows, kept in registers and shared memory. Launched in clusters (Hopper), the blocks of
// a cluster share one row, each keeping the slice course::cluster_slice gives it; otherwise one
// block holds the whole row. `staged`: the part of the slice that is not held in registers fits
// in the block's dynamic shared memory, and the write reads it there; otherwise (a row too long
// even for that) the write reads that part of x a second time.
template <int kWidth, int kBlock, int kBlocksPerSm>
__global__ void __launch_bounds__(kBlock, kBlocksPerSm)
    layernorm_staged(const float* __restrict__ x, const float* __restrict__ gamma,
                     const float* __restrict__ beta, float* __restrict__ y,
                     float* __restrict__ mean, float* __restrict__ rstd, int cols, bool staged) {
    extern __shared__ __align__(16) unsigned char stage_bytes[];
    __shared__ Welford block_state;  // read by the other blocks of the cluster
    Pack<kWidth>* stage = reinterpret_cast<Pack<kWidth>*>(stage_bytes);
    const unsigned slices = course::cluster_blocks();  // blocks per row: 1 without clusters
    const unsigned rank = course::cluster_rank();
    const std::size_t row = blockIdx.x / slices;
    const float* x_row = x + row * cols;  // 64-bit offset: rows * cols can pass 2^31
    float* y_row = y + row * cols;
    // This block's packs: shares rounded to 128 bytes (32 floats) so each starts on a line.
    const course::Slice slice = course::cluster_slice(cols / kWidth, slices, rank, 32 / kWidth);
    // The slice waits for the write in two places: thread t holds packs begin + t + kBlock * j
    // (j < kHeldPacks) in registers, and the packs from stage_begin on are staged in shared memory
    // (stage[0] is pack stage_begin).
    const int stage_begin = min(slice.begin + kHeldPacks * kBlock, slice.end);

    // Pass 1: all kHeldPacks held packs are loaded at once (coalesced: at each j the block reads
    // kBlock consecutive packs). Meanwhile thread t reads the staged packs stage_begin + t,
    // stage_begin + t + kBlock, ..., kLoadsInFlight of them issued before the first is used, parks
    // each in shared memory and merges it into its state; the held packs, arrived by then, are
    // merged last. A thread later reads back exactly the slots it wrote itself, so the stage needs
    // no barrier.
    Pack<kWidth> held[kHeldPacks];
#pragma unroll
    for (int j = 0; j < kHeldPacks; ++j) {
        const int p = slice.begin + threadIdx.x + kBlock * j;
        if (p < slice.end) held[j] = load_pack<kWidth>(x_row + p * kWidth);
    }
    Welford state{0.0f, 0.0f, 0.0f};
    for (int first = stage_begin + threadIdx.x; first < slice.end;
         first += kLoadsInFlight * kBlock) {
        Pack<kWidth> batch[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) batch[j] = load_pack<kWidth>(x_row + p * kWidth);
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) {
                if (staged) stage[p - stage_begin] = batch[j];
                state = welford_merge(state, welford_of(batch[j]));
            }
        }
    }
#pragma unroll
    for (int j = 0; j < kHeldPacks; ++j)
        if (slice.begin + threadIdx.x + kBlock * j < slice.end)
            state = welford_merge(state, welford_of(held[j]));
    Welford row_state = group_merge<kBlock>(state);
    // In a cluster, the blocks' states are merged too (course/cluster.h).
    row_state = course::cluster_reduce(row_state, &block_state,
                                       [](Welford a, Welford b) { return welford_merge(a, b); });
    course::cluster_arrive();  // done reading the other blocks' states
    const float row_rstd = rstd_of(row_state, cols);
    if (threadIdx.x == 0 && rank == 0) {
        mean[row] = row_state.mean;
        rstd[row] = row_rstd;
    }

    // Pass 2: the same packs, the held ones first, then the staged ones from shared memory (or
    // from a last read of x) in batches, so that the loads of gamma and beta (from L2) are in
    // flight together.
#pragma unroll
    for (int j = 0; j < kHeldPacks; ++j) {
        const int p = slice.begin + threadIdx.x + kBlock * j;
        if (p < slice.end)
            store_pack_streaming(y_row + p * kWidth,
                                 normalize(held[j], load_pack<kWidth>(gamma + p * kWidth),
                                           load_pack<kWidth>(beta + p * kWidth), row_state.mean,
                                           row_rstd));
    }
    for (int first = stage_begin + threadIdx.x; first < slice.end;
         first += kWritesInFlight * kBlock) {
        Pack<kWidth> in[kWritesInFlight], scale[kWritesInFlight], shift[kWritesInFlight];
#pragma unroll
        for (int j = 0; j < kWritesInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) {
                in[j] = staged ? stage[p - stage_begin] : load_pack_last_use<kWidth>(x_row + p * kWidth);
                scale[j] = load_pack<kWidth>(gamma + p * kWidth);
                shift[j] = load_pack<kWidth>(beta + p * kWidth);
            }
        }
#pragma unroll
        for (int j = 0; j < kWritesInFlight; ++j) {
            const int p = first + kBlock * j;
            if (p < slice.end) {
                const Pack<kWidth> out =
                    normalize(in[j], scale[j], shift[j], row_state.mean, row_rstd);
                store_pack_streaming(y_row + p * kWidth, out);
            }
        }
    }
    course::cluster_wait();  // the other blocks are done with our state
}

// The shared memory that a block of `block` threads needs for a slice of `packs` packs: all but
// the kHeldPacks per thread that it holds in registers.
template <int kWidth>
std::size_t stage_bytes_for(int packs, int block) {
    const int staged_packs = packs - kHeldPacks * block;
    return staged_packs > 0 ? staged_packs * sizeof(Pack<kWidth>) : 0;
}

// A long row: in a cluster of blocks on Hopper, else in one block.
template <int kWidth>
void launch_staged(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                   float* rstd, int rows, int cols) {
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * sizeof(float);
    const auto in_cluster = layernorm_staged<kWidth, kClusterBlock, kClusterBlocksPerSm>;
    static const bool clusters = course::clusters_available(in_cluster);
    static const std::size_t cluster_capacity = course::opt_in_shared_bytes(in_cluster);
    const int slices = static_cast<int>(course::ceil_div(row_bytes, kSliceBytes));
    if (clusters && slices <= static_cast<int>(course::kMaxClusterBlocks)) {
        // The first slice is the longest (at most kSliceBytes).
        const course::Slice first = course::cluster_slice(cols / kWidth, slices, 0, 32 / kWidth);
        const std::size_t stage_bytes =
            stage_bytes_for<kWidth>(first.end - first.begin, kClusterBlock);
        course::launch_in_clusters(in_cluster, rows * slices, kClusterBlock, slices, stage_bytes,
                                   x, gamma, beta, y, mean, rstd, cols,
                                   stage_bytes <= cluster_capacity);
        return;
    }
    const auto one_block = layernorm_staged<kWidth, kStagedBlock, 1>;
    static const std::size_t capacity = course::opt_in_shared_bytes(one_block);
    const std::size_t stage_bytes = stage_bytes_for<kWidth>(cols / kWidth, kStagedBlock);
    const bool staged = stage_bytes <= capacity;
    one_block<<<rows, kStagedBlock, staged ? stage_bytes : 0>>>(x, gamma, beta, y, mean, rstd,
                                                                cols, staged);
    CUDA_CHECK_LAUNCH();
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
        CUDA_CHECK_LAUNCH();
    } else if (cols <= kRegisterBlock * kCachedFloats) {
        // Up to 4096 floats: a block per row, in registers (16 KB: several rows per SM).
        layernorm_in_registers<kWidth, kRegisterBlock>
            <<<rows, kRegisterBlock>>>(x, gamma, beta, y, mean, rstd, rows, cols);
        CUDA_CHECK_LAUNCH();
    } else {
        launch_staged<kWidth>(x, gamma, beta, y, mean, rstd, rows, cols);
    }
}

}  // namespace

void layernorm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
               float* rstd, int rows, int cols) {
    // float4 needs every row start on a 16-byte boundary: cols % 4 == 0 and aligned pointers.
    if (cols % 4 == 0 && course::is_aligned(x, 16) && course::is_aligned(y, 16) &&
        course::is_aligned(gamma, 16) && course::is_aligned(beta, 16))
        launch<4>(x, gamma, beta, y, mean, rstd, rows, cols);
    else
        launch<1>(x, gamma, beta, y, mean, rstd, rows, cols);
}
