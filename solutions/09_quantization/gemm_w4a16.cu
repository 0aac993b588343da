// 09_quantization/gemm_w4a16: y = W x for 1 to 64 tokens on the tensor cores, INT4 weights
// dequantized on their way into mma.sync's B fragments (a Marlin-like kernel). Reference
// solution.
//
// Teaches: a weight layout made once, ahead of time, for the instruction that reads it (each lane
// loads its own fragments for 8 k16 steps with one 16-byte load: no shared memory, no ldmatrix
// for the weights); INT4 to bf16 without a conversion instruction (the nibble under the exponent
// of bf16's 128, one shift, one mask-and-xor, one bf16x2 subtraction: exact; the mask-and-xor is
// one LOP3 once its constant is in a register); a group scale applied to the group's partial sums
// in float32, not to every weight, and the scales' scattered 4-byte reads made once per block,
// coalesced, into shared memory; enough weights in flight to feed a memory-bound kernel: a ring of
// groups in registers, refilled as each is used; the activations through two shared tiles
// (cp.async and ldmatrix, module 05), one barrier a group; split-K, so that a few tokens still
// fill the GPU: each block sums a slice of K and adds its part of y with atomicAdd, into a y
// zeroed first, the slices as many as one wave holds. Memory-bound at 16 tokens (the checker
// reports the speed-up over cuBLAS on bf16 weights), nearly compute-bound at 64.
//
// Run:  grader run 09/gemm_w4a16 --solutions
// Contract: gemm_w4a16.h             Notes:  notes/09_quantization.md
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "gemm_w4a16.h"
#include "tensor_core.h"

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTilesPerWarp = 2;                     // n8 tiles of y per warp
constexpr int kBlockN = kWarps * kTilesPerWarp * 8;  // 64 columns of y per block
constexpr int kSteps = kInt4Group / 16;              // k16 steps per group: 8
constexpr int kChunksPerRow = kInt4Group / 8;        // 16-byte chunks of an x tile row: 16
constexpr int kMinSlice = 8;                         // groups in a slice of K, at least
constexpr int kMaxSlice = 32;                        // and at most: the scales' shared tile
// Groups of W a warp has in flight (a ring of registers): enough to cover the latency of a load
// behind the arithmetic of the groups before it. 4 up to 32 tokens, where a group's arithmetic is
// short; 2 beyond, where it is up to 4 times longer and the registers of a deeper ring would cost
// a block per SM (168 registers a thread keep 3 blocks of 128 threads on an SM).
template <int kTilesM>
constexpr int kAhead = kTilesM <= 2 ? 4 : 2;

// ---- tile_int4_weights: one thread per lane's 16 bytes ----------------------------------------

// Thread (tile j, group G, lane l) reads the 64 bytes of row 8 j + l / 4 in group G and picks its
// 32 nibbles: nibble p of word w is k = 16 s + 2 (l % 4) + h + 8 r of the group, s = 2 w +
// (p % 4) / 2, r = p % 2, h = p / 4 (gemm_w4a16.h). The four threads of a row read the same 64
// bytes (from L1); consecutive threads write consecutive 16 bytes.
__global__ void tile_int4_kernel(const uint4* __restrict__ packed, int K, std::size_t lanes,
                                 uint4* __restrict__ tiled) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= lanes) return;
    const int groups = K / kInt4Group;
    const int lane = static_cast<int>(i % 32);
    const std::size_t group = i / 32 % groups, tile = i / 32 / groups;
    const std::size_t row = 8 * tile + lane / 4;
    // The row's group: 64 bytes, 4 uint4s.
    const uint4* source = packed + (row * K / 2 + group * kInt4Group / 2) / 16;
    unsigned words[16];  // word v holds k = 8 v .. 8 v + 7, nibble k % 8 at bits 4 (k % 8)
#pragma unroll
    for (int v = 0; v < 4; ++v) {
        const uint4 chunk = source[v];
        words[4 * v] = chunk.x, words[4 * v + 1] = chunk.y;
        words[4 * v + 2] = chunk.z, words[4 * v + 3] = chunk.w;
    }
    unsigned out[4] = {0, 0, 0, 0};
#pragma unroll
    for (int w = 0; w < 4; ++w)
#pragma unroll
        for (int p = 0; p < 8; ++p) {
            const int s = 2 * w + (p % 4) / 2, r = p % 2, h = p / 4;
            const int k = 16 * s + 2 * (lane % 4) + h + 8 * r;
            const unsigned nibble = (words[k / 8] >> (4 * (k % 8))) & 0xFu;
            out[w] |= nibble << (4 * p);
        }
    tiled[i] = make_uint4(out[0], out[1], out[2], out[3]);
}

