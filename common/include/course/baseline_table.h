// The one entry point of the baselines library (common/baselines/): a table of functions, looked
// up by name at run time by course/baselines.h. Only that header and the library include this.
// A new baseline is a new member at the end, a function in the library, and a wrapper in
// course/baselines.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace course::baseline {

// The element type of a collective's buffers.
enum class Element { float32, int32 };

struct Table {
    void (*device_copy)(void* dst, const void* src, std::size_t bytes);
    void (*cublas_sgemm)(int M, int N, int K, const float* A, const float* B, float* C);
    void (*cub_reduce_sum)(const float* in, float* out, std::size_t n);
    void (*cub_inclusive_scan)(const int* in, int* out, std::size_t n);
    void (*cub_histogram_256)(const std::uint8_t* data, std::size_t n, unsigned int* bins);
    bool (*cudnn_available)();
    void (*cudnn_softmax)(const float* in, float* out, int rows, int cols);
    void (*cublas_gemm_bf16)(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                             float* C);
    void (*cublas_attention_f32)(const float* Q, const float* K, const float* V, float* O,
                                 int batch, int heads, int T, int D, float scale, bool causal);
    void (*cublas_attention_bf16)(const std::uint16_t* Q, const std::uint16_t* K,
                                  const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                  int heads, int T, int D, float scale, bool causal);
    void (*cublas_attention_backward_bf16)(const std::uint16_t* Q, const std::uint16_t* K,
                                           const std::uint16_t* V, const std::uint16_t* O,
                                           const std::uint16_t* dO, const float* L, float* dQ,
                                           float* dK, float* dV, int batch, int heads, int T, int D,
                                           float scale, bool causal);
    void (*cudnn_attention_bf16)(const std::uint16_t* Q, const std::uint16_t* K,
                                 const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                 int heads, int T, int D, float scale, bool causal,
                                 int qkv_row_stride, int o_row_stride);
    void (*cudnn_attention_backward_bf16)(const std::uint16_t* Q, const std::uint16_t* K,
                                          const std::uint16_t* V, const std::uint16_t* O,
                                          const std::uint16_t* dO, const float* L,
                                          std::uint16_t* dQ, std::uint16_t* dK, std::uint16_t* dV,
                                          int batch, int heads, int T, int D, float scale,
                                          bool causal, int qkv_row_stride, int o_row_stride);
    bool (*nccl_available)();
    void (*nccl_all_reduce_sum)(void* const* buffers, int gpus, std::size_t count, Element element);
    void (*cub_segmented_sort_descending)(const float* keys, float* sorted_keys,
                                          int* sorted_indices, int rows, int cols);
    // The fp16 twins of the bf16 entries (the tensor-core exercises in a build for sm_75).
    void (*cublas_gemm_fp16)(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                             float* C);
    void (*cublas_attention_fp16)(const std::uint16_t* Q, const std::uint16_t* K,
                                  const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                  int heads, int T, int D, float scale, bool causal);
    void (*cublas_attention_backward_fp16)(const std::uint16_t* Q, const std::uint16_t* K,
                                           const std::uint16_t* V, const std::uint16_t* O,
                                           const std::uint16_t* dO, const float* L, float* dQ,
                                           float* dK, float* dV, int batch, int heads, int T, int D,
                                           float scale, bool causal);
    void (*cudnn_attention_fp16)(const std::uint16_t* Q, const std::uint16_t* K,
                                 const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                 int heads, int T, int D, float scale, bool causal,
                                 int qkv_row_stride, int o_row_stride);
    void (*cudnn_attention_backward_fp16)(const std::uint16_t* Q, const std::uint16_t* K,
                                          const std::uint16_t* V, const std::uint16_t* O,
                                          const std::uint16_t* dO, const float* L,
                                          std::uint16_t* dQ, std::uint16_t* dK, std::uint16_t* dV,
                                          int batch, int heads, int T, int D, float scale,
                                          bool causal, int qkv_row_stride, int o_row_stride);
};

// The C name of the library's `const Table* course_baselines_table()`.
inline constexpr const char* kTableSymbol = "course_baselines_table";

}  // namespace course::baseline
