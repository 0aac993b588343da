// 05_gemm_advanced/wmma_gemm: C = A B^T on the tensor cores through nvcuda::wmma, bf16 inputs
// (fp16 on a T4), float32 accumulators.
//
// Teaches: the tensor cores' unit of work, a 16 x 16 x 16 product whose operands and result are
// fragments the 32 lanes of a warp hold together (which lane holds what is the library's
// business here; mma_gemm opens it); tiles of A and B staged in shared memory with 16-byte loads,
// zeros past M, N and K on the way in; the accumulators written back through shared memory, so
// that a partial tile at the edge of C is a guarded copy rather than a fragment store.
//
// Run:  grader run 05/wmma_gemm            Stuck:   grader hint 05/wmma_gemm
// Contract: gemm_bf16.h                    Notes:   notes/05_gemm_advanced.md
#include <mma.h>

#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "wmma_gemm.h"

namespace {

constexpr int kBM = 64;     // rows of C per block
constexpr int kBN = 64;     // columns of C per block
constexpr int kBK = 32;     // k per step: two 16-deep fragments
constexpr int kWarpsM = 2;  // warps along M ...
constexpr int kWarpsN = 2;  // ... and along N: each owns a kWarpM x kWarpN tile of C
constexpr int kWarpM = kBM / kWarpsM;
constexpr int kWarpN = kBN / kWarpsN;
constexpr int kFrag = 16;  // wmma's bf16 and fp16 shape: 16 x 16 x 16
constexpr int kFragsM = kWarpM / kFrag;
constexpr int kFragsN = kWarpN / kFrag;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kChunk = 8;  // 16-bit elements per 16-byte load
// Shared rows padded by one 16-byte chunk: wmma reads 16 rows at a time, and rows 80 bytes apart
// spread them over the banks (64 bytes apart, every other row would start in the same banks).
// wmma needs row strides that are multiples of 16 bytes, and fragments that start on 32 bytes.
constexpr int kTileStride = kBK + kChunk;  // in elements
constexpr int kCStride = kBN + 4;          // in floats

static_assert(kFragsM * kFrag == kWarpM && kFragsN * kFrag == kWarpN && kBK % kFrag == 0,
              "a warp's tile and a K step are whole fragments");
static_assert(kBK % kChunk == 0 && kBN % 4 == 0, "whole 16-byte chunks");
static_assert(kFrag * kTileStride * 2 % 32 == 0 && kFrag * kCStride * 4 % 32 == 0,
              "every fragment starts on 32 bytes");

// bf16, or fp16 where this build is for a GPU without bf16 tensor cores (sm_75: a T4); wmma takes
// either, the same code (course/tensor_element.h).
using Element = course::TensorElement;

}  // namespace

// TODO: a __device__ helper that copies rows row0 .. row0 + kRows - 1, columns k0 .. k0 + kBK - 1
//       of a row-major matrix of Element (`rows` x K) into a shared tile[kRows][kTileStride], one
//       uint4 (8 elements, 16 bytes) per thread and step, zeros where the chunk lies outside the
//       matrix (K is a multiple of 8: a chunk is entirely inside or outside).

__global__ void __launch_bounds__(kThreads)
    wmma_gemm_kernel(int M, int N, int K, const Element* __restrict__ A,
                     const Element* __restrict__ B, float* __restrict__ C) {
    // bf16 fragments exist from sm_80 on, fp16 ones before (a build for sm_75 has fp16 elements):
    // bf16 compiled for an older GPU leaves the kernel empty, and the launcher refuses to run it.
#if defined(COURSE_FP16_TENSOR_CORES) || __CUDA_ARCH__ >= 800
    // TODO: shared tiles a_tile[kBM][kTileStride] (A's rows row0.., k0..) and b_tile[kBN]
    //       [kTileStride] (B's rows col0.., k0..: B is N x K), c_tile[kBM][kCStride] floats; all
    //       alignas(128). Block (blockIdx.x, blockIdx.y) computes the tile at row0 = blockIdx.y *
    //       kBM, col0 = blockIdx.x * kBN; warp w owns rows (w / kWarpsN) * kWarpM.. and columns
    //       (w % kWarpsN) * kWarpN.. of it.
    // TODO: kFragsM x kFragsN accumulator fragments (nvcuda::wmma::fragment<wmma::accumulator,
    //       16, 16, 16, float>), filled with 0. For each step k0 of kBK: load both tiles, barrier,
    //       then for each 16 of k load A's fragments (matrix_a, row_major) and B's (matrix_b: the
    //       k x n operand; B's tile holds element (k, n) at b_tile[n][k], which is col_major) with
    //       wmma::load_matrix_sync and multiply-add every pair with wmma::mma_sync; barrier.
    // TODO: store the accumulators to c_tile (wmma::store_matrix_sync, mem_row_major), barrier,
    //       then copy c_tile to C 4 floats at a time where row < M and col < N.
#endif
}

void gemm_bf16(int M, int N, int K, const Element* A, const Element* B, float* C) {
    if (!course::kFp16TensorCores && course::compiled_arch(wmma_gemm_kernel) < 80)
        throw std::runtime_error(
            "wmma_gemm: bf16 tensor cores need device code for sm_80 or newer");
    // TODO: one block of kThreads threads per kBM x kBN tile of C, the grid's x along N and y
    //       along M (course::ceil_div); launch wmma_gemm_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("wmma_gemm: write the kernel and launch it, then delete this line");
}