// ---- gemm_w4a16 ------------------------------------------------------------------------------

// The bf16 pair (136.0, 136.0): 136 = 1.0625 * 2^7, bits 0x4308 in each half. The launcher passes
// it to the kernel rather than b_register using the literal: a LOP3 takes one immediate, so with
// the mask and the pair both literals ptxas emits two LOP3 (the mask, then the XOR), and with the
// pair in a register one (three instructions a pair of weights, not four).
constexpr std::uint32_t kBf16Pair136 = 0x43084308u;

// Register r of k16 step s of a lane's B fragment, from its 16 bytes: nibbles p and p + 4 of word
// s / 2, p = 2 (s % 2) + r, as a bf16 pair (nibble p in the low half). Masked into the low bits of
// each half and XORed with 0x4308 (the bf16 128.0, 0x4300, and bit 3: nibble ^ 8 = q + 8), each
// half is the bf16 128 + q + 8, exactly; subtracting 136 leaves q, exactly (bf16 holds every
// integer up to 256). The XOR's operand and the subtrahend are the same bits, pair136
// (kBf16Pair136, in a register): 136 is 128 + 8.
__device__ std::uint32_t b_register(const uint4& w, int s, int r, std::uint32_t pair136) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    const int p = 2 * (s % 2) + r;
    const std::uint32_t biased = ((words[s / 2] >> (4 * p)) & 0x000F000Fu) ^ pair136;
    const __nv_bfloat162 q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                     *reinterpret_cast<const __nv_bfloat162*>(&pair136));
    return *reinterpret_cast<const std::uint32_t*>(&q);
}

// Rows 0 .. kRows - 1 of x, columns 128 G .. 128 G + 127 (one group), by cp.async into a swizzled
// tile of 256-byte rows (module 05's XOR swizzle: tc::swizzled), committed as one cp.async group;
// zeros for the rows past M, which are not read (the mma still multiplies them: they come out as
// rows of y that are never stored).
template <int kRows>
__device__ void copy_x_tile(__nv_bfloat16* tile, const __nv_bfloat16* x, int M, int K, int group) {
#pragma unroll
    for (int n = 0; n < kRows * kChunksPerRow / kThreads; ++n) {
        const int i = threadIdx.x + n * kThreads;
        const int row = i / kChunksPerRow, chunk = i % kChunksPerRow;
        const bool row_in_x = row < M;
        tc::cp_async_16(
            tile + tc::swizzled<kInt4Group>(row, 8 * chunk),
            x + static_cast<std::size_t>(row_in_x ? row : 0) * K + group * kInt4Group + 8 * chunk,
            row_in_x);
    }
    tc::cp_async_commit();
}

// A lane's weights for one group: its 16 bytes of each of the warp's n8 tiles.
struct GroupWeights {
    uint4 bits[kTilesPerWarp];
};

__device__ GroupWeights load_group(const uint4* tiled, int K, int first_tile, int tiles, int group,
                                   int lane) {
    const int groups = K / kInt4Group;
    GroupWeights g{};
#pragma unroll
    for (int j = 0; j < kTilesPerWarp; ++j) {
        const int tile = first_tile + j;
        if (tile < tiles)
            g.bits[j] = tiled[(static_cast<std::size_t>(tile) * groups + group) * 32 + lane];
    }
    return g;
}

// The scales of the block's 64 columns for its slice of groups, into shared memory, once. Read
// where they are used, a lane's 4 scales a group would be 4-byte loads 8 sectors apart for a warp
// (column n of y is row n of W: scales[n * groups + group]): as many sector requests as W's own
// loads, each for 4 useful bytes of 32. Here consecutive threads take consecutive groups of a
// column, and every load is issued before any store (the loops unrolled).
__device__ void load_slice_scales(float (*slice_scales)[kMaxSlice + 1], const float* scales, int N,
                                  int K, int column0, int begin, int length) {
    constexpr int kPerThread = kBlockN * kMaxSlice / kThreads;  // 16 scales at most
    const int groups = K / kInt4Group;
    float value[kPerThread];
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
        const int i = threadIdx.x + n * kThreads;
        const int column = column0 + i / length, group = begin + i % length;
        value[n] = i < kBlockN * length && column < N
                       ? scales[static_cast<std::size_t>(column) * groups + group]
                       : 0.0f;
    }
