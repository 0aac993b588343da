// 07_attention/attention_naive: attention as three kernels, the T x T scores in memory.
// Reference solution.
//
// Teaches: what attention computes, step by step: S = scale Q K^T (masked when causal) written
// out, a softmax over each row of S that also saves its logsumexp L, then O = P V; and what it
// costs: batch * heads * T * T floats of scores written and read twice.
//
// Run:  grader run 07/attention_naive --solutions
// Contract: attention_naive.h          Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "attention_naive.h"
#include "course/exercise.h"

namespace {

constexpr int kTile = 16;  // 16 x 16 threads per block in the two products

// S[h][i][j] = scale * (q_i . k_j), or -inf for a masked key (causal, j > i): thread (j, i).
__global__ void scores_kernel(const float* Q, const float* K, float* S, int T, int D, float scale,
                              bool causal) {
    const int j = blockIdx.x * kTile + threadIdx.x, i = blockIdx.y * kTile + threadIdx.y;
    const long long head = blockIdx.z;
    if (i >= T || j >= T) return;
    const float* q = Q + (head * T + i) * D;
    const float* k = K + (head * T + j) * D;
    float dot = 0.0f;
    for (int d = 0; d < D; ++d) dot += q[d] * k[d];
    S[(head * T + i) * T + j] = causal && j > i ? -INFINITY : scale * dot;
}

// One block per row of S: the maximum, the sum of exp(s - max), then P = exp(s - max) / sum in
// place of S and L = max + log(sum). Masked entries are -inf: they add exp(-inf) = 0.
constexpr int kRowThreads = 256;

__device__ float block_reduce(float value, bool take_max, float* partials) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, value, offset);
        value = take_max ? fmaxf(value, other) : value + other;
    }
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
    __syncthreads();
    value = partials[0];
    for (int w = 1; w < kRowThreads / 32; ++w)
        value = take_max ? fmaxf(value, partials[w]) : value + partials[w];
    __syncthreads();  // everyone has read the partials before they are reused
    return value;
}

__global__ void softmax_rows_kernel(float* S, float* L, int T) {
    __shared__ float partials[kRowThreads / 32];
    float* row = S + static_cast<long long>(blockIdx.x) * T;
    float max = -FLT_MAX;
    for (int j = threadIdx.x; j < T; j += kRowThreads) max = fmaxf(max, row[j]);
    max = block_reduce(max, true, partials);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < T; j += kRowThreads) sum += expf(row[j] - max);
    sum = block_reduce(sum, false, partials);
    const float inv_sum = 1.0f / sum;
    for (int j = threadIdx.x; j < T; j += kRowThreads) row[j] = expf(row[j] - max) * inv_sum;
    if (threadIdx.x == 0) L[blockIdx.x] = max + logf(sum);
}

// O[h][i][d] = sum_j P[h][i][j] V[h][j][d]: thread (d, i).
__global__ void pv_kernel(const float* P, const float* V, float* O, int T, int D) {
    const int d = blockIdx.x * kTile + threadIdx.x, i = blockIdx.y * kTile + threadIdx.y;
    const long long head = blockIdx.z;
    if (i >= T || d >= D) return;
    const float* p = P + (head * T + i) * T;
    const float* v = V + head * T * D + d;
    float sum = 0.0f;
    for (int j = 0; j < T; ++j) sum += p[j] * v[static_cast<long long>(j) * D];
    O[(head * T + i) * D + d] = sum;
}

}  // namespace

void attention_naive(const float* Q, const float* K, const float* V, float* O, float* L,
                     float* scores, int batch, int heads, int T, int D, float scale, bool causal) {
    const int heads_total = batch * heads;
    const dim3 block(kTile, kTile);
    scores_kernel<<<dim3(course::ceil_div(T, kTile), course::ceil_div(T, kTile), heads_total),
                    block>>>(Q, K, scores, T, D, scale, causal);
    CUDA_CHECK_LAUNCH();
    softmax_rows_kernel<<<heads_total * T, kRowThreads>>>(scores, L, T);
    CUDA_CHECK_LAUNCH();
    pv_kernel<<<dim3(course::ceil_div(D, kTile), course::ceil_div(T, kTile), heads_total), block>>>(
        scores, V, O, T, D);
    CUDA_CHECK_LAUNCH();
}
