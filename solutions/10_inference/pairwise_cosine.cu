// 10_inference/pairwise_cosine: all pairwise cosine distances of N embeddings on the tensor
// cores, the upper triangle only, with their mean fused into the same kernel.
//
// Teaches: a symmetric product computed once (X X^T has N^2 entries, N (N - 1) / 2 distinct
// pairs): a grid of the upper triangle's tiles only, the diagonal tiles masked; module 05's
// cp.async pipeline and mma.sync fragments applied to X against itself; an epilogue that
// normalizes (the rows' inverse norms from a first, memory-bound pass), writes a packed triangle
// and reduces the mean on the way out, instead of a second pass over 134 MB. The checker compares
// distances and the mean with a double reference and times you against cuBLAS's bf16 GEMM over
// the full square, counting only the triangle's FLOPs for you.
//
// Run:  grader run 10/pairwise_cosine        Stuck:  grader hint 10/pairwise_cosine
// Contract: pairwise_cosine.h                Notes:  notes/10_inference.md, section 6
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "pairwise_cosine.h"
#include "tensor_core.h"

namespace {

constexpr int kTile = 128;  // rows (i) and columns (j) of a block's tile of X X^T
constexpr int kBK = 64;     // k per step: 64 bf16 = one 128-byte swizzled row
constexpr int kStages = 3;  // shared stages in the ring: kStages - 1 tiles in flight
constexpr int kWarpsM = 2, kWarpsN = 4;
constexpr int kWarpM = kTile / kWarpsM;           // 64 rows per warp
constexpr int kWarpN = kTile / kWarpsN;           // 32 columns per warp
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // one mma.sync.m16n8k16
constexpr int kTilesM = kWarpM / kMmaM;           // 4 m16 tiles per warp ...
constexpr int kTilesN = kWarpN / kMmaN;           // ... by 4 n8 tiles
constexpr int kSteps = kBK / kMmaK;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 8;  // bf16 per 16-byte chunk
constexpr int kChunksPerRow = kBK / kChunk;
constexpr int kStageElements = 2 * kTile * kBK;  // the i tile, then the j tile
constexpr int kSharedBytes = kStages * kStageElements * 2;
constexpr int kNormRows = 8;  // rows per block of the norm pass: a warp each

static_assert(kBK * 2 == course::kSwizzleRowBytes, "a tile row is one 128-byte swizzled row");

// The first pass: inverse[i] = 1 / |x_i|, a warp per row, in float32.
__global__ void inverse_norms_kernel(const __nv_bfloat16* X, float* inverse, int N, int D) {
    const int row = blockIdx.x * kNormRows + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;  // the whole warp: no shuffle below waits for it
    const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(X + std::size_t(row) * D);
    float sum = 0.0f;
    for (int k = lane; k < D / 2; k += 32) {
        const float lo = __bfloat162float(x[k].x), hi = __bfloat162float(x[k].y);
        sum += lo * lo + hi * hi;
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) inverse[row] = 1.0f / sqrtf(sum);
}

// Copies rows row0 .. row0 + kTile - 1, columns k0 .. k0 + kBK - 1 of X into a swizzled tile; a
// row past N is zero-filled (its source, never read, is X itself). Offsets in int, N D <= 2^25,
// and the choice made on the offset, not on the pointer: the compiler keeps each chunk's source
// live across the main loop, and 8 pointers of 64 bits took the registers that the accumulators
// need (128 per thread for 2 blocks per SM: 24 bytes spilled).
__device__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* X, int N, int D, int row0,
                                int k0) {
#pragma unroll
    for (int n = 0; n < kTile * kChunksPerRow / kThreads; ++n) {
        const int i = threadIdx.x + n * kThreads;
        const int r = i / kChunksPerRow, c = i % kChunksPerRow;
        const bool inside = row0 + r < N;
        tc::cp_async_16(tile + tc::swizzled<kBK>(r, c * kChunk),
                        X + (inside ? (row0 + r) * D + k0 + c * kChunk : 0), inside);
    }
}

// The upper triangle's tiles in row-major order: block b is tile (ti, tj), ti <= tj.
__device__ void triangle_tile(int b, int tiles, int& ti, int& tj) {
    ti = 0;
    while (b >= tiles - ti) b -= tiles - ti++;  // row ti holds tiles - ti tiles
    tj = ti + b;
}

}  // namespace

