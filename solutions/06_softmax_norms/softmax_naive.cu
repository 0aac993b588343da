// 06_softmax_norms/softmax_naive: softmax with one thread per row. Reference solution.
//
// Teaches: the numerically safe softmax (subtract the row maximum before expf) and why a thread
// per row is slow: a warp's 32 threads read 32 different rows, so every load touches 32 separate
// cache lines instead of one, and there are only `rows` threads to hide the latency. The checker
// reports the bandwidth next to a device copy; the next exercise fixes both problems.
//
// Run:  grader run 06/softmax_naive --solutions
// Contract: softmax_naive.h            Notes:  notes/06_softmax_norms.md
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "softmax_naive.h"

__global__ void softmax_naive_kernel(const float* in, float* out, int rows, int cols) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;  // the last block is partial when rows is not a multiple of it
    // Widen before multiplying: row * cols in int would overflow for 4096 x 50304 and beyond.
    const float* x = in + static_cast<std::size_t>(row) * cols;
    float* y = out + static_cast<std::size_t>(row) * cols;

    // Pass 1: the maximum. Start from -inf, not 0: a row may be all negative.
    float row_max = -INFINITY;
    for (int c = 0; c < cols; ++c) row_max = fmaxf(row_max, x[c]);

    // Pass 2: the sum of exponentials. Every exponent x - max is <= 0, so each term lies in
    // (0, 1] and the largest is exactly 1: no overflow, and the sum is at least 1. (-inf entries
    // give expf(-inf) = 0; the contract promises at least one finite entry, so max is finite.)
    float sum = 0.0f;
    for (int c = 0; c < cols; ++c) sum += expf(x[c] - row_max);

    // Pass 3: normalize. One division, then a multiply per element.
    const float inv_sum = 1.0f / sum;
    for (int c = 0; c < cols; ++c) y[c] = expf(x[c] - row_max) * inv_sum;
}

void softmax_naive(const float* in, float* out, int rows, int cols) {
    // One thread per row: only `rows` threads in all (4096 for a vocabulary-sized matrix, a
    // fraction of the 2048 * 132 an H100 can hold), which is the point of this exercise.
    const int threads = 128;
    const int blocks = course::ceil_div(rows, threads);
    softmax_naive_kernel<<<blocks, threads>>>(in, out, rows, cols);
    CUDA_CHECK_LAUNCH();
}
