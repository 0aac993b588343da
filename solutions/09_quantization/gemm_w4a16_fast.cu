// 09_quantization/gemm_w4a16_fast: y = W x for 1 to 64 tokens on the tensor cores, INT4 weights
// dequantized on their way into mma.sync's B fragments. Fast reference: the readable solution
// (gemm_w4a16.cu, included below) with what its profile shows it leaving on the table.
//
// Teaches: at 16 tokens the readable kernel is latency-bound, not bandwidth-bound (ncu on an H100:
// DRAM 44%, 16 warps an SM for want of registers, a third of the stalls on the dequantization's
// chain of dependent instructions, a group's x tile copied only one group ahead). At one m16
// tile (up to 16 tokens) four changes attack that. More warps an SM: blocks of 8 warps share
// their x tiles (half the copies of x per column of W), and __launch_bounds__ with a minimum of
// blocks makes ptxas fit 24 warps an SM (80 registers), with a ring of 2 groups of W a warp (48
// KB an SM in flight). x through a ring of 4 shared tiles, copied 3 groups ahead, not 1. A
// shorter chain from nibble to mma: the bf16 pair 136 is a kernel argument, not a literal, so
// that the mask and the XOR are one LOP3; and the subtraction of 136 goes: the mma multiplies x by
// 136 + q, and one more mma a step (x times a B of 136s, the same in every column) gives the
// 136 sum(x) to take off each group's partial sums before its scale, in float32 (exact products;
// the sum's rounding, at 2^-24 of 136 |x|, far below the tolerance). And each step's B
// registers are made before the previous step's mma are issued, so that ptxas has independent
// work between a dequantization and its use. Beyond one m16 tile, where the mma take a growing
// share of the time, the readable kernel's shape with the LOP3 and the early B registers (and the
// folding up to kFoldMaxTilesM tiles). The constants are
// dev/sweep.sh's (dev/tuning/09_quantization.md). GPUs without bf16 tensor cores (a T4) take the
// readable solution's path, which says so and skips.
//
// Run:  grader run 09/gemm_w4a16 --solutions     (the "gemm_w4a16 (fast)" row)
//       dev/sweep.sh 09_quantization/gemm_w4a16 '*AgainstCublas16Tokens*' base x2:kXStagesOneTile=2
// Contract: gemm_w4a16.h                          Notes:  notes/09_quantization.md
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "gemm_w4a16.h"
#include "tensor_core.h"

// The readable solution, whole: its tiling kernel, its group loads and its skip on GPUs without
// bf16 mma. (Every header it includes is included above, so that none of them lands inside the
// namespace.)
namespace readable {
#include "gemm_w4a16.cu"
}  // namespace readable

namespace {

using readable::GroupWeights;
using readable::kBf16Pair136;
using readable::kChunksPerRow;
using readable::kMinSlice;
using readable::kSteps;
using readable::kTilesPerWarp;

// At one m16 tile (up to 16 tokens, where the kernel is a read of W): warps a block, which share
// the block's x tiles (4: the readable kernel's blocks; 8 copy x half as often per column of W);
// the warps an SM that ptxas must fit the registers to (__launch_bounds__'s minimum of blocks; the
// readable kernel has 16, at 122 registers); and the ring of groups of W a warp keeps in flight
// (W in flight an SM: warps x kAhead x 1 KB). 24 warps (80 registers) x 2 groups: 48 KB, where
// 3.35 TB/s at about a microsecond's latency needs some 25 KB (a ring of 3 spills at 80 registers,
// sm_90). Beyond one m16 tile, where the mma take a growing share of the time, the readable
// kernel's shape: 4 warps, its ring, kWarpsPerSmMore warps an SM (its 164 to 168 registers).
constexpr int kWarpsOneTile = 8;
constexpr int kWarpsPerSmOneTile = 24;
constexpr int kAheadOneTile = 2;
constexpr int kWarpsPerSmMore = 12;
// x tiles in flight at one m16 tile (4 KB each): the copy of group g + kXStages - 1 is issued as
// group g starts. Beyond one tile, the readable kernel's 2 (4 of 4 m16 tiles would pass the 48 KB
// of static shared memory).
constexpr int kXStagesOneTile = 4;
// Up to how many m16 tiles the mma multiplies x by 136 + q and one more mma a step takes
// 136 sum(x) off (0: never). It saves four bf16x2 subtractions a step (and a link of each B
// register's chain) for an mma a step and m16 tile: at 3 and 4 tiles, near the tensor cores' rate,
// the mma would cost more than it saves.
constexpr int kFoldMaxTilesM = 1;

template <int kTilesM>
constexpr int kWarps = kTilesM == 1 ? kWarpsOneTile : readable::kWarps;
template <int kTilesM>
constexpr int kThreads = 32 * kWarps<kTilesM>;
template <int kTilesM>
constexpr int kBlockN = kWarps<kTilesM>* kTilesPerWarp * 8;  // columns of y per block
template <int kTilesM>
constexpr int kAhead = kTilesM == 1 ? kAheadOneTile : readable::kAhead<kTilesM>;
template <int kTilesM>
constexpr int kMinBlocks = (kTilesM == 1 ? kWarpsPerSmOneTile : kWarpsPerSmMore) / kWarps<kTilesM>;
template <int kTilesM>
constexpr bool kFold = kTilesM <= kFoldMaxTilesM;
template <int kTilesM>
constexpr int kXStages = kTilesM == 1 ? kXStagesOneTile : 2;
static_assert(16 * kChunksPerRow % (32 * kWarpsOneTile) == 0,
              "the threads copy a 16-row x tile in whole passes: 4 or 8 warps a block");

// Registers r = 0, 1 of step s of one n8 tile's B fragment, from the lane's 16 bytes (the readable
// b_register's nibbles: p = 2 (s % 2) + r of word s / 2, and p + 4). pair136 is kBf16Pair136 in a
// register, so that the mask and the XOR are one LOP3 (with two literals ptxas emits two): each
// half is then the bf16 136 + q. Folded, that goes into the mma as it is; else minus 136, q.
template <bool kFolded>
__device__ void b_registers(const uint4& bits, int s, std::uint32_t pair136,
                            std::uint32_t (&b)[2]) {
    const unsigned words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int p = 2 * (s % 2) + r;
        const std::uint32_t biased = ((words[s / 2] >> (4 * p)) & 0x000F000Fu) ^ pair136;
        if (kFolded) {
            b[r] = biased;
        } else {
            const __nv_bfloat162 q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                             *reinterpret_cast<const __nv_bfloat162*>(&pair136));
            b[r] = *reinterpret_cast<const std::uint32_t*>(&q);
        }
    }
}

