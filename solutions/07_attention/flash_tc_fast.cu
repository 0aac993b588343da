// 07_attention/flash_tc_fast: flash attention forward on mma.sync, tuned. Fast reference (the
// readable one is flash_tc.cu).
//
// Teaches: what bounds the readable kernel once its copies overlap the arithmetic: shared-memory
// reads and instructions per mma. A warp owns 32 query rows instead of 16, so every K and V
// fragment it reads with ldmatrix feeds two mma instead of one (Q's fragments are read again at
// every tile: no registers are left to hold them), and a block of 4 warps owns 128 rows, so every
// K/V tile that crosses from L2 serves twice the rows. The K/V tiles come through a ring of shared
// stages with one barrier per tile; the copies are an unrolled run with their addresses computed
// once; the softmax takes one ex2.approx.ftz per score, and a warp whose row maxima did not grow
// leaves O alone. The module README says what each of these bought on an H100. Same swizzle,
// fragments, masking and heaviest-first order as the readable kernel.
//
// Run:  grader run 07/flash_tc --solutions      (the "flash_tc (fast)" row)
// Contract: flash_tc.h                          Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "course/launch.h"
#include "flash_tc.h"
#include "tensor_core.h"

// The readable solution, whole: its launcher runs where this kernel's shared memory does not fit
// (GPUs that opt in to less than this tiling needs). Every header it includes is included above,
// so that none of them lands inside the namespace.
namespace readable {
#include "flash_tc.cu"
}  // namespace readable

namespace {

// The tiling per head dimension, chosen by the sweeps of dev/tuning/07_attention.md: warps per
// block; m16 row tiles per warp (a warp owns 16 kRowTiles query rows, a block kWarps times that);
// keys per K/V tile; K/V stages in the shared ring; Q's fragments held in registers (1) or read
// with ldmatrix at every tile (0); the blocks per SM __launch_bounds__ budgets registers for.
constexpr int kWarpsD64 = 4;
constexpr int kRowTilesD64 = 2;
constexpr int kKeysD64 = 128;
constexpr int kStagesD64 = 2;
constexpr int kQInRegistersD64 = 0;
constexpr int kBlocksPerSmD64 = 2;
constexpr int kWarpsD128 = 4;
constexpr int kRowTilesD128 = 2;
constexpr int kKeysD128 = 64;
constexpr int kStagesD128 = 2;
constexpr int kQInRegistersD128 = 0;
constexpr int kBlocksPerSmD128 = 2;

template <int kD_, int kWarps_, int kRowTiles_, int kBlockN_, int kStages_, int kQInRegisters_,
          int kBlocksPerSm_>
struct Tiling {
    static constexpr int kD = kD_;
    static constexpr int kWarps = kWarps_;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kRowTiles = kRowTiles_;
    static constexpr int kWarpRows = 16 * kRowTiles;
    static constexpr int kBlockM = kWarpRows * kWarps;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kStages = kStages_;
    static constexpr bool kQInRegisters = kQInRegisters_ != 0;
    static constexpr int kBlocksPerSm = kBlocksPerSm_;
    static constexpr int kSharedBytes = (kBlockM + 2 * kStages * kBlockN) * kD * 2;
    static_assert(kStages >= 2 && kBlockN % 16 == 0, "a ring, whole k16 steps of P V");
};

using TilingD64 =
    Tiling<64, kWarpsD64, kRowTilesD64, kKeysD64, kStagesD64, kQInRegistersD64, kBlocksPerSmD64>;
using TilingD128 = Tiling<128, kWarpsD128, kRowTilesD128, kKeysD128, kStagesD128, kQInRegistersD128,
                          kBlocksPerSmD128>;

// cp.async of tiles of [rows][kD] bf16 into swizzled shared tiles, kThreads threads. Thread i
// copies chunk i % kChunks of rows i / kChunks, i / kChunks + kRowStep, ...: kRowStep is a
// multiple of 8, so the swizzled chunk (chunk ^ row % 8) is the same in all of them and both
// addresses are computed once; the copies of a tile are an unrolled run of cp.async.
template <int kD, int kThreads>
struct TileCopier {
    static constexpr int kChunks = kD / 8;  // 16-byte chunks per row
    static constexpr int kRowStep = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kRowStep % 8 == 0, "one swizzled chunk per thread");

    int row;            // the first row this thread copies
    int global_offset;  // of its chunk in that row, in elements
    int shared_offset;  // the same chunk swizzled

    __device__ TileCopier()
        : row(threadIdx.x / kChunks),
          global_offset(row * kD + threadIdx.x % kChunks * 8),
          shared_offset(tc::swizzled<kD>(row, threadIdx.x % kChunks * 8)) {}

