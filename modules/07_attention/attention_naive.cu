// 07_attention/attention_naive: attention as three kernels, the T x T scores in memory.
//
// Teaches: what attention computes, step by step: S = scale Q K^T (masked when causal) written
// out, a softmax over each row of S that also saves its logsumexp L, then O = P V; and what it
// costs: batch * heads * T * T floats of scores written and read twice.
//
// Run:  grader run 07/attention_naive      Stuck:  grader hint 07/attention_naive
// Contract: attention_naive.h              Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "attention_naive.h"
#include "course/exercise.h"

// S[h][i][j] = scale * (q_i . k_j), or -inf for a masked key (causal, j > i).
__global__ void scores_kernel(const float* Q, const float* K, float* S, int T, int D, float scale,
                              bool causal) {
    // TODO: thread (j, i) of head blockIdx.z: q_i starts at Q + (head * T + i) * D, k_j at
    //       K + (head * T + j) * D (long long arithmetic). Guard i, j < T.
    // TODO: S[(head * T + i) * T + j] = -INFINITY when causal and j > i, else scale * dot.
}

// One block per row of S: P = exp(s - max) / sum in place of S, and L = max + log(sum).
__global__ void softmax_rows_kernel(float* S, float* L, int T) {
    // TODO: a block-wide maximum (start at -FLT_MAX), a block-wide sum of expf(s - max), then
    //       write P back over the row and L[blockIdx.x] = max + logf(sum). Masked entries are
    //       -inf and add expf(-inf) = 0.
}

// O[h][i][d] = sum_j P[h][i][j] V[h][j][d].
__global__ void pv_kernel(const float* P, const float* V, float* O, int T, int D) {
    // TODO: thread (d, i) of head blockIdx.z, a loop over the T keys.
}

void attention_naive(const float* Q, const float* K, const float* V, float* O, float* L,
                     float* scores, int batch, int heads, int T, int D, float scale, bool causal) {
    // TODO: launch the three kernels in order (grids from course::ceil_div, heads in z), each
    //       followed by CUDA_CHECK_LAUNCH().
    COURSE_TODO("attention_naive: launch the three kernels, then delete this line");
}
