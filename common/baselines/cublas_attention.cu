// Attention as a user without a fused kernel would write it with cuBLAS: the scores S = Q K^T
// materialized by a strided-batched GEMM, a softmax kernel over each row of S (scaled, masked
// when causal), then O = P V by a second GEMM; the backward pass with five GEMMs and two
// element-wise kernels over the T x T matrices. The baseline of module 07's float32 exercises,
// and of its bf16 (fp16) ones where cuDNN's fused attention does not run (cudnn_attention.cu). The
// T x T buffers are kept between calls (grown on demand), so that timed calls pay only for the
// work.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "course/check.h"
#include "library.h"
#include "scratch.h"

namespace course::baseline::library {

namespace {

void check(cublasStatus_t status, const char* expression) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(status) +
                                 " in `" + expression + "`");
}

cublasHandle_t handle() {
    static cublasHandle_t h = [] {
        cublasHandle_t made = nullptr;
        check(cublasCreate(&made), "cublasCreate");
        return made;
    }();
    return h;
}

// One grow-only device buffer per use.
Scratch scores_f32, probs_f32, probs_16bit, grad_scores_16bit, row_deltas;

struct Dims {
    int heads_total, T, D;
    long long qkv_stride() const { return static_cast<long long>(T) * D; }
    long long scores_stride() const { return static_cast<long long>(T) * T; }
    std::size_t scores() const { return static_cast<std::size_t>(heads_total) * T * T; }
};