    // Rows [row0, row0 + kRows) of src into tile; rows past T are zero-filled.
    template <int kRows>
    __device__ void copy(tc::Element* tile, const tc::Element* src, int row0, int T) const {
        static_assert(kRows % kRowStep == 0, "every thread copies the same number of rows");
        const tc::Element* from = src + static_cast<long long>(row0) * kD + global_offset;
        if (row0 + kRows <= T) {  // every tile but the last: no row to check
#pragma unroll
            for (int i = 0; i < kRows / kRowStep; ++i)
                tc::cp_async_16(tile + shared_offset + i * kRowStep * kD, from + i * kRowStep * kD,
                                true);
            return;
        }
#pragma unroll
        for (int i = 0; i < kRows / kRowStep; ++i) {
            const bool valid = row0 + row + i * kRowStep < T;
            // A row past the end reads nothing (src-size 0); its address must still be a valid one.
            tc::cp_async_16(tile + shared_offset + i * kRowStep * kD,
                            valid ? from + i * kRowStep * kD : src, valid);
        }
    }
};

// tc::swizzled<kD>(row0 + row, col0 + col) for row0 a multiple of 8 and col0 of 16, given
// lane_offset = tc::swizzled<kD>(row, col) with row < 16 and col < 16 (the lane's ldmatrix
// source): the swizzle XORs the chunk with row % 8, which row0 leaves alone, and col0's chunk bits
// meet only an XOR, so the step is one XOR and an add of constants (the loops are unrolled).
template <int kD>
__device__ __forceinline__ int swizzled_step(int lane_offset, int row0, int col0) {
    return row0 * kD + (lane_offset ^ col0);
}

