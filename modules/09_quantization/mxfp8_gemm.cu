// 09_quantization/mxfp8_gemm: C = A^ B^T for MXFP8 A and B (blocks of 32 along K), on the bf16
// tensor cores: each tile dequantized on its way into shared memory, then module 05's mma_gemm.
//
// Teaches: where the block scales go. Every element times its block's power of two is a bf16
// exactly, so the tiles can be dequantized once, when they are copied to shared memory, and the
// product is module 05's bf16 GEMM with no rounding of its inputs; and why this, rather than FP8
// tensor cores with the scales applied to the accumulators, on GPUs before Blackwell (notes,
// section 6). The checker reports your rate next to cuBLAS's bf16 GEMM on the same values.
//
// Run:  grader run 09/mxfp8_gemm             Stuck:  grader hint 09/mxfp8_gemm
// Contract: mxfp8_gemm.h                     Notes:  notes/09_quantization.md
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "mxfp8_gemm.h"
#include "tensor_core.h"

// TODO: a __device__ helper that copies rows row0 .. row0 + kRows - 1, columns k0 .. k0 + 63 of an
//       MXFP8 matrix into a swizzled bf16 tile (tc::swizzled<64>): chunk c of tile row r is 8
//       codes at k = k0 + 8 c, dequantized (decode(P) * X, X from the block's scale byte) and
//       paired with tc::pack_bf16 (bf16 in every build; tc::pack would be fp16 in a build for a
//       T4); zeros outside the matrix.

__global__ void mxfp8_gemm_kernel(int M, int N, int K, const std::uint8_t* a_elements,
                                  const std::uint8_t* a_scales, const std::uint8_t* b_elements,
                                  const std::uint8_t* b_scales, float* C) {
    // TODO: module 05's mma_gemm with that copy: a block per 128 x 128 tile of C, 8 warps of
    //       64 x 32, k steps of 64; per k16 step tc::ldmatrix_x4 of A and B and 16 tc::mma_bf16;
    //       barriers after the copy and before the next; float2 stores where row < M, col < N.
}

void mxfp8_gemm(int M, int N, int K, const std::uint8_t* a_elements, const std::uint8_t* a_scales,
                const std::uint8_t* b_elements, const std::uint8_t* b_scales, float* C) {
    if (course::compiled_arch(mxfp8_gemm_kernel) < 80)
        throw std::runtime_error("mxfp8_gemm: bf16 mma.sync needs device code for sm_80 or newer");
    // TODO: grid (ceil_div(N, 128), ceil_div(M, 128)) of 256 threads, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("mxfp8_gemm: write mxfp8_gemm_kernel and launch it, then delete this line");
}
