// 06_softmax_norms/softmax_causal: causal masked, scaled softmax over attention scores.
//
// Teaches: rows of different lengths (query i sees keys 0..i), reading only the live part of a
// row and writing the masked part as exact zeros, folding the scale into the exponent, and
// keeping a whole row in registers when it is short enough (T <= 1024: 32 floats per lane).
//
// Run:  grader run 06/softmax_causal      Stuck:  grader hint 06/softmax_causal
// Contract: softmax_causal.h              Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "softmax_causal.h"

__global__ void softmax_causal_kernel(const float* scores, float* probs, int batch_heads, int T,
                                      float scale) {
    // TODO: one warp per row (8 rows per block of 256): row r = blockIdx.x * 8 + warp, in
    //       0 .. batch_heads * T - 1; i = r % T is the query position, so columns 0..i are live.
    //       The row starts at scores + std::size_t(r) * T.
    // TODO: the maximum and the sum over the live columns only: never let a masked score (it may
    //       be NaN) into them; a masked column can be treated as -INFINITY (expf(-inf) = 0).
    //       Scale inside the exponent: expf((s - max_s) * scale) for scale > 0.
    // TODO: write all T columns: the probability for j <= i, 0.0f for j > i.
    // TODO (speed): for T <= 1024 a warp can hold the whole live row in registers (32 floats per
    //       lane, fully unrolled loops over a fixed-size array), so it is read from memory once.
    //       Longer rows: a block per row, online (max, sum) as in softmax_online, then the write.
}

void softmax_causal(const float* scores, float* probs, int batch_heads, int T, float scale) {
    // TODO: the grid covers batch_heads * T rows (course::ceil_div by the rows per block), launch,
    //       then CUDA_CHECK_LAUNCH().
    COURSE_TODO("softmax_causal: launch softmax_causal_kernel, then delete this line");
}
