// 06_softmax_norms/cross_entropy: fused softmax cross-entropy, loss and gradient in one kernel.
//
// Teaches: the online (running max, rescaled sum) logsumexp and how two such states merge;
// fusing a loss with its gradient, with the row kept on chip so that the logits are read from
// device memory once and dlogits written once; -inf (masked) logits; why the maximum is
// subtracted before expf. Memory-bound: the checker reports your bandwidth next to a
// device-to-device copy.
//
// Run:  grader run 06/cross_entropy    Stuck:  grader hint 06/cross_entropy
// Contract: cross_entropy.h            Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "course/exercise.h"
#include "cross_entropy.h"

__global__ void cross_entropy_kernel(const float* logits, const int* targets, float* losses,
                                     float* dlogits, int rows, int vocab) {
    // TODO: one block per row: row = blockIdx.x; the row starts at logits + std::size_t(row) *
    // vocab.
    // TODO: pass 1: each thread keeps a running maximum m and the sum S of expf(x - m) over its
    //       columns t, t + blockDim.x, ...; when m grows, rescale S by expf(old_m - new_m). Start
    //       at m = -FLT_MAX, S = 0, as softmax_online's SoftmaxState: from -INFINITY, a thread
    //       that sees only -inf logits would compute expf(-inf - -inf) = NaN.
    // TODO: merge the (m, S) states of the block: m = fmaxf(m1, m2), S = S1 * expf(m1 - m) +
    //       S2 * expf(m2 - m); across the warp with __shfl_xor_sync, across warps through
    //       shared memory. Every thread needs the row's m and S.
    // TODO: thread 0 writes losses[row] = (m - logit[target]) + logf(S).
    // TODO: pass 2: dlogits = (expf(x - m) / S - (col == target ? 1 : 0)) / rows.
    // TODO (fast): float4 loads and stores when vocab % 4 == 0 and the pointers are 16-byte
    //       aligned; multiply by 1 / S and 1 / rows computed once instead of dividing per element.
    // TODO (fast): read the logits from device memory once: keep the thread's columns on chip
    //       between the passes, in registers for rows up to a few thousand floats (a fixed-size
    //       array, fully unrolled loops), in dynamic shared memory for GPT-2's 50304 (201 KB,
    //       see layernorm.cu).
}

void cross_entropy(const float* logits, const int* targets, float* losses, float* dlogits, int rows,
                   int vocab) {
    // TODO: launch cross_entropy_kernel with one block per row (grid = rows) and a multiple of 32
    //       threads, then CUDA_CHECK_LAUNCH() (dynamic shared memory, if any: see layernorm.cu).
    COURSE_TODO("cross_entropy: write cross_entropy_kernel and launch it, then delete this line");
}