__global__ void __launch_bounds__(kThreads, 2)
    pairwise_cosine_kernel(const __nv_bfloat16* __restrict__ X, const float* __restrict__ inverse,
                           float* __restrict__ distances, float* mean, int N, int D) {
    extern __shared__ __align__(16) __nv_bfloat16 stages[];
    __shared__ float warp_sums[kWarps];
    const auto i_stage = [&](int s) { return stages + s * kStageElements; };
    const auto j_stage = [&](int s) { return stages + s * kStageElements + kTile * kBK; };

    int ti, tj;
    triangle_tile(blockIdx.x, course::ceil_div(N, kTile), ti, tj);
    const int row0 = ti * kTile, col0 = tj * kTile;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / kWarpsN * kWarpM, warp_col = warp % kWarpsN * kWarpN;
    const course::Coord a_source = course::ldmatrix_a_source(lane);
    const course::Coord b_source = course::ldmatrix_b_source(lane);
    const int k_tiles = D / kBK;

    // X against itself: the i tile is A (rows of the product), the j tile is B, both rows of X
    // with k contiguous, as module 05's "TN" GEMM reads them.
    const auto load_stage = [&](int stage, int k_tile) {
        load_tile_async(i_stage(stage), X, N, D, row0, k_tile * kBK);
        load_tile_async(j_stage(stage), X, N, D, col0, k_tile * kBK);
    };
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        tc::cp_async_commit();
    }

    float acc[kTilesM][kTilesN][4] = {};
    for (int kt = 0; kt < k_tiles; ++kt) {
        tc::cp_async_wait<kStages - 2>();  // tile kt has landed (this thread's copies) ...
        __syncthreads();  // ... everyone's, and every warp is done with the stage reloaded below
        const int next = kt + kStages - 1;
        if (next < k_tiles) load_stage(next % kStages, next);
        tc::cp_async_commit();

        const __nv_bfloat16* a_tile = i_stage(kt % kStages);
        const __nv_bfloat16* b_tile = j_stage(kt % kStages);
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            const int k = s * kMmaK;
            std::uint32_t a[kTilesM][4], b[kTilesN][2];
#pragma unroll
            for (int i = 0; i < kTilesM; ++i)
                tc::ldmatrix_x4(a[i],
                                a_tile + tc::swizzled<kBK>(warp_row + i * kMmaM + a_source.row,
                                                           k + a_source.col));
#pragma unroll
            for (int j = 0; j < kTilesN; j += 2) {
                std::uint32_t pair[4];
                tc::ldmatrix_x4(pair,
                                b_tile + tc::swizzled<kBK>(warp_col + j * kMmaN + b_source.row,
                                                           k + b_source.col));
                b[j][0] = pair[0], b[j][1] = pair[1];
                b[j + 1][0] = pair[2], b[j + 1][1] = pair[3];
            }
#pragma unroll
            for (int i = 0; i < kTilesM; ++i)
#pragma unroll
                for (int j = 0; j < kTilesN; ++j) tc::mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }

    // The epilogue: the pairs of this tile above the diagonal, normalized, written to the packed
    // triangle, and summed for the mean.
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const course::Coord c = course::mma_c_element(lane, e);
                const int row = row0 + warp_row + i * kMmaM + c.row;
                const int col = col0 + warp_col + j * kMmaN + c.col;
                if (row < col && col < N) {
                    const float d = 1.0f - acc[i][j][e] * inverse[row] * inverse[col];
                    distances[triangle_index(row, col, N)] = d;
                    sum += d;
                }
            }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) warp_sums[warp] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        float block_sum = 0.0f;
        for (int w = 0; w < kWarps; ++w) block_sum += warp_sums[w];
        // Each block adds its share of the mean: one atomic per block, in any order.
        atomicAdd(mean, block_sum / (0.5f * N * (N - 1.0f)));
    }
}

void pairwise_cosine(const __nv_bfloat16* X, float* distances, float* mean, float* workspace, int N,
                     int D) {
    if (course::compiled_arch(pairwise_cosine_kernel) < 80)
        throw std::runtime_error(
            "pairwise_cosine: cp.async and bf16 mma.sync need device code for sm_80 or newer");
    static const std::size_t available = course::opt_in_shared_bytes(pairwise_cosine_kernel);
    if (available < static_cast<std::size_t>(kSharedBytes))
        throw std::runtime_error(
            "pairwise_cosine: kStages stages need " + std::to_string(kSharedBytes) +
            " bytes of shared memory; a block may have " + std::to_string(available) + " here");
    inverse_norms_kernel<<<course::ceil_div(N, kNormRows), 32 * kNormRows>>>(X, workspace, N, D);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(mean, 0, sizeof(float)));  // the blocks add their shares to it
    const int tiles = course::ceil_div(N, kTile);
    pairwise_cosine_kernel<<<tiles*(tiles + 1) / 2, kThreads, kSharedBytes>>>(
        X, workspace, distances, mean, N, D);
    CUDA_CHECK_LAUNCH();
}