template <class Tl>
__global__ void __launch_bounds__(Tl::kThreads, Tl::kBlocksPerSm)
    flash_tc_fast_kernel(const tc::Element* __restrict__ Q, const tc::Element* __restrict__ K,
                         const tc::Element* __restrict__ V, tc::Element* __restrict__ O,
                         float* __restrict__ L, int T, float scale, bool causal) {
    constexpr int kD = Tl::kD, kBlockM = Tl::kBlockM, kBlockN = Tl::kBlockN;
    constexpr int kStages = Tl::kStages, kRowTiles = Tl::kRowTiles;
    extern __shared__ __align__(128) unsigned char shared_bytes[];
    auto* q_tile = reinterpret_cast<tc::Element*>(shared_bytes);  // [kBlockM][kD]
    tc::Element* kv_ring = q_tile + kBlockM * kD;                 // [kStages][K, V][kBlockN][kD]
    const auto k_stage = [&](int stage) { return kv_ring + stage * 2 * kBlockN * kD; };
    const auto v_stage = [&](int stage) { return k_stage(stage) + kBlockN * kD; };

    // Causal blocks differ in work (the last query tile sees every key): the heaviest go first.
    // The blocks of one head are neighbours in the grid: they run together and share K/V in L2.
    const int q_block = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = q_block * kBlockM;
    const long long head = blockIdx.y;
    Q += head * T * kD;
    K += head * T * kD;
    V += head * T * kD;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;       // the fragment's row group and column pair
    const int warp_row = warp * Tl::kWarpRows;  // this warp's first row in the block
    const int row0 = q0 + warp_row;             // ... and in the head
    // The swizzled offsets of this lane's ldmatrix row in a 16 x 16 block: A's pattern (Q, and V
    // with .trans) and an n-major B's (K), as in the readable kernel.
    const course::Coord a_src = course::ldmatrix_a_source(lane);
    const course::Coord b_src = course::ldmatrix_b_source(lane);
    const int a_lane = tc::swizzled<kD>(a_src.row, a_src.col);
    const int b_lane = tc::swizzled<kD>(b_src.row, b_src.col);

    const int key_tiles =
        causal ? course::ceil_div(min(T, q0 + kBlockM), kBlockN) : course::ceil_div(T, kBlockN);

    // The ring: tiles 0 .. kStages - 2 in flight before the loop (Q in the first group), and
    // each iteration issues the tile kStages - 1 ahead into the stage the previous tile freed.
    const TileCopier<kD, Tl::kThreads> copier;
    copier.template copy<kBlockM>(q_tile, Q, q0, T);
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < key_tiles) {
            copier.template copy<kBlockN>(k_stage(s), K, s * kBlockN, T);
            copier.template copy<kBlockN>(v_stage(s), V, s * kBlockN, T);
        }
        tc::cp_async_commit();
    }

    std::uint32_t q_frag[Tl::kQInRegisters ? kRowTiles : 1][Tl::kQInRegisters ? kD / 16 : 1][4];
    float o[kRowTiles][kD / 8][4] = {};  // the warp's 16 kRowTiles x kD output accumulators
    float row_max[kRowTiles][2];         // scale * log2(e) * (raw-score maximum), rows g, g + 8
    float row_sum[kRowTiles][2] = {};    // this lane's part of the sums of exp (4 lanes per row)
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m) row_max[m][0] = row_max[m][1] = -INFINITY;
    const float scale_log2 = scale * 1.4426950408889634f;  // exp(scale x) = exp2(scale_log2 x)

    for (int tile = 0; tile < key_tiles; ++tile) {
        tc::cp_async_wait<kStages - 2>();  // this thread's copies of this tile have landed
        // ... everyone's have; and every warp is done with the previous tile, whose stage the
        // copies issued next overwrite: the one barrier of the iteration.
        __syncthreads();
        {
            const int ahead = tile + kStages - 1;
            if (ahead < key_tiles) {
                copier.template copy<kBlockN>(k_stage(ahead % kStages), K, ahead * kBlockN, T);
                copier.template copy<kBlockN>(v_stage(ahead % kStages), V, ahead * kBlockN, T);
            }
            tc::cp_async_commit();  // also when empty: the wait above counts groups
        }
        if constexpr (Tl::kQInRegisters) {
            if (tile == 0) {
#pragma unroll
                for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
                    for (int kk = 0; kk < kD / 16; ++kk)
                        tc::ldmatrix_x4(
                            q_frag[m][kk],
                            q_tile + swizzled_step<kD>(a_lane, warp_row + m * 16, kk * 16));
            }
        }
        const int key0 = tile * kBlockN;
        // Causal: a warp whose last row comes before the tile's first key sees none of it.
        if (causal && key0 > row0 + Tl::kWarpRows - 1) continue;
        // Keys past T and, causal, keys after the query: only the tiles that reach past either.
        const bool masked = key0 + kBlockN > T || (causal && key0 + kBlockN - 1 > row0);
        const tc::Element* k_tile = k_stage(tile % kStages);
        const tc::Element* v_tile = v_stage(tile % kStages);

        // S = Q K^T: kRowTiles x kBlockN / 8 accumulator tiles. Each K fragment (plain ldmatrix,
        // as in the readable kernel) serves every row tile of the warp.
        float s[kRowTiles][kBlockN / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
            std::uint32_t q_step[kRowTiles][4];
#pragma unroll
            for (int m = 0; m < kRowTiles; ++m) {
                if constexpr (Tl::kQInRegisters) {
#pragma unroll
                    for (int r = 0; r < 4; ++r) q_step[m][r] = q_frag[m][kk][r];
                } else {
                    tc::ldmatrix_x4(q_step[m],
                                    q_tile + swizzled_step<kD>(a_lane, warp_row + m * 16, kk * 16));
                }
            }
#pragma unroll
            for (int p = 0; p < kBlockN / 16; ++p) {
                std::uint32_t b[4];
                tc::ldmatrix_x4(b, k_tile + swizzled_step<kD>(b_lane, p * 16, kk * 16));
#pragma unroll
                for (int m = 0; m < kRowTiles; ++m) {
                    tc::mma(s[m][2 * p], q_step[m], b[0], b[1]);
                    tc::mma(s[m][2 * p + 1], q_step[m], b[2], b[3]);
                }
            }
        }

        if (masked) {
#pragma unroll
            for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
                for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        const int key = key0 + n * 8 + 2 * t + i % 2;
                        const int row = row0 + m * 16 + g + 8 * (i / 2);
                        if (key >= T || (causal && key > row)) s[m][n][i] = -INFINITY;
                    }
        }

        // The online softmax on the fragments, as in the readable kernel, with the maxima kept
        // pre-multiplied by scale * log2(e): p = exp2(s * scale_log2 - max) is one FFMA and one
        // ex2 per score.
        float correction[kRowTiles][2];
#pragma unroll
        for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float tile_max = -INFINITY;
#pragma unroll
                for (int n = 0; n < kBlockN / 8; ++n)
                    tile_max = fmaxf(tile_max, fmaxf(s[m][n][2 * h], s[m][n][2 * h + 1]));
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
                const float new_max = fmaxf(row_max[m][h], tile_max * scale_log2);
                // A row with every key so far masked keeps max -inf: subtract 0 instead of -inf.
                const float subtract = new_max == -INFINITY ? 0.0f : new_max;
                correction[m][h] = tc::exp2_ftz(row_max[m][h] - subtract);  // 0 on the first tile
                row_max[m][h] = new_max;
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
                    for (int i = 2 * h; i < 2 * h + 2; ++i) {
                        s[m][n][i] = tc::exp2_ftz(fmaf(s[m][n][i], scale_log2, -subtract));
                        sum += s[m][n][i];
                    }
                row_sum[m][h] = row_sum[m][h] * correction[m][h] + sum;
            }
        // Past the first tiles a row's maximum seldom grows: where no row of the warp's did, every
        // correction is exactly 1 and O stays as it is: one vote instead of a multiply per O value.
        bool grew = false;
