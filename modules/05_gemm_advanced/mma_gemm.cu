// 05_gemm_advanced/mma_gemm: C = A B^T with mma.sync.aligned.m16n8k16 through inline PTX (on a T4:
// fp16 and m16n8k8, two per k16 step), its operands loaded from shared memory with ldmatrix, the
// shared tiles XOR-swizzled.
//
// Teaches: the warp-level tensor-core instruction under wmma, with its fragments spelled out
// (which lane holds which element: course/gemm_layout.h transcribes the PTX ISA's tables, the
// notes draw them); ldmatrix, which loads four 8 x 8 matrices from shared memory straight into
// that layout, each lane pointing at one row; and a shared layout without bank conflicts for it:
// 128-byte rows whose 16-byte chunks are stored at chunk ^ (row % 8), so that the 8 rows an
// ldmatrix phase reads fall in 8 different groups of banks. (Stored plainly, the same kernel is
// exactly as correct and slower: only the profile shows the difference.)
//
// Run:  grader run 05/mma_gemm             Stuck:   grader hint 05/mma_gemm
// Contract: gemm_bf16.h                    Notes:   notes/05_gemm_advanced.md
// Profile: grader profile 05/mma_gemm      (the bank conflicts the swizzle removes)
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "mma_gemm.h"

namespace {

constexpr int kBM = 128;                          // rows of C per block
constexpr int kBN = 128;                          // columns of C per block
constexpr int kBK = 64;  // k per step: 64 elements = one 128-byte swizzled row
constexpr int kWarpsM = 2;                        // warps along M ...
constexpr int kWarpsN = 4;                        // ... and along N
constexpr int kWarpM = kBM / kWarpsM;             // 64 rows of C per warp
constexpr int kWarpN = kBN / kWarpsN;             // 32 columns of C per warp
constexpr int kMmaM = 16, kMmaN = 8, kMmaK = 16;  // one mma.sync.m16n8k16 (two m16n8k8 on sm_75)
constexpr int kTilesM = kWarpM / kMmaM;           // 4 m16 tiles per warp ...
constexpr int kTilesN = kWarpN / kMmaN;           // ... by 4 n8 tiles: 16 mma per k16 step
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kChunk = 8;                    // elements per 16-byte chunk
constexpr int kChunksPerRow = kBK / kChunk;  // 8: the swizzle permutes them

static_assert(kBK * 2 == course::kSwizzleRowBytes, "a tile row is one 128-byte swizzled row");
static_assert(kTilesN % 2 == 0, "B's ldmatrix.x4 loads two n8 tiles at a time");
static_assert(kTilesM * kMmaM == kWarpM && kBK % kMmaK == 0 && kChunksPerRow == 8,
              "whole m16 tiles, k16 steps, and 8 chunks per swizzled row");

// bf16, or fp16 where this build is for a GPU without bf16 tensor cores (sm_75: a T4), whose mma
// is fp16's m16n8k8 (course/tensor_element.h). course::kFp16TensorCores says which.
using Element = course::TensorElement;

}  // namespace

// TODO: small __device__ helpers around the PTX (notes/05_gemm_advanced.md, section 4):
//       - shared_address(pointer): the 32-bit shared-memory address of a pointer into shared
//         memory (static_cast<std::uint32_t>(__cvta_generic_to_shared(pointer))), what ldmatrix
//         takes;
//       - ldmatrix_x4(std::uint32_t (&regs)[4], std::uint32_t address): inline PTX
//         "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];", the 4 registers as
//         outputs ("=r"), the address as an input ("r"), and a "memory" clobber;
//       - mma_k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]), one
//         k16 step: d += a b for a 16 x 16 A, a 16 x 8 B, 16 x 8 float accumulators.
//         bf16 (an A100, an H100): inline PTX "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.
//         f32", d as D and as C ("+f"), a and b as inputs ("r"). It exists from sm_80 on: put the
//         asm under #if __CUDA_ARCH__ >= 800, and __trap() in the #else (the launcher never gets
//         there).
//         fp16 (a T4, sm_75: this build defines COURSE_FP16_TENSOR_CORES): sm_75 has only
//         "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32", A 2 registers ({%4, %5}), B one
//         ({%6}). Its fragments are the halves of m16n8k16's (course::mma_k8_a_element): the k16
//         step is two of them, A's registers 0, 1 with B's 0 (k 0-7), then 2, 3 with B's 1.
//         Write your GPU's branch (or both, under #if defined(COURSE_FP16_TENSOR_CORES)).
// TODO: a __device__ helper that copies rows row0 .. row0 + kRows - 1, columns k0 .. k0 + kBK - 1
//       of a row-major matrix of Element (`rows` x K) into a swizzled tile of kRows rows of 64:
//       16-byte chunk c of tile row r goes to tile + course::swizzled_bf16_offset(r, 8 * c),
//       zeros where the chunk lies outside the matrix. Thread t takes chunk t % 8 of a row.

__global__ void __launch_bounds__(kThreads)
    mma_gemm_kernel(int M, int N, int K, const Element* __restrict__ A,
                    const Element* __restrict__ B, float* __restrict__ C) {
    // TODO: shared tiles a_tile[kBM * kBK] and b_tile[kBN * kBK] (Element, alignas(16)), swizzled.
    //       Block (blockIdx.x, blockIdx.y) computes the tile at row0 = blockIdx.y * kBM, col0 =
    //       blockIdx.x * kBN; warp w owns rows (w / kWarpsN) * kWarpM.. and columns
    //       (w % kWarpsN) * kWarpN.. of it. float acc[kTilesM][kTilesN][4] = {}.
    // TODO: for each step k0 of kBK: load both tiles, barrier; for each k16 step k of the tile:
    //       - A's fragments: ldmatrix_x4 into a[i][4] for each m16 tile i, each lane pointing at
    //         row warp_row + 16 i + s.row, column k + s.col of a_tile, s = course::
    //         ldmatrix_a_source(lane) (through course::swizzled_bf16_offset);
    //       - B's: one ldmatrix_x4 per pair of n8 tiles j, j + 1, from row warp_col + 8 j + s.row,
    //         column k + s.col of b_tile, s = course::ldmatrix_b_source(lane): its registers are
    //         b[j][0], b[j][1], b[j + 1][0], b[j + 1][1];
    //       - mma_k16(acc[i][j], a[i], b[j]) for every i, j.
    //       Then a barrier before the next tiles overwrite these.
    // TODO: accumulator e of tile (i, j) is element course::mma_c_element(lane, e) of that 16 x 8
    //       tile: store the pairs (e = 0, 1) and (2, 3) as float2s where row < M and col < N.
}

void gemm_bf16(int M, int N, int K, const Element* A, const Element* B, float* C) {
    if (!course::kFp16TensorCores && course::compiled_arch(mma_gemm_kernel) < 80)
        throw std::runtime_error("mma_gemm: bf16 mma.sync needs device code for sm_80 or newer");
    // TODO: one block of kThreads threads per kBM x kBN tile of C, the grid's x along N and y
    //       along M (course::ceil_div); launch mma_gemm_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("mma_gemm: write the kernel and launch it, then delete this line");
}
