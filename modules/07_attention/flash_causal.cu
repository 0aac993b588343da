// 07_attention/flash_causal: flash attention in float32 that skips the masked tiles.
//
// Teaches: what the causal mask saves when it is used to skip work rather than to zero it: a
// query tile stops at the K/V tile holding its last query, only the tiles that cross the
// diagonal need the mask, and the blocks with the most work are launched first.
//
// Run:  grader run 07/flash_causal         Stuck:  grader hint 07/flash_causal
// Contract: flash_causal.h                 Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>

#include "course/exercise.h"
#include "flash_causal.h"

namespace {

template <int kD>
__global__ void flash_forward_kernel(const float* Q, const float* K, const float* V, float* O,
                                     float* L, int T, float scale, bool causal) {
    // TODO: start from your flash_forward kernel. Causal: take query tile gridDim.x - 1 -
    //       blockIdx.x (the heaviest first), stop the K/V loop at min(T, q0 + rows), and mask only
    //       the tiles that cross the diagonal or T.
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

void flash_causal(const float* Q, const float* K, const float* V, float* O, float* L, int batch,
                  int heads, int T, int D, float scale, bool causal) {
    // TODO: instantiate the kernel for D = 64 and D = 128; grid (query tiles, batch * heads);
    //       opt in to the shared memory it needs (cudaFuncSetAttribute) before launching;
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("flash_causal: write the kernel and launch it, then delete this line");
}