#pragma unroll
        for (int m = 0; m < kRowTiles; ++m)
            grew = grew || correction[m][0] != 1.0f || correction[m][1] != 1.0f;
        if (__any_sync(0xffffffffu, grew)) {
#pragma unroll
            for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
                for (int n = 0; n < kD / 8; ++n) {
                    o[m][n][0] *= correction[m][0];
                    o[m][n][1] *= correction[m][0];
                    o[m][n][2] *= correction[m][1];
                    o[m][n][3] *= correction[m][1];
                }
        }

        // O += P V: P's accumulators are A fragments (as in the readable kernel); each V
        // fragment (ldmatrix .trans) serves every row tile of the warp.
#pragma unroll
        for (int j = 0; j < kBlockN / 16; ++j) {
            std::uint32_t p_frag[kRowTiles][4];
#pragma unroll
            for (int m = 0; m < kRowTiles; ++m) {
                p_frag[m][0] = tc::pack(s[m][2 * j][0], s[m][2 * j][1]);
                p_frag[m][1] = tc::pack(s[m][2 * j][2], s[m][2 * j][3]);
                p_frag[m][2] = tc::pack(s[m][2 * j + 1][0], s[m][2 * j + 1][1]);
                p_frag[m][3] = tc::pack(s[m][2 * j + 1][2], s[m][2 * j + 1][3]);
            }
#pragma unroll
            for (int p = 0; p < kD / 16; ++p) {
                std::uint32_t b[4];
                tc::ldmatrix_x4<true>(b, v_tile + swizzled_step<kD>(a_lane, j * 16, p * 16));
#pragma unroll
                for (int m = 0; m < kRowTiles; ++m) {
                    tc::mma(o[m][2 * p], p_frag[m], b[0], b[1]);
                    tc::mma(o[m][2 * p + 1], p_frag[m], b[2], b[3]);
                }
            }
        }
    }

    // As the readable kernel: add the 4 lanes' row sums, normalize, write O and L.
#pragma unroll
    for (int m = 0; m < kRowTiles; ++m)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float sum = row_sum[m][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const int row = row0 + m * 16 + g + 8 * h;
            if (row >= T) continue;
            const float inv_sum = 1.0f / sum;
            tc::Element* out = O + head * T * kD + static_cast<long long>(row) * kD;
#pragma unroll
            for (int n = 0; n < kD / 8; ++n)
                *reinterpret_cast<std::uint32_t*>(out + n * 8 + 2 * t) =
                    tc::pack(o[m][n][2 * h] * inv_sum, o[m][n][2 * h + 1] * inv_sum);
            // L = log sum_j exp(scale s_j) = ln 2 * (the row's maximum, in log2 units) + log(sum).
            if (t == 0) L[head * T + row] = row_max[m][h] * 0.6931471805599453f + logf(sum);
        }
}

template <class Tl>
void launch(const tc::Element* Q, const tc::Element* K, const tc::Element* V, tc::Element* O,
            float* L, int batch, int heads, int T, float scale, bool causal) {
    // Where a block cannot have this tiling's shared memory (GPUs that opt in to less than an
    // A100 or an H100), or this build has no cp.async (sm_75, in fp16), the readable kernel runs.
    static const std::size_t available = course::opt_in_shared_bytes(flash_tc_fast_kernel<Tl>);
    if (!tc::kAsyncCopies || available < static_cast<std::size_t>(Tl::kSharedBytes)) {
        readable::flash_tc(Q, K, V, O, L, batch, heads, T, Tl::kD, scale, causal);
        return;
    }
    const dim3 grid(course::ceil_div(T, Tl::kBlockM), batch * heads);
    flash_tc_fast_kernel<Tl>
        <<<grid, Tl::kThreads, Tl::kSharedBytes>>>(Q, K, V, O, L, T, scale, causal);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_tc(const tc::Element* Q, const tc::Element* K, const tc::Element* V, tc::Element* O,
              float* L, int batch, int heads, int T, int D, float scale, bool causal) {
    if (D == 64)
        launch<TilingD64>(Q, K, V, O, L, batch, heads, T, scale, causal);
    else
        launch<TilingD128>(Q, K, V, O, L, batch, heads, T, scale, causal);
}
