// 06_softmax_norms/layernorm: LayerNorm forward, one block per row, Welford statistics.
//
// Teaches: Welford's mean and variance, and how two partial Welford states merge (the same
// merge serves a thread, a warp and the block); block-wide reductions of a struct; float4 loads;
// keeping the row on chip (registers, or shared memory when it is long) between the statistics
// and the write; saving the statistics for the backward pass. Memory-bound: the checker reports
// your bandwidth next to a device-to-device copy.
//
// Run:  grader run 06/layernorm        Stuck:  grader hint 06/layernorm
// Contract: layernorm.h                Notes:  notes/06_softmax_norms.md
#include "course/exercise.h"
#include "layernorm.h"

// Count, mean and M2 (the sum of squared deviations from the mean) of a set of values; the
// variance is m2 / count. One value v has the state {1, v, 0}; no values, {0, 0, 0}.
struct Welford {
    float count;
    float mean;
    float m2;
};

__device__ Welford welford_merge(Welford a, Welford b) {
    // TODO: return the state of the union of the two sets (notes/06_softmax_norms.md derives it):
    //       count = a.count + b.count, delta = b.mean - a.mean,
    //       mean  = a.mean + delta * b.count / count,
    //       m2    = a.m2 + b.m2 + delta * delta * a.count * b.count / count.
    //       Both sets can be empty (a thread with no columns): do not divide by a zero count.
    return a;
}

__global__ void layernorm_kernel(const float* x, const float* gamma, const float* beta, float* y,
                                 float* mean, float* rstd, int cols) {
    // TODO: one block per row: row = blockIdx.x, and the row starts at x + std::size_t(row) * cols
    //       (64-bit: rows * cols can pass 2^31).
    // TODO: pass 1: thread t merges the values of columns t, t + blockDim.x, t + 2 * blockDim.x,
    // ...
    //       into its own Welford state (consecutive threads read consecutive floats: coalesced).
    // TODO: merge the states of the block: across the warp with __shfl_xor_sync on all three
    //       fields (offsets 16, 8, 4, 2, 1), then across warps through a __shared__ Welford[32]
    //       and __syncthreads(), so that every thread knows the row's mean and m2.
    // TODO: thread 0 writes mean[row] and rstd[row] = rsqrtf(m2 / cols + kLayerNormEps).
    // TODO: pass 2: y = (x - mean) * rstd * gamma + beta for the thread's columns (reading the
    //       row again is correct, and fast for short rows: they are still in L1/L2).
    // TODO (fast): when cols % 4 == 0 and the pointers are 16-byte aligned, read and write float4s.
    // TODO (fast): read x from device memory once: keep the thread's columns on chip between the
    //       two passes. A fixed-size array in fully unrolled loops stays in registers (16 floats
    //       per thread: 256 threads hold a 4096-float row); a longer row goes to dynamic shared
    //       memory (a 50304-float row is 201 KB: it misses L2 on a second read, and fits the
    //       227 KB a block may opt into on an H100).
}

void layernorm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
               float* rstd, int rows, int cols) {
    // TODO: launch layernorm_kernel with one block per row (grid = rows) and a multiple of 32
    //       threads (for example 256, or 1024 for long rows), then CUDA_CHECK_LAUNCH(). A row
    //       staged in shared memory: the bytes are the third launch parameter, and above 48 KB
    //       the kernel must first opt in with cudaFuncSetAttribute(kernel,
    //       cudaFuncAttributeMaxDynamicSharedMemorySize, bytes).
    COURSE_TODO("layernorm: write layernorm_kernel and launch it, then delete this line");
}
