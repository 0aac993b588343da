// 05_gemm_advanced/mma_pipeline: mma_gemm's kernel fed by a cp.async pipeline: several K tiles in
// flight while the tensor cores work on an earlier one, the next fragments loaded while the
// current ones are multiplied, and blocks ordered so that those running together share their
// tiles in L2. Reference solution.
//
// Teaches: cp.async, the copy from global to shared memory that bypasses the registers and
// completes later; its commit groups and cp.async.wait_group N ("all but the N youngest groups
// have landed"); a ring of kStages shared stages in which the tile of step kt + kStages - 1 is
// copied while step kt computes, with one barrier per step; register double buffering (the
// ldmatrix of k16 step s + 1 issued before the mma of step s); and a grouped block order
// (course::grouped_tile). Same tiles, warps, swizzle and fragments as mma_gemm.
//
// Run:  grader run 05/mma_pipeline --solutions
// Profile: grader profile 05/mma_pipeline --solutions
// Contract: gemm_bf16.h                             Notes:   notes/05_gemm_advanced.md
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "mma_pipeline.h"

namespace {

// bf16 wherever this exercise runs (cp.async and bf16 mma: sm_80 and newer). A build for sm_75
// makes the contract's course::TensorElement fp16 (course/tensor_element.h): there the launcher
// refuses, and the checker skips with the reason.
using Element = course::TensorElement;

constexpr int kBM = 128;               // rows of C per block
constexpr int kBN = 128;               // columns of C per block
constexpr int kBK = 64;                // k per step: 64 elements = one 128-byte swizzled row
constexpr int kStages = 3;             // shared stages in the ring: kStages - 1 tiles in flight
constexpr int kGroupRows = 8;          // tile rows per group of the block order
constexpr int kBlocksPerSM = 2;        // two blocks' stages fit an SM: one computes during the
                                       // other's barrier (at most 128 registers per thread)
constexpr int kWarpsM = 2;             // warps along M ...
constexpr int kWarpsN = 4;             // ... and along N
constexpr int kWarpM = kBM / kWarpsM;  // 64 rows of C per warp
constexpr int kWarpN = kBN / kWarpsN;  // 32 columns of C per warp
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // one mma.sync.m16n8k16
constexpr int kTilesM = kWarpM / kMmaM;           // 4 m16 tiles per warp ...
constexpr int kTilesN = kWarpN / kMmaN;           // ... by 4 n8 tiles: 16 mma per k16 step
constexpr int kSteps = kBK / kMmaK;               // k16 steps per tile
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kChunk = 8;                    // elements per 16-byte chunk
constexpr int kChunksPerRow = kBK / kChunk;  // 8: the swizzle permutes them
// One stage: the A tile, then the B tile (each kBK wide, swizzled).
constexpr int kStageElements = (kBM + kBN) * kBK;
constexpr int kSharedBytes = kStages * kStageElements * 2;

static_assert(kBK * 2 == course::kSwizzleRowBytes, "a tile row is one 128-byte swizzled row");
static_assert(kTilesN % 2 == 0, "B's ldmatrix.x4 loads two n8 tiles at a time");
static_assert(kStages >= 2, "a ring of at least two stages");

// ---- The PTX instructions, each wrapped once ----------------------------------------------------

__device__ std::uint32_t shared_address(const void* pointer) {
    return static_cast<std::uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16 bytes from global to shared memory, asynchronously (cp.async.cg: through L2 only, not L1).
// With `valid` false nothing is read (src-size 0) and the 16 bytes are zero-filled.
// (cp.async exists from sm_80 on; before, these trap: the launcher refuses to get there.)
__device__ void cp_async_16(std::uint32_t shared, const void* global, bool valid) {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(global),
                 "r"(valid ? 16 : 0)
                 : "memory");
#else
    __trap();
#endif
}

// Closes the group of this thread's cp.asyncs issued since the last commit.
__device__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight (the
// youngest ones): every older group has landed in shared memory.
template <int kPending>
__device__ void cp_async_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// As in mma_gemm.cu.
__device__ void ldmatrix_x4(std::uint32_t (&regs)[4], std::uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(regs[0]), "=r"(regs[1]), "=r"(regs[2]), "=r"(regs[3])
                 : "r"(address)
                 : "memory");
}

__device__ void mma_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4],
                             const std::uint32_t (&b)[2]) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    __trap();  // no bf16 mma before sm_80: the launcher refuses to get here