#pragma unroll
    for (int n = 0; n < kPerThread; ++n) {
        const int i = threadIdx.x + n * kThreads;
        if (i < kBlockN * length) slice_scales[i / length][i % length] = value[n];
    }
}

// Block (bx, by)'s sums over its slice of K into acc: columns 64 bx .. 64 bx + 63 of y (warp w:
// n8 tiles 8 bx + 2 w, + 1), groups by * per_split .. of K (at most kMaxSlice), all M rows
// (kTilesM m16 tiles), the slice's scales in shared memory. W streams through a ring of kAhead
// groups of registers: as soon as a group is computed, its slot is refilled with the group kAhead
// later, so that kAhead - 1 to kAhead groups of W are in flight behind the arithmetic. x goes
// through two shared tiles: the next group's is copied (cp.async) while this group's is read, so
// one barrier a group suffices. Per group: 8 k16 steps of ldmatrix (A) and mma with B dequantized
// from registers, into partial sums that the group's scales then add to the accumulators. pair136
// is kBf16Pair136 (b_register says why it is an argument).
template <int kTilesM>
__device__ void slice_products(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                               const uint4* __restrict__ tiled, const float* __restrict__ scales,
                               int per_split, std::uint32_t pair136,
                               float (&acc)[kTilesPerWarp][kTilesM][4]) {
    __shared__ alignas(16) __nv_bfloat16 x_tiles[2][kTilesM * 16 * kInt4Group];
    __shared__ float slice_scales[kBlockN][kMaxSlice + 1];  // + 1: a lane's 4 columns, 4 banks
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles = N / 8;
    const int first_tile = blockIdx.x * (kBlockN / 8) + warp * kTilesPerWarp;
    const int groups = K / kInt4Group;
    const int begin = blockIdx.y * per_split, end = min(groups, begin + per_split);
    const course::Coord a_source = course::ldmatrix_a_source(lane);

    // Slot d holds group begin + d, then every kAhead-th group after it. The ring is indexed by
    // the unrolled d only (a constant), so that it stays in registers.
    GroupWeights ring[kAhead<kTilesM>];
#pragma unroll
    for (int d = 0; d < kAhead<kTilesM>; ++d)
        if (begin + d < end) ring[d] = load_group(tiled, K, first_tile, tiles, begin + d, lane);
    copy_x_tile<kTilesM * 16>(x_tiles[0], x, M, K, begin);
    load_slice_scales(slice_scales, scales, N, K, blockIdx.x * kBlockN, begin, end - begin);

    for (int base = begin; base < end; base += kAhead<kTilesM>) {
#pragma unroll
        for (int d = 0; d < kAhead<kTilesM>; ++d) {
            const int group = base + d;
            if (group >= end) break;
            const GroupWeights& now = ring[d];
            tc::cp_async_wait<0>();
            // This group's x tile is complete (and the first time, the scales are stored), and
            // every warp is done with the other tile (it read it for the previous group) before
            // the next group's copy overwrites it.
            __syncthreads();
            const __nv_bfloat16* x_tile = x_tiles[(group - begin) % 2];
            if (group + 1 < end)
                copy_x_tile<kTilesM * 16>(x_tiles[(group + 1 - begin) % 2], x, M, K, group + 1);

            float part[kTilesPerWarp][kTilesM][4] = {};
#pragma unroll
            for (int s = 0; s < kSteps; ++s) {
                std::uint32_t a[kTilesM][4];
#pragma unroll
                for (int i = 0; i < kTilesM; ++i)
                    tc::ldmatrix_x4(a[i], x_tile + tc::swizzled<kInt4Group>(16 * i + a_source.row,
                                                                            16 * s + a_source.col));
#pragma unroll
                for (int j = 0; j < kTilesPerWarp; ++j) {
                    const std::uint32_t b0 = b_register(now.bits[j], s, 0, pair136);
                    const std::uint32_t b1 = b_register(now.bits[j], s, 1, pair136);
#pragma unroll
                    for (int i = 0; i < kTilesM; ++i) tc::mma_bf16(part[j][i], a[i], b0, b1);
                }
            }
            // Accumulators 0 and 2 are column 2 (lane % 4) of the tile, 1 and 3 the next one
            // (course::mma_c_element): each takes its column's scale.
#pragma unroll
            for (int j = 0; j < kTilesPerWarp; ++j) {
                const int column = kTilesPerWarp * 8 * warp + 8 * j + 2 * (lane % 4);
                const float scale[2] = {slice_scales[column][group - begin],
                                        slice_scales[column + 1][group - begin]};
#pragma unroll
                for (int i = 0; i < kTilesM; ++i)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[j][i][e] += part[j][i][e] * scale[e % 2];
            }
            // The slot is free: refill it with the group kAhead later.
            if (group + kAhead<kTilesM> < end)
                ring[d] = load_group(tiled, K, first_tile, tiles, group + kAhead<kTilesM>, lane);
        }
    }
}

