// The functions of the baselines library, which its table (course/baseline_table.h) points at.
// What each computes: course/baselines.h. Private to common/baselines/.
#pragma once

#include <cstddef>
#include <cstdint>

#include "course/baseline_table.h"

namespace course::baseline::library {

void device_copy(void* dst, const void* src, std::size_t bytes);
void cublas_sgemm(int M, int N, int K, const float* A, const float* B, float* C);
void cub_reduce_sum(const float* in, float* out, std::size_t n);
void cub_inclusive_scan(const int* in, int* out, std::size_t n);
void cub_histogram_256(const std::uint8_t* data, std::size_t n, unsigned int* bins);
bool cudnn_available();
void cudnn_softmax(const float* in, float* out, int rows, int cols);
void cublas_gemm_bf16(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                      float* C);
bool nccl_available();
void nccl_all_reduce_sum(void* const* buffers, int gpus, std::size_t count, Element element);

}  // namespace course::baseline::library
