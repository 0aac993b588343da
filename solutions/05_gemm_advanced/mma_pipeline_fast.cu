// 05_gemm_advanced/mma_pipeline_fast: the cp.async mma.sync pipeline with twice the block tile and
// twice the warp tile. Fast reference (the readable one is mma_pipeline.cu).
//
// Teaches: what bounds the readable pipeline once its copies overlap the arithmetic: how many
// bytes each multiply-add costs. A 128 x 128 block tile reads (128 + 128) x 64 bf16 from L2 per
// step for 128 x 128 x 64 multiply-adds, and a warp's 64 x 32 tile loads 6 ldmatrix.x4 per 16
// mma. Here a block computes 128 x 256 and a warp 64 x 64 (8 warps, 128 accumulators per thread):
// a third fewer L2 bytes per multiply-add, and 8 ldmatrix.x4 per 32 mma. Stages of 48 KB, so
// kStages of them take most of an H100's shared memory (one block per SM). Same copies, swizzle,
// ring, fragments, register double buffering and block order as the readable kernel (its PTX
// helpers and load_tile_async are used as they are).
//
// Run:  grader run 05/mma_pipeline --solutions      (the "mma_pipeline (fast)" row)
// Contract: gemm_bf16.h                             Notes:   notes/05_gemm_advanced.md
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "mma_pipeline.h"

namespace readable {
#include "mma_pipeline.cu"
}  // namespace readable

namespace {

constexpr int kBM = 128;         // rows of C per block
constexpr int kBN = 256;         // columns of C per block
constexpr int kStages = 4;       // shared stages in the ring: kStages - 1 tiles in flight
constexpr int kGroupRows = 8;    // tile rows per group of the block order
constexpr int kWarpsM = 2;       // warps along M ...
constexpr int kWarpsN = 4;       // ... and along N
constexpr int kBlocksPerSM = 1;  // blocks an SM holds at once (registers, shared memory)
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kWarpM = kBM / kWarpsM;              // rows of C per warp
constexpr int kWarpN = kBN / kWarpsN;              // columns of C per warp
constexpr int kTilesM = kWarpM / readable::kMmaM;  // m16 tiles per warp ...
constexpr int kTilesN = kWarpN / readable::kMmaN;  // ... by n8 tiles: their product, mma per step
constexpr int kStageElements = (kBM + kBN) * readable::kBK;
constexpr int kSharedBytes = kStages * kStageElements * 2;

static_assert(kTilesN % 2 == 0 && kStages >= 2, "pairs of n8 tiles, a ring");

struct Fragments {
    std::uint32_t a[kTilesM][4];
    std::uint32_t b[kTilesN][2];
};

// As the readable load_fragments, for this warp tile.
__device__ void load_fragments(Fragments& f, const readable::Element* a_tile,
                               const readable::Element* b_tile, int warp_row, int warp_col, int k,
                               course::Coord a_source, course::Coord b_source) {
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
        const int row = warp_row + i * readable::kMmaM + a_source.row;
        readable::ldmatrix_x4(
            f.a[i],
            readable::shared_address(a_tile + course::swizzled_bf16_offset(row, k + a_source.col)));
    }
#pragma unroll
    for (int j = 0; j < kTilesN; j += 2) {
        const int row = warp_col + j * readable::kMmaN + b_source.row;
        std::uint32_t pair[4];
        readable::ldmatrix_x4(pair, readable::shared_address(b_tile + course::swizzled_bf16_offset(
                                                                          row, k + b_source.col)));
        f.b[j][0] = pair[0], f.b[j][1] = pair[1];
        f.b[j + 1][0] = pair[2], f.b[j + 1][1] = pair[3];
    }
}

}  // namespace

__global__ void __launch_bounds__(kThreads, kBlocksPerSM)
    mma_pipeline_fast_kernel(int M, int N, int K, const readable::Element* __restrict__ A,
                             const readable::Element* __restrict__ B, float* __restrict__ C) {
    extern __shared__ __align__(16) readable::Element stages[];
    const auto a_stage = [&](int s) { return stages + s * kStageElements; };
    const auto b_stage = [&](int s) { return stages + s * kStageElements + kBM * readable::kBK; };

    const course::Coord tile = course::grouped_tile(blockIdx.x, course::ceil_div(M, kBM),
                                                    course::ceil_div(N, kBN), kGroupRows);
    const int row0 = tile.row * kBM, col0 = tile.col * kBN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / kWarpsN * kWarpM, warp_col = warp % kWarpsN * kWarpN;
    const course::Coord a_source = course::ldmatrix_a_source(lane);
    const course::Coord b_source = course::ldmatrix_b_source(lane);
    const int k_tiles = course::ceil_div(K, readable::kBK);

    const auto load_stage = [&](int stage, int k_tile) {
        readable::load_tile_async<kBM, kThreads>(a_stage(stage), A, M, K, row0,
                                                 k_tile * readable::kBK);
        readable::load_tile_async<kBN, kThreads>(b_stage(stage), B, N, K, col0,
                                                 k_tile * readable::kBK);
    };

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        readable::cp_async_commit();
    }

    float acc[kTilesM][kTilesN][4] = {};
    Fragments frag[2];

    for (int kt = 0; kt < k_tiles; ++kt) {
        readable::cp_async_wait<kStages - 2>();
        __syncthreads();
        const int next = kt + kStages - 1;
        if (next < k_tiles) load_stage(next % kStages, next);
        readable::cp_async_commit();

        const int stage = kt % kStages;
        load_fragments(frag[0], a_stage(stage), b_stage(stage), warp_row, warp_col, 0, a_source,
                       b_source);
#pragma unroll
        for (int s = 0; s < readable::kSteps; ++s) {
            if (s + 1 < readable::kSteps)
                load_fragments(frag[(s + 1) % 2], a_stage(stage), b_stage(stage), warp_row,
                               warp_col, (s + 1) * readable::kMmaK, a_source, b_source);
#pragma unroll
            for (int i = 0; i < kTilesM; ++i)
#pragma unroll
                for (int j = 0; j < kTilesN; ++j)
                    readable::mma_m16n8k16(acc[i][j], frag[s % 2].a[i], frag[s % 2].b[j]);
        }
    }

#pragma unroll
    for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j)
#pragma unroll
            for (int half = 0; half < 4; half += 2) {
                const course::Coord e = course::mma_c_element(lane, half);
                const int row = row0 + warp_row + i * readable::kMmaM + e.row;
                const int col = col0 + warp_col + j * readable::kMmaN + e.col;
                if (row < M && col < N)
                    *reinterpret_cast<float2*>(C + row * N + col) =
                        make_float2(acc[i][j][half], acc[i][j][half + 1]);
            }
}

void gemm_bf16(int M, int N, int K, const readable::Element* A, const readable::Element* B,
               float* C) {
    // Where a block cannot have kStages stages of this tile (GPUs with less shared memory than an
    // A100's or an H100's), the readable kernel runs.
    static const std::size_t available = course::opt_in_shared_bytes(mma_pipeline_fast_kernel);
    if (course::kFp16TensorCores || course::compiled_arch(mma_pipeline_fast_kernel) < 80 ||
        available < static_cast<std::size_t>(kSharedBytes)) {
        readable::gemm_bf16(M, N, K, A, B, C);
        return;
    }
    const int tiles = course::ceil_div(M, kBM) * course::ceil_div(N, kBN);
    mma_pipeline_fast_kernel<<<tiles, kThreads, kSharedBytes>>>(M, N, K, A, B, C);
    CUDA_CHECK_LAUNCH();
}
