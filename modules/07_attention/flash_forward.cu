// 07_attention/flash_forward: flash attention in float32 on the CUDA cores.
//
// Teaches: attention without the T x T scores: a block keeps a tile of queries in shared memory
// and walks over K/V tiles, and each query row carries a running maximum m, a running sum l and
// a running output o, rescaled by exp(m_old - m_new) whenever a tile raises the maximum (module
// 06's online softmax, now with a vector o riding along). Memory is O(T D), not O(T^2).
//
// Run:  grader run 07/flash_forward        Stuck:  grader hint 07/flash_forward
// Contract: flash_forward.h                Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>

#include "course/exercise.h"
#include "flash_forward.h"

namespace {

template <int kD>
__global__ void flash_forward_kernel(const float* Q, const float* K, const float* V, float* O,
                                     float* L, int T, float scale, bool causal) {
    // TODO: stage this block's query tile in shared memory (zeros for rows past T).
    // TODO: per query row, in registers: m = -FLT_MAX, l = 0, o[kD / 32] = 0 (lane l holds
    //       columns l, l + 32, ...).
    // TODO: for each K/V tile of 32 keys: __syncthreads(); load K (transposed) and V into shared
    //       memory (zeros past T); __syncthreads(); scores (-INFINITY for a key past T, or after
    //       the query when causal); the tile maximum; m' = max(m, tile max); l and o times
    //       exp(m - m'); add exp(s - m') and exp(s - m') v.
    // TODO: O = o / l and L = m + logf(l) for the rows < T.
}

}  // namespace

void flash_forward(const float* Q, const float* K, const float* V, float* O, float* L, int batch,
                   int heads, int T, int D, float scale, bool causal) {
    // TODO: instantiate the kernel for D = 64 and D = 128; grid (query tiles, batch * heads);
    //       opt in to the shared memory it needs (cudaFuncSetAttribute) before launching;
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("flash_forward: write the kernel and launch it, then delete this line");
}