// Block (bx, by)'s part of y, acc, added to what the other slices of K add (y was zeroed).
template <int kTilesM>
__device__ void add_to_y(const float (&acc)[kTilesPerWarp][kTilesM][4], int M, int N,
                         float* __restrict__ y) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int tiles = N / 8;
    const int first_tile = blockIdx.x * (kBlockN / 8) + warp * kTilesPerWarp;
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

// Block (bx, by): the products of its slice of K, then its part of y.
template <int kTilesM>
__global__ void __launch_bounds__(kThreads)
    gemm_w4a16_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                      const uint4* __restrict__ tiled, const float* __restrict__ scales,
                      float* __restrict__ y, int per_split, std::uint32_t pair136) {
    float acc[kTilesPerWarp][kTilesM][4] = {};
    slice_products<kTilesM>(M, N, K, x, tiled, scales, per_split, pair136, acc);
    add_to_y<kTilesM>(acc, M, N, y);
}

// The blocks of gemm_w4a16_kernel<kTilesM> that one wave holds: every SM's resident blocks.
template <int kTilesM>
int wave_blocks() {
    static const int blocks = [] {
        int per_sm = 0;
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, gemm_w4a16_kernel<kTilesM>, kThreads, 0));
        return course::multiprocessor_count() * per_sm;
    }();
    return blocks;
}

// Groups in a slice of K, when one wave holds `blocks_per_wave` blocks. Split K into as many slices
// as one wave holds: at N = 8192 there are only 128 column blocks, and a token's worth of work per
// block would leave most SMs idle; a second, partial wave would leave them idle at the end
// instead. But not into slices shorter than kMinSlice groups: a shorter one never fills its ring,
// and its atomics cost as much as a long one's. Nor longer than kMaxSlice, the scales' tile (K
// past 4096 with many columns: more slices).
int slice_length(int blocks_per_wave, int N, int K) {
    const int groups = K / kInt4Group;
    const int one_wave = std::clamp(blocks_per_wave / course::ceil_div(N, kBlockN), 1,
                                    std::max(1, groups / kMinSlice));
    return course::ceil_div(groups, std::max(one_wave, course::ceil_div(groups, kMaxSlice)));
}

template <int kTilesM>
void launch(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
            const float* scales, float* y) {
    if (course::compiled_arch(gemm_w4a16_kernel<kTilesM>) < 80)
        throw std::runtime_error("gemm_w4a16: bf16 mma.sync needs device code for sm_80 or newer");
    const int per_split = slice_length(wave_blocks<kTilesM>(), N, K);
    CUDA_CHECK(cudaMemsetAsync(y, 0, static_cast<std::size_t>(M) * N * sizeof(float)));
    const dim3 grid(course::ceil_div(N, kBlockN), course::ceil_div(K / kInt4Group, per_split));
    gemm_w4a16_kernel<kTilesM><<<grid, kThreads>>>(
        M, N, K, x, reinterpret_cast<const uint4*>(tiled), scales, y, per_split, kBf16Pair136);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void tile_int4_weights(const std::uint8_t* packed, int N, int K, std::uint8_t* tiled) {
    const std::size_t lanes = static_cast<std::size_t>(N) * K / 32;  // 16 bytes each
    const int block = 256;
    tile_int4_kernel<<<static_cast<unsigned>(course::ceil_div(lanes, block)), block>>>(
        reinterpret_cast<const uint4*>(packed), K, lanes, reinterpret_cast<uint4*>(tiled));
    CUDA_CHECK_LAUNCH();
}

void gemm_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
                const float* scales, float* y) {
    // One kernel per number of m16 tiles, 1 to 4: the accumulators are registers, their count
    // fixed.
    using Launch = decltype(&launch<1>);
    constexpr Launch kLaunches[] = {launch<1>, launch<2>, launch<3>, launch<4>};
    kLaunches[course::ceil_div(M, 16) - 1](M, N, K, x, tiled, scales, y);
}
