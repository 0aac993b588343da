// 05_gemm_advanced/mma_pipeline: mma_gemm's kernel fed by a cp.async pipeline: several K tiles in
// flight while the tensor cores work on an earlier one, the next fragments loaded while the
// current ones are multiplied, and blocks ordered so that those running together share their
// tiles in L2.
//
// Teaches: cp.async, the copy from global to shared memory that bypasses the registers and
// completes later; its commit groups and cp.async.wait_group N ("all but the N youngest groups
// have landed"); a ring of kStages shared stages in which the tile of step kt + kStages - 1 is
// copied while step kt computes, with one barrier per step; register double buffering (the
// ldmatrix of k16 step s + 1 issued before the mma of step s); and a grouped block order
// (course::grouped_tile). Same tiles, warps, swizzle and fragments as mma_gemm.
//
// Run:  grader run 05/mma_pipeline         Stuck:   grader hint 05/mma_pipeline
// Contract: gemm_bf16.h                    Notes:   notes/05_gemm_advanced.md
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
constexpr int kStages = 3;             // shared stages in the ring: kStages - 1 in flight
constexpr int kGroupRows = 8;          // tile rows per group of the block order
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
static_assert(kTilesM * kMmaM == kWarpM && kSteps * kMmaK == kBK && kChunksPerRow == 8 &&
                  kGroupRows >= 1,
              "whole m16 tiles, k16 steps, 8 chunks per swizzled row, groups of tile rows");

}  // namespace

// TODO: your shared_address, ldmatrix_x4 and mma_k16 from mma_gemm (its bf16 m16n8k16: this rung
//       runs on sm_80 and newer only), and three helpers around cp.async (sm_80 and newer: each
//       under #if __CUDA_ARCH__ >= 800, __trap() or nothing in the #else;
//       notes/05_gemm_advanced.md, section 6):
//       - cp_async_16(std::uint32_t shared, const void* global, bool valid): inline PTX
//         "cp.async.cg.shared.global [%0], [%1], 16, %2;" with the shared address ("r"), the
//         global pointer ("l") and the number of bytes to read, 16 or 0 ("r": with 0 nothing is
//         read and the 16 bytes are zero-filled), and a "memory" clobber;
//       - cp_async_commit(): "cp.async.commit_group;";
//       - template <int kPending> cp_async_wait(): "cp.async.wait_group %0;" with "n"(kPending).
// TODO: mma_gemm's tile copy with cp_async_16 instead of a load and a store (a chunk outside the
//       matrix: valid = false, and a source pointer that is still inside it, the matrix itself).

__global__ void __launch_bounds__(kThreads)
    mma_pipeline_kernel(int M, int N, int K, const Element* __restrict__ A,
                        const Element* __restrict__ B, float* __restrict__ C) {
    // TODO: the kStages stages in dynamic shared memory (extern __shared__ __align__(16)
    //       Element stages[]: kSharedBytes, more than a static array may have), stage s at
    //       stages + s * kStageElements, its B tile kBM * kBK elements after its A tile.
    // TODO: this block's tile: course::grouped_tile(blockIdx.x, tiles_m, tiles_n, kGroupRows).
    // TODO: the ring. Start the copies of tiles 0 .. kStages - 2, one commit group each (commit
    //       an empty group where there is no such tile: every step below then counts the same).
    //       For each k tile kt: cp_async_wait<kStages - 2>() (tile kt has landed), a barrier
    //       (everyone's copies have; everyone is done with tile kt - 1), start the copy of tile
    //       kt + kStages - 1 into stage (kt + kStages - 1) % kStages and commit, then compute on
    //       stage kt % kStages as mma_gemm does, with the fragments of k16 step s + 1 loaded
    //       (into a second set of registers) before the mma of step s.
    // TODO: the epilogue of mma_gemm.
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
    // TODO: a 1D grid of one block per tile (course::ceil_div(M, kBM) * course::ceil_div(N,
    //       kBN)) of kThreads threads with kSharedBytes of dynamic shared memory; launch
    //       mma_pipeline_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("mma_pipeline: write the kernel and launch it, then delete this line");
}