// The readable copy_x_tile for blocks of kBlockThreads threads: rows 0 .. kRows - 1 of x, one
// group's columns, into a swizzled tile, zeros past M; not committed (the caller commits one
// cp.async group a group of K, empty past the slice's end, so that the waits count alike).
template <int kRows, int kBlockThreads>
__device__ void copy_x_tile(__nv_bfloat16* tile, const __nv_bfloat16* x, int M, int K, int group) {
#pragma unroll
    for (int n = 0; n < kRows * kChunksPerRow / kBlockThreads; ++n) {
        const int i = threadIdx.x + n * kBlockThreads;
        const int row = i / kChunksPerRow, chunk = i % kChunksPerRow;
        const bool row_in_x = row < M;
        tc::cp_async_16(
            tile + tc::swizzled<kInt4Group>(row, 8 * chunk),
            x + static_cast<std::size_t>(row_in_x ? row : 0) * K + group * kInt4Group + 8 * chunk,
            row_in_x);
    }
}

// The readable kernel's loop (a ring of kAhead groups of W in registers, one barrier a group) in
// blocks of kWarps warps, with x through a ring of kXStages shared tiles (the readable kernel's
// two: the copy of the next group's x has one group's arithmetic to land in, less than L2's
// latency under load at 16 tokens; here kXStages - 1 groups'), the B registers of step s + 1 made
// before the mma of step s, and, folded, the 136 sum(x) of each m16 tile (corr: rows g and g + 8
// of the c fragment, the same in every column) taken off the group's partial sums.
template <int kTilesM>
__global__ void __launch_bounds__(kThreads<kTilesM>, kMinBlocks<kTilesM>)
    gemm_w4a16_fast_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                           const uint4* __restrict__ tiled, const float* __restrict__ scales,
                           float* __restrict__ y, int per_split, std::uint32_t pair136) {
    constexpr int kRing = kAhead<kTilesM>;
    constexpr bool kFolded = kFold<kTilesM>;
    constexpr int kStages = kXStages<kTilesM>;
    __shared__ alignas(16) __nv_bfloat16 x_tiles[kStages][kTilesM * 16 * kInt4Group];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles = N / 8;
    const int first_tile = blockIdx.x * (kBlockN<kTilesM> / 8) + warp * kTilesPerWarp;
    const int groups = K / kInt4Group;
    const int begin = blockIdx.y * per_split, end = min(groups, begin + per_split);
    const course::Coord a_source = course::ldmatrix_a_source(lane);

    GroupWeights ring[kRing];
#pragma unroll
    for (int d = 0; d < kRing; ++d) {
        if (begin + d < end)
            ring[d] = readable::load_group(tiled, scales, K, first_tile, tiles, begin + d, lane);
    }
    // Tile t % kStages holds group begin + t: the first kStages - 1 now, a commit each.
#pragma unroll
    for (int t = 0; t < kStages - 1; ++t) {
        if (begin + t < end)
            copy_x_tile<kTilesM * 16, kThreads<kTilesM>>(x_tiles[t], x, M, K, begin + t);
        tc::cp_async_commit();
    }

    float acc[kTilesPerWarp][kTilesM][4] = {};
    for (int base = begin; base < end; base += kRing) {
#pragma unroll
        for (int d = 0; d < kRing; ++d) {
            const int group = base + d;
            if (group >= end) break;
            const GroupWeights& now = ring[d];
            // This group's tile landed (all but the kStages - 2 newest commits are complete),
            // and every warp is done with the tile of the group before, which the copy of the
            // group kStages - 1 ahead then overwrites.
            tc::cp_async_wait<kStages - 2>();
            __syncthreads();
            const int t = group - begin;
            const __nv_bfloat16* x_tile = x_tiles[t % kStages];
            if (group + kStages - 1 < end)
                copy_x_tile<kTilesM * 16, kThreads<kTilesM>>(x_tiles[(t + kStages - 1) % kStages],
                                                             x, M, K, group + kStages - 1);
            tc::cp_async_commit();

            float part[kTilesPerWarp][kTilesM][4] = {};
            float corr[kTilesM][4] = {};
            std::uint32_t b[kTilesPerWarp][2];
#pragma unroll
            for (int j = 0; j < kTilesPerWarp; ++j)
                b_registers<kFolded>(now.bits[j], 0, pair136, b[j]);
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
                std::uint32_t a[kTilesM][4];
#pragma unroll
                for (int i = 0; i < kTilesM; ++i)
                    tc::ldmatrix_x4(a[i], x_tile + tc::swizzled<kInt4Group>(16 * i + a_source.row,
                                                                            16 * s + a_source.col));
                // The next step's B registers first: independent of this step's mma.
                std::uint32_t next[kTilesPerWarp][2];
                if (s + 1 < kSteps)
#pragma unroll
                    for (int j = 0; j < kTilesPerWarp; ++j)
                        b_registers<kFolded>(now.bits[j], s + 1, pair136, next[j]);
#pragma unroll
                for (int j = 0; j < kTilesPerWarp; ++j)
#pragma unroll
                    for (int i = 0; i < kTilesM; ++i)
                        tc::mma_bf16(part[j][i], a[i], b[j][0], b[j][1]);
                if (kFolded)
#pragma unroll
                    for (int i = 0; i < kTilesM; ++i) tc::mma_bf16(corr[i], a[i], pair136, pair136);
                if (s + 1 < kSteps)
#pragma unroll
                    for (int j = 0; j < kTilesPerWarp; ++j)
                        b[j][0] = next[j][0], b[j][1] = next[j][1];
            }
#pragma unroll
            for (int j = 0; j < kTilesPerWarp; ++j)
#pragma unroll
                for (int i = 0; i < kTilesM; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        acc[j][i][e] += (part[j][i][e] - corr[i][e]) * now.scale[j][e % 2];
            if (group + kRing < end)
                ring[d] =
                    readable::load_group(tiled, scales, K, first_tile, tiles, group + kRing, lane);
        }
    }

    // This block's part of y, added to what the other slices of K add (y was zeroed).
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
        if (first_tile + j >= tiles) continue;
#pragma unroll
        for (int i = 0; i < kTilesM; ++i)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const course::Coord c = course::mma_c_element(lane, e);
                const int row = 16 * i + c.row, col = 8 * (first_tile + j) + c.col;
                if (row < M) atomicAdd(y + static_cast<std::size_t>(row) * N + col, acc[j][i][e]);
            }
    }
}

