// What each exercise is measured against, timed in the same process. Only checkers include this
// header: it lives in a shared library that links cuBLAS/CUB privately, so a learner's stub can
// neither link those libraries nor (the grader refuses it) include this header.
#pragma once

#include <cstddef>
#include <cstdint>

namespace course::baseline {

// cudaMemcpy device to device: the memory-bound ceiling (counts `bytes` read + `bytes` written).
void device_copy(void* dst, const void* src, std::size_t bytes);

// C = A * B, row-major float32: A is M x K, B is K x N, C is M x N. cuBLAS in plain FP32: its
// math mode is set to CUBLAS_DEFAULT_MATH (no TF32, no emulation).
void cublas_sgemm(int M, int N, int K, const float* A, const float* B, float* C);

// C = A * B^T with bf16 A and B and float32 C, accumulated in float32 on the tensor cores: A is
// M x K and B is N x K, both row-major (K contiguous: the layout cuBLAS calls "TN"), C is M x N
// row-major. cublasGemmEx with CUBLAS_COMPUTE_32F (the course's tensor-core GEMMs, module 05,
// compute the same). `A` and `B` point at bf16 elements (__nv_bfloat16), passed as their bits.
void cublas_gemm_bf16(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B, float* C);

// *out = sum of in[0..n), CUB DeviceReduce::Sum.
void cub_reduce_sum(const float* in, float* out, std::size_t n);

// out[i] = in[0] + ... + in[i], CUB DeviceScan::InclusiveSum.
void cub_inclusive_scan(const int* in, int* out, std::size_t n);

// bins[v] = count of bytes equal to v, 256 bins, CUB DeviceHistogram::HistogramEven.
void cub_histogram_256(const std::uint8_t* data, std::size_t n, unsigned int* bins);

// Whether the cuDNN baselines can run here: the course was built with cuDNN and a cuDNN handle
// could be created. Checkers skip their cuDNN cases (with this reason) when it is false.
bool cudnn_available();

// out = softmax of each row of a rows x cols row-major float matrix (max subtracted first):
// cuDNN's cudnnSoftmaxForward, CUDNN_SOFTMAX_ACCURATE over each row. Throws when
// !cudnn_available().
void cudnn_softmax(const float* in, float* out, int rows, int cols);

}  // namespace course::baseline