#endif
}

// Starts the copy of rows row0 .. row0 + kRows - 1, columns k0 .. k0 + kBK - 1 of a row-major
// matrix (`rows` x K) into a swizzled tile, as mma_gemm's load_tile does with plain loads; a chunk
// outside the matrix is zero-filled (its source pointer, never read, is the matrix itself). The
// block's kLoaders threads share the chunks, the same number each: with a trip count known at
// compile time the loop unrolls, and a thread's chunks (rows kLoaders / 8 apart, the same chunk
// column, so the same swizzle) cost an add each instead of a loop's worth of index arithmetic.
template <int kRows, int kLoaders = kThreads>
__device__ void load_tile_async(Element* tile, const Element* matrix, int rows, int K, int row0,
                                int k0) {
    static_assert(kRows * kChunksPerRow % kLoaders == 0, "every thread copies as many chunks");
#pragma unroll
    for (int n = 0; n < kRows * kChunksPerRow / kLoaders; ++n) {
        const int i = threadIdx.x + n * kLoaders;
        const int r = i / kChunksPerRow, c = i % kChunksPerRow;
        const int row = row0 + r, k = k0 + c * kChunk;
        const bool inside = row < rows && k < K;
        cp_async_16(shared_address(tile + course::swizzled_bf16_offset(r, c * kChunk)),
                    inside ? matrix + row * K + k : matrix, inside);
    }
}

// The fragments of one k16 step: A's kTilesM m16 tiles and B's kTilesN n8 tiles (as mma_gemm).
struct Fragments {
    std::uint32_t a[kTilesM][4];
    std::uint32_t b[kTilesN][2];
};

__device__ void load_fragments(Fragments& f, const Element* a_tile, const Element* b_tile,
                               int warp_row, int warp_col, int k, course::Coord a_source,
                               course::Coord b_source) {
#pragma unroll
    for (int i = 0; i < kTilesM; ++i) {
        const int row = warp_row + i * kMmaM + a_source.row;
        ldmatrix_x4(f.a[i],
                    shared_address(a_tile + course::swizzled_bf16_offset(row, k + a_source.col)));
    }
#pragma unroll
    for (int j = 0; j < kTilesN; j += 2) {
        const int row = warp_col + j * kMmaN + b_source.row;
        std::uint32_t pair[4];
        ldmatrix_x4(pair,
                    shared_address(b_tile + course::swizzled_bf16_offset(row, k + b_source.col)));
        f.b[j][0] = pair[0], f.b[j][1] = pair[1];
        f.b[j + 1][0] = pair[2], f.b[j + 1][1] = pair[3];
    }
}

}  // namespace

