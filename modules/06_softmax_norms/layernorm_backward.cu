// 06_softmax_norms/layernorm_backward: LayerNorm backward: dx by rows, dgamma and dbeta by
// columns.
//
// Teaches: the LayerNorm gradient (two row sums per row), column sums over all rows done
// deterministically (per-thread partials, then a fixed-order sum in shared memory) instead of
// with atomics, and why one kernel per reduction direction keeps both coalesced.
//
// Run:  grader run 06/layernorm_backward   Stuck:  grader hint 06/layernorm_backward
// Contract: layernorm_backward.h            Notes:  notes/06_softmax_norms.md
#include "course/exercise.h"
#include "layernorm_backward.h"

__global__ void layernorm_backward_dx_kernel(const float* x, const float* dy, const float* gamma,
                                             const float* mean, const float* rstd, float* dx,
                                             int cols) {
    // TODO: one block per row: row = blockIdx.x; its data starts at std::size_t(row) * cols.
    // TODO: pass 1: each thread sums g = dy * gamma and g * xhat, xhat = (x - mean[row]) *
    // rstd[row],
    //       over its columns t, t + blockDim.x, ...
    // TODO: reduce both sums over the block (warp shuffles, then shared memory across warps);
    //       every thread needs mean_g = sum_g / cols and mean_g_xhat = sum_g_xhat / cols.
    // TODO: pass 2: dx = rstd[row] * (g - mean_g - xhat * mean_g_xhat).
}

__global__ void layernorm_backward_dgamma_dbeta_kernel(const float* x, const float* dy,
                                                       const float* mean, const float* rstd,
                                                       float* dgamma, float* dbeta, int rows,
                                                       int cols) {
    // TODO: each block owns 32 consecutive columns; with a dim3(32, 32) block, thread (tx, ty)
    //       sums rows ty, ty + 32, ... of column blockIdx.x * 32 + tx (skip columns >= cols):
    //       dgamma terms dy * xhat, dbeta terms dy. A warp reads 32 consecutive floats of a row.
    // TODO: write the partial sums to __shared__ arrays [32][32], __syncthreads(), and let the
    //       threads with ty == 0 add their column's 32 partials in a fixed order and write
    //       dgamma and dbeta. No atomicAdd: the result must be the same bits on every call.
}

void layernorm_backward(const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* rstd, float* dx, float* dgamma, float* dbeta, int rows,
                        int cols) {
    // TODO: launch layernorm_backward_dx_kernel with one block per row (a multiple of 32
    //       threads), then layernorm_backward_dgamma_dbeta_kernel with ceil_div(cols, 32) blocks
    //       of dim3(32, 32); CUDA_CHECK_LAUNCH() after each launch.
    COURSE_TODO("layernorm_backward: write both kernels and launch them, then delete this line");
}
