// 06_softmax_norms/softmax_naive: softmax with one thread per row.
//
// Teaches: the numerically safe softmax (subtract the row maximum before expf) and why a thread
// per row is slow: a warp's 32 threads read 32 different rows, so every load touches 32 separate
// cache lines instead of one, and there are only `rows` threads to hide the latency. The checker
// reports your bandwidth next to a device copy; the next exercise fixes both problems.
//
// Run:  grader run 06/softmax_naive       Stuck:  grader hint 06/softmax_naive
// Contract: softmax_naive.h               Notes:  notes/06_softmax_norms.md
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "softmax_naive.h"

__global__ void softmax_naive_kernel(const float* in, float* out, int rows, int cols) {
    // TODO: this thread's row is its global index; threads past the last row return.
    // TODO: point x and y at the row's first element in `in` and `out` (widen to std::size_t
    //       before multiplying row * cols: 4096 x 50304 is close to the int limit).
    // TODO: pass 1: the row's maximum (start from -INFINITY; rows can be all negative).
    // TODO: pass 2: sum of expf(x[c] - max) over the row. Why subtract: expf(89) is already inf.
    // TODO: pass 3: y[c] = expf(x[c] - max) / sum (or times 1 / sum, computed once).
}

void softmax_naive(const float* in, float* out, int rows, int cols) {
    // TODO: one thread per row: pick a block size (e.g. 128), course::ceil_div(rows, threads)
    //       blocks, launch softmax_naive_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("softmax_naive: launch softmax_naive_kernel, then delete this line");
}
