// The baselines of course/baselines.h, and the library's one entry point: the table of them that
// course/baselines.h looks up. Library handles and scratch space are created once and kept, so
// that warm-up pays for them and timed samples measure only the operation.
#include "library.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cub/device/device_histogram.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <stdexcept>
#include <string>

#include "course/baseline_table.h"
#include "course/check.h"
#include "scratch.h"

namespace course::baseline::library {

namespace {

void cublas_check(cublasStatus_t status, const char* expression) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(status) +
                                 " in `" + expression + "`");
}

cublasHandle_t cublas() {
    static cublasHandle_t handle = [] {
        cublasHandle_t h = nullptr;
        cublas_check(cublasCreate(&h), "cublasCreate");
        // Plain FP32 SGEMM, set explicitly rather than assumed: CUBLAS_DEFAULT_MATH allows neither
        // TF32 tensor cores (CUBLAS_TF32_TENSOR_OP_MATH) nor FP32 emulated on bf16 ones
        // (CUBLAS_FP32_EMULATED_BF16X9_MATH). It is what PyTorch runs for float32 matmul by
        // default, and what the course's SGEMMs compute.
        cublas_check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
        return h;
    }();
    return handle;
}

// CUB's temporary storage.
Scratch cub_scratch;

// Each row's indices 0 .. cols - 1 (the values CUB sorts along with the keys), and the rows'
// offsets, rows + 1 of them.
__global__ void row_indices_and_offsets(int* indices, int* offsets, int rows, int cols) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < static_cast<std::size_t>(rows) * cols) indices[i] = static_cast<int>(i % cols);
    if (i <= static_cast<std::size_t>(rows)) offsets[i] = static_cast<int>(i * cols);
}

// CUB's two-phase call: ask for the scratch size, then run.
template <class Call>
void run_cub(Call call) {
    std::size_t bytes = 0;
    CUDA_CHECK(call(nullptr, bytes));
    CUDA_CHECK(call(cub_scratch.get(bytes), bytes));
}

}  // namespace

void device_copy(void* dst, const void* src, std::size_t bytes) {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void cublas_sgemm(int M, int N, int K, const float* A, const float* B, float* C) {
    // cuBLAS is column-major: a row-major C = A * B is the column-major C^T = B^T * A^T.
    const float alpha = 1.0f, beta = 0.0f;
    cublas_check(
        cublasSgemm(cublas(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &alpha, B, N, A, K, &beta, C, N),
        "cublasSgemm");
}

namespace {

// C = A B^T with 16-bit inputs of `type` (bf16 or fp16) and float32 C. Row-major C = A B^T is
// column-major C^T = B A^T: B's rows (K contiguous) are the columns of a K x N column-major
// matrix, taken transposed; A's rows are the columns of a K x M one.
void cublas_gemm_16bit(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                       float* C, cudaDataType type) {
    const float alpha = 1.0f, beta = 0.0f;
    cublas_check(
        cublasGemmEx(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, B, type, K, A, type, K,
                     &beta, C, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace

void cublas_gemm_bf16(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                      float* C) {
    cublas_gemm_16bit(M, N, K, A, B, C, CUDA_R_16BF);
}

void cublas_gemm_fp16(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                      float* C) {
    cublas_gemm_16bit(M, N, K, A, B, C, CUDA_R_16F);
}

void cub_reduce_sum(const float* in, float* out, std::size_t n) {
    run_cub([&](void* temp, std::size_t& bytes) {
        return cub::DeviceReduce::Sum(temp, bytes, in, out, static_cast<std::int64_t>(n));
    });
}

void cub_inclusive_scan(const int* in, int* out, std::size_t n) {
    run_cub([&](void* temp, std::size_t& bytes) {
        return cub::DeviceScan::InclusiveSum(temp, bytes, in, out, static_cast<std::int64_t>(n));
    });
}

void cub_histogram_256(const std::uint8_t* data, std::size_t n, unsigned int* bins) {
    run_cub([&](void* temp, std::size_t& bytes) {
        return cub::DeviceHistogram::HistogramEven(temp, bytes, data, bins, 257, 0, 256,
                                                   static_cast<std::int64_t>(n));
    });
}

void cub_segmented_sort_descending(const float* keys, float* sorted_keys, int* sorted_indices,
                                   int rows, int cols) {
    // The indices and offsets depend only on the shape: made on the first call of a shape (a
    // warm-up call) and kept, so that timed calls measure the sort alone.
    static Scratch indices, offsets;
    static int made_rows = 0, made_cols = 0;
    if (rows != made_rows || cols != made_cols) {
        const std::size_t n = static_cast<std::size_t>(rows) * cols;
        const std::size_t threads = std::max(n, static_cast<std::size_t>(rows) + 1);
        row_indices_and_offsets<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(
            static_cast<int*>(indices.get(4 * n)), static_cast<int*>(offsets.get(4 * (rows + 1))),
            rows, cols);
        CUDA_CHECK(cudaGetLastError());
        made_rows = rows;
        made_cols = cols;
    }
    const int* row_offsets = static_cast<const int*>(offsets.data);
    run_cub([&](void* temp, std::size_t& bytes) {
        return cub::DeviceSegmentedRadixSort::SortPairsDescending(
            temp, bytes, keys, sorted_keys, static_cast<const int*>(indices.data), sorted_indices,
            rows * cols, rows, row_offsets, row_offsets + 1);
    });
}

}  // namespace course::baseline::library

// The entry point course/baselines.h looks up by name (kTableSymbol).
extern "C" const course::baseline::Table* course_baselines_table() {
    namespace library = course::baseline::library;
    static const course::baseline::Table table{library::device_copy,
                                               library::cublas_sgemm,
                                               library::cub_reduce_sum,
                                               library::cub_inclusive_scan,
                                               library::cub_histogram_256,
                                               library::cudnn_available,
                                               library::cudnn_softmax,
                                               library::cublas_gemm_bf16,
                                               library::cublas_attention_f32,
                                               library::cublas_attention_bf16,
                                               library::cublas_attention_backward_bf16,
                                               library::cudnn_attention_bf16,
                                               library::cudnn_attention_backward_bf16,
                                               library::nccl_available,
                                               library::nccl_all_reduce_sum,
                                               library::cub_segmented_sort_descending,
                                               library::cublas_gemm_fp16,
                                               library::cublas_attention_fp16,
                                               library::cublas_attention_backward_fp16,
                                               library::cudnn_attention_fp16,
                                               library::cudnn_attention_backward_fp16};
    return &table;
}