// Row-major X (r x c) is column-major X^T (c x r, leading dimension c). For each head:
// S = A B^T with A, B row-major T x D ("NT" in row-major) is, column-major, S^T = B A^T:
//   gemm(T, N, m = T, n = T, k = D, B, ld D, A, ld D, S, ld T).
void gemm_abt(const void* A, cudaDataType a_type, const void* B, void* C, cudaDataType c_type,
              const Dims& dims, float alpha) {
    const float beta = 0.0f;
    check(cublasGemmStridedBatchedEx(
              handle(), CUBLAS_OP_T, CUBLAS_OP_N, dims.T, dims.T, dims.D, &alpha, B, a_type, dims.D,
              dims.qkv_stride(), A, a_type, dims.D, dims.qkv_stride(), &beta, C, c_type, dims.T,
              dims.scores_stride(), dims.heads_total, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx (A B^T)");
}

// C = P X with P row-major T x T (16-bit) and X row-major T x D: column-major C^T = X^T P^T,
//   gemm(N, N, m = D, n = T, k = T, X, ld D, P, ld T, C, ld D).
// With `transpose_p`, C = P^T X: column-major C^T = X^T P, gemm(N, T, ...).
void gemm_px(const void* P, const void* X, cudaDataType in_type, void* C, cudaDataType c_type,
             const Dims& dims, float alpha, bool transpose_p) {
    const float beta = 0.0f;
    check(cublasGemmStridedBatchedEx(handle(), CUBLAS_OP_N, transpose_p ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     dims.D, dims.T, dims.T, &alpha, X, in_type, dims.D,
                                     dims.qkv_stride(), P, in_type, dims.T, dims.scores_stride(),
                                     &beta, C, c_type, dims.D, dims.qkv_stride(), dims.heads_total,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx (P X)");
}

constexpr int kThreads = 256;

__device__ float block_reduce(float v, bool is_max) {
    __shared__ float partials[kThreads / 32];
    for (int offset = 16; offset > 0; offset /= 2) {
        const float other = __shfl_xor_sync(0xffffffffu, v, offset);
        v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();  // the partials of a previous reduction have been read
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = v;
    __syncthreads();
    v = partials[0];
    for (int w = 1; w < kThreads / 32; ++w) v = is_max ? fmaxf(v, partials[w]) : v + partials[w];
    return v;
}

__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }
__device__ void store(__half* p, float v) { *p = __float2half(v); }
__device__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ float load(__half v) { return __half2float(v); }

// One block per row of S (float32): P = softmax(scale * S) masked to keys <= i when causal (float,
// bf16 or fp16), and L = the row's logsumexp (float32), or nullptr.
template <class Out>
__global__ void softmax_kernel(const float* S, Out* P, float* L, int T, float scale, bool causal) {
    const long long row = blockIdx.x;
    const int i = static_cast<int>(row % T), visible = causal ? i + 1 : T;
    const float* s = S + row * T;
    float max = -INFINITY;
    for (int j = threadIdx.x; j < visible; j += kThreads) max = fmaxf(max, scale * s[j]);
    max = block_reduce(max, true);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < visible; j += kThreads) sum += expf(scale * s[j] - max);
    sum = block_reduce(sum, false);
    const float inv = 1.0f / sum;
    for (int j = threadIdx.x; j < T; j += kThreads)
        store(P + row * T + j, j < visible ? expf(scale * s[j] - max) * inv : 0.0f);
    if (L && threadIdx.x == 0) L[row] = max + logf(sum);
}

// P recomputed from S and L (bf16 or fp16), masked.
template <class Half>
__global__ void probs_kernel(const float* S, const float* L, Half* P, int T, float scale,
                             bool causal) {
    const long long row = blockIdx.x;
    const int i = static_cast<int>(row % T), visible = causal ? i + 1 : T;
    for (int j = threadIdx.x; j < T; j += kThreads)
        store(P + row * T + j, j < visible ? expf(scale * S[row * T + j] - L[row]) : 0.0f);
}

// delta_i = dO_i . O_i, one block per row.
template <class Half>
__global__ void delta_kernel(const Half* O, const Half* dO, float* delta, int D) {
    const long long row = blockIdx.x;
    float sum = 0.0f;
    for (int d = threadIdx.x; d < D; d += kThreads)
        sum += load(O[row * D + d]) * load(dO[row * D + d]);
    sum = block_reduce(sum, false);
    if (threadIdx.x == 0) delta[row] = sum;
}

// dS = P (dP - delta_i) in bf16 or fp16, from dP (float32) and P.
template <class Half>
__global__ void grad_scores_kernel(const Half* P, const float* dP, const float* delta, Half* dS,
                                   int T) {
    const long long row = blockIdx.x;
    for (int j = threadIdx.x; j < T; j += kThreads) {
        const long long e = row * T + j;
        store(dS + e, load(P[e]) * (dP[e] - delta[row]));
    }
}

Dims dims_of(int batch, int heads, int T, int D) { return {batch * heads, T, D}; }

// The forward and backward in a 16-bit type: Half is __nv_bfloat16 (cuBLAS's CUDA_R_16BF) or
// __half (CUDA_R_16F).
template <class Half>
constexpr cudaDataType kType = std::is_same_v<Half, __half> ? CUDA_R_16F : CUDA_R_16BF;

template <class Half>
void attention_16bit(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                     std::uint16_t* O, float* L, int batch, int heads, int T, int D, float scale,
                     bool causal) {
    const Dims dims = dims_of(batch, heads, T, D);
    auto* S = static_cast<float*>(scores_f32.get(dims.scores() * sizeof(float)));
    auto* P = static_cast<Half*>(probs_16bit.get(dims.scores() * 2));
    gemm_abt(Q, kType<Half>, K, S, CUDA_R_32F, dims, 1.0f);
    softmax_kernel<<<dims.heads_total * T, kThreads>>>(S, P, L, T, scale, causal);
    CUDA_CHECK_LAUNCH();
    gemm_px(P, V, kType<Half>, O, kType<Half>, dims, 1.0f, false);
}

template <class Half>
void attention_backward_16bit(const std::uint16_t* Q, const std::uint16_t* K,
                              const std::uint16_t* V, const std::uint16_t* O,
                              const std::uint16_t* dO, const float* L, float* dQ, float* dK,
                              float* dV, int batch, int heads, int T, int D, float scale,
                              bool causal) {
    const Dims dims = dims_of(batch, heads, T, D);
    constexpr cudaDataType type = kType<Half>;
    auto* S = static_cast<float*>(scores_f32.get(dims.scores() * sizeof(float)));
    auto* P = static_cast<Half*>(probs_16bit.get(dims.scores() * 2));
    auto* dS = static_cast<Half*>(grad_scores_16bit.get(dims.scores() * 2));
    auto* delta =
        static_cast<float*>(row_deltas.get(static_cast<std::size_t>(dims.heads_total) * T * 4));
    const unsigned rows = static_cast<unsigned>(dims.heads_total * T);
    gemm_abt(Q, type, K, S, CUDA_R_32F, dims, 1.0f);  // S, recomputed
    probs_kernel<<<rows, kThreads>>>(S, L, P, T, scale, causal);
    CUDA_CHECK_LAUNCH();
    gemm_px(P, dO, type, dV, CUDA_R_32F, dims, 1.0f, true);  // dV = P^T dO
    gemm_abt(dO, type, V, S, CUDA_R_32F, dims, 1.0f);        // dP = dO V^T, into S's buffer
    delta_kernel<<<rows, kThreads>>>(reinterpret_cast<const Half*>(O),
                                     reinterpret_cast<const Half*>(dO), delta, D);
    CUDA_CHECK_LAUNCH();
    grad_scores_kernel<<<rows, kThreads>>>(P, S, delta, dS, T);
    CUDA_CHECK_LAUNCH();
    gemm_px(dS, K, type, dQ, CUDA_R_32F, dims, scale, false);  // dQ = scale dS K
    gemm_px(dS, Q, type, dK, CUDA_R_32F, dims, scale, true);   // dK = scale dS^T Q
}

}  // namespace

void cublas_attention_bf16(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                           std::uint16_t* O, float* L, int batch, int heads, int T, int D,
                           float scale, bool causal) {
    attention_16bit<__nv_bfloat16>(Q, K, V, O, L, batch, heads, T, D, scale, causal);
}

void cublas_attention_fp16(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                           std::uint16_t* O, float* L, int batch, int heads, int T, int D,
                           float scale, bool causal) {
    attention_16bit<__half>(Q, K, V, O, L, batch, heads, T, D, scale, causal);
}

void cublas_attention_backward_bf16(const std::uint16_t* Q, const std::uint16_t* K,
                                    const std::uint16_t* V, const std::uint16_t* O,
                                    const std::uint16_t* dO, const float* L, float* dQ, float* dK,
                                    float* dV, int batch, int heads, int T, int D, float scale,
                                    bool causal) {
    attention_backward_16bit<__nv_bfloat16>(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D,
                                            scale, causal);
}

void cublas_attention_backward_fp16(const std::uint16_t* Q, const std::uint16_t* K,
                                    const std::uint16_t* V, const std::uint16_t* O,
                                    const std::uint16_t* dO, const float* L, float* dQ, float* dK,
                                    float* dV, int batch, int heads, int T, int D, float scale,
                                    bool causal) {
    attention_backward_16bit<__half>(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale,
                                     causal);
}

void cublas_attention_f32(const float* Q, const float* K, const float* V, float* O, int batch,
                          int heads, int T, int D, float scale, bool causal) {
    // Plain FP32 throughout (the handle's math mode is cuBLAS's default: no TF32).
    const Dims dims = dims_of(batch, heads, T, D);
    auto* S = static_cast<float*>(scores_f32.get(dims.scores() * sizeof(float)));
    auto* P = static_cast<float*>(probs_f32.get(dims.scores() * sizeof(float)));
    gemm_abt(Q, CUDA_R_32F, K, S, CUDA_R_32F, dims, 1.0f);
    softmax_kernel<<<dims.heads_total * T, kThreads>>>(S, P, static_cast<float*>(nullptr), T, scale,
                                                       causal);
    CUDA_CHECK_LAUNCH();
    gemm_px(P, V, CUDA_R_32F, O, CUDA_R_32F, dims, 1.0f, false);
}

}  // namespace course::baseline::library