__global__ void __launch_bounds__(kThreads, kBlocksPerSM)
    mma_pipeline_kernel(int M, int N, int K, const Element* __restrict__ A,
                        const Element* __restrict__ B, float* __restrict__ C) {
    // The stages, in dynamic shared memory (more than the 48 KB a static array may have). The
    // swizzle is computed from the row within the tile, not from the address: any 16-byte
    // alignment keeps a row's 8 chunks in 8 different bank groups.
    extern __shared__ __align__(16) Element stages[];
    const auto a_stage = [&](int s) { return stages + s * kStageElements; };
    const auto b_stage = [&](int s) { return stages + s * kStageElements + kBM * kBK; };

    // Blocks in grouped order: the kGroupRows tile rows of a group, one column after the other.
    const course::Coord tile = course::grouped_tile(blockIdx.x, course::ceil_div(M, kBM),
                                                    course::ceil_div(N, kBN), kGroupRows);
    const int row0 = tile.row * kBM, col0 = tile.col * kBN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / kWarpsN * kWarpM, warp_col = warp % kWarpsN * kWarpN;
    const course::Coord a_source = course::ldmatrix_a_source(lane);
    const course::Coord b_source = course::ldmatrix_b_source(lane);
    const int k_tiles = course::ceil_div(K, kBK);

    const auto load_stage = [&](int stage, int k_tile) {
        load_tile_async<kBM>(a_stage(stage), A, M, K, row0, k_tile * kBK);
        load_tile_async<kBN>(b_stage(stage), B, N, K, col0, k_tile * kBK);
    };

    // The first kStages - 1 tiles in flight, one commit group each (empty past the last tile, so
    // that the group count below is the same for every K).
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < k_tiles) load_stage(s, s);
        cp_async_commit();
    }

    float acc[kTilesM][kTilesN][4] = {};
    Fragments frag[2];  // step s's fragments in frag[s % 2], step s + 1's loading into the other

    for (int kt = 0; kt < k_tiles; ++kt) {
        // kStages - 1 + kt groups are committed, tile kt's being number kt: it has landed when no
        // more than the kStages - 2 younger ones are pending.
        cp_async_wait<kStages - 2>();
        // Every thread's copies of tile kt have landed, and every warp is done with tile kt - 1,
        // whose stage the copies below overwrite.
        __syncthreads();
        const int next = kt + kStages - 1;
        if (next < k_tiles) load_stage(next % kStages, next);
        cp_async_commit();

        const int stage = kt % kStages;
        load_fragments(frag[0], a_stage(stage), b_stage(stage), warp_row, warp_col, 0, a_source,
                       b_source);
#pragma unroll
        for (int s = 0; s < kSteps; ++s) {
            // The ldmatrix of step s + 1 goes out before the mma of step s: its latency hides
            // behind 16 mma instead of stalling the first of them.
            if (s + 1 < kSteps)
                load_fragments(frag[(s + 1) % 2], a_stage(stage), b_stage(stage), warp_row,
                               warp_col, (s + 1) * kMmaK, a_source, b_source);
#pragma unroll
            for (int i = 0; i < kTilesM; ++i)
#pragma unroll
                for (int j = 0; j < kTilesN; ++j)
                    mma_m16n8k16(acc[i][j], frag[s % 2].a[i], frag[s % 2].b[j]);
        }
    }

    // As in mma_gemm: accumulators 0, 1 and 2, 3 are pairs of columns of one row.
#pragma unroll
    for (int i = 0; i < kTilesM; ++i)
#pragma unroll
        for (int j = 0; j < kTilesN; ++j)
#pragma unroll
            for (int half = 0; half < 4; half += 2) {
                const course::Coord e = course::mma_c_element(lane, half);
                const int row = row0 + warp_row + i * kMmaM + e.row;
                const int col = col0 + warp_col + j * kMmaN + e.col;
                if (row < M && col < N)
                    *reinterpret_cast<float2*>(C + row * N + col) =
                        make_float2(acc[i][j][half], acc[i][j][half + 1]);
            }
}

void gemm_bf16(int M, int N, int K, const Element* A, const Element* B, float* C) {
    if (course::kFp16TensorCores || course::compiled_arch(mma_pipeline_kernel) < 80)
        throw std::runtime_error(
            "mma_pipeline: cp.async and bf16 mma.sync need device code for "
            "sm_80 or newer (this build is for sm_75, in fp16)");
    // Above 48 KB a block's shared memory must be asked for (once per process is enough).
    static const std::size_t available = course::opt_in_shared_bytes(mma_pipeline_kernel);
    if (available < static_cast<std::size_t>(kSharedBytes))
        throw std::runtime_error("mma_pipeline: kStages stages need " +
                                 std::to_string(kSharedBytes) +
                                 " bytes of shared memory; a block "
                                 "may have " +
                                 std::to_string(available) + " here");
    // A 1D grid: one block per tile, which the kernel places in grouped order.
    const int tiles = course::ceil_div(M, kBM) * course::ceil_div(N, kBN);
    mma_pipeline_kernel<<<tiles, kThreads, kSharedBytes>>>(M, N, K, A, B, C);
    CUDA_CHECK_LAUNCH();
}
