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
#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "pairwise_cosine.h"
#include "tensor_core.h"

__global__ void inverse_norms_kernel(const __nv_bfloat16* X, float* inverse, int N, int D) {
    // TODO: inverse[i] = 1 / |x_i| in float32, a warp per row (bf16 pairs, a shuffle sum).
}

__global__ void pairwise_cosine_kernel(const __nv_bfloat16* X, const float* inverse,
                                       float* distances, float* mean, int N, int D) {
    // TODO: block b computes tile (ti, tj), ti <= tj, of X X^T: the upper triangle's tiles of
    //       128 x 128 in row-major order, (ti, tj) found from blockIdx.x.
    // TODO: module 05's main loop: tiles of 64 columns of X's rows ti * 128 .. and tj * 128 ..
    //       into swizzled shared memory by tc::cp_async_16 (a ring of stages), fragments by
    //       tc::ldmatrix_x4, products by tc::mma_bf16 (tensor_core.h: bf16 in every build;
    //       tc::mma would be fp16 in a build for a T4).
    // TODO: the epilogue: for every (row, col) of the tile with row < col < N,
    //       d = 1 - dot * inverse[row] * inverse[col] into distances[triangle_index(row, col, N)];
    //       sum the block's d and atomicAdd its share of the mean.
}

void pairwise_cosine(const __nv_bfloat16* X, float* distances, float* mean, float* workspace, int N,
                     int D) {
    // TODO: the norms into workspace; mean zeroed (cudaMemsetAsync); then one block per tile of
    //       the upper triangle, CUDA_CHECK_LAUNCH() after each launch. Above 48 KB of dynamic
    //       shared memory: course::opt_in_shared_bytes.
    COURSE_TODO("pairwise_cosine: write the two kernels and launch them, then delete this line");
}