// The blocks of gemm_w4a16_fast_kernel<kTilesM> that one wave holds.
template <int kTilesM>
int wave_blocks() {
    static const int blocks = [] {
        int device = 0, sms = 0, per_sm = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, gemm_w4a16_fast_kernel<kTilesM>, kThreads<kTilesM>, 0));
        return sms * per_sm;
    }();
    return blocks;
}

// The readable launcher's split of K (one wave, slices of at least kMinSlice groups).
template <int kTilesM>
void launch(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
            const float* scales, float* y) {
    const int groups = K / kInt4Group;
    const int column_blocks = course::ceil_div(N, kBlockN<kTilesM>);
    const int splits =
        std::clamp(wave_blocks<kTilesM>() / column_blocks, 1, std::max(1, groups / kMinSlice));
    const int per_split = course::ceil_div(groups, splits);
    CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<std::size_t>(M) * N * sizeof(float)));
    const dim3 grid(column_blocks, course::ceil_div(groups, per_split)), block(kThreads<kTilesM>);
    gemm_w4a16_fast_kernel<kTilesM><<<grid, block>>>(
        M, N, K, x, reinterpret_cast<const uint4*>(tiled), scales, y, per_split, kBf16Pair136);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void tile_int4_weights(const std::uint8_t* packed, int N, int K, std::uint8_t* tiled) {
    readable::tile_int4_weights(packed, N, K, tiled);
}

void gemm_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
                const float* scales, float* y) {
    // Without device code for sm_80 (a T4's build) the readable launcher says why and skips.
    if (course::compiled_arch(gemm_w4a16_fast_kernel<1>) < 80) {
        readable::gemm_w4a16(M, N, K, x, tiled, scales, y);
        return;
    }
    switch (course::ceil_div(M, 16)) {
        case 1:
            launch<1>(M, N, K, x, tiled, scales, y);
            break;
        case 2:
            launch<2>(M, N, K, x, tiled, scales, y);
            break;
        case 3:
            launch<3>(M, N, K, x, tiled, scales, y);
            break;
        default:
            launch<4>(M, N, K, x, tiled, scales, y);
            break;
    }
}
