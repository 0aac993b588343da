// What each exercise is measured against, timed in the same process. Only checkers include this
// header (the grader refuses a learner file whose compilation includes it).
//
// The baselines live in a shared library (common/baselines/, linking cuBLAS, CUB and cuDNN) that
// the checker's executable does NOT link: the first call of a baseline loads it (dlopen, its
// symbols kept local) from the path CMake compiled into the checker (COURSE_BASELINES_LIBRARY),
// and calls it through its table of functions (course/baseline_table.h). The functions below have
// internal linkage (an unnamed namespace): each checker has its own copy, which no other file of
// the program can name. So the learner's code, linked into the same executable, can neither
// call a baseline (a hand-declared course::baseline::cublas_sgemm does not link) nor cuBLAS or
// cuDNN (not linked either); CUB, header-only, is refused by the grader from the compiler's list
// of included files.
#pragma once

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/baseline_table.h"

#ifndef COURSE_BASELINES_LIBRARY
#define COURSE_BASELINES_LIBRARY ""  // a build without the library: the CPU emulator (dev/emu)
#endif

namespace course::baseline {
namespace {

// The library's table, loaded once; nullptr, with the reason in `why`, where it cannot be.
inline const Table* load_table(std::string& why) {
    const char* path = COURSE_BASELINES_LIBRARY;
    if (*path == '\0') {
        why = "this build has no baselines library (the CPU emulator runs none)";
        return nullptr;
    }
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
        why = std::string("cannot load ") + path + ": " + dlerror();
        return nullptr;
    }
    using Entry = const Table* (*)();
    const auto entry = reinterpret_cast<Entry>(dlsym(library, kTableSymbol));
    if (!entry) {
        why = std::string(path) + " has no " + kTableSymbol;
        return nullptr;
    }
    return entry();
}

struct Loaded {
    std::string why;
    const Table* table;
    Loaded() : table(load_table(why)) {}
};

inline const Loaded& loaded() {
    static const Loaded instance;
    return instance;
}

inline const Table& table() {
    if (!loaded().table) throw std::runtime_error("no baseline: " + loaded().why);
    return *loaded().table;
}

// cudaMemcpy device to device: the memory-bound ceiling (counts `bytes` read + `bytes` written).
inline void device_copy(void* dst, const void* src, std::size_t bytes) {
    table().device_copy(dst, src, bytes);
}

// C = A * B, row-major float32: A is M x K, B is K x N, C is M x N. cuBLAS in plain FP32: its
// math mode is set to CUBLAS_DEFAULT_MATH (no TF32, no emulation).
inline void cublas_sgemm(int M, int N, int K, const float* A, const float* B, float* C) {
    table().cublas_sgemm(M, N, K, A, B, C);
}

// C = A * B^T with bf16 A and B and float32 C, accumulated in float32 on the tensor cores: A is
// M x K and B is N x K, both row-major (K contiguous: the layout cuBLAS calls "TN"), C is M x N
// row-major. cublasGemmEx with CUBLAS_COMPUTE_32F (the course's tensor-core GEMMs, module 05,
// compute the same). `A` and `B` point at bf16 elements (__nv_bfloat16), passed as their bits.
inline void cublas_gemm_bf16(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                             float* C) {
    table().cublas_gemm_bf16(M, N, K, A, B, C);
}

// The same with fp16 A and B (bits of __half): the baseline of module 05's tensor-core rungs in a
// build for sm_75 (course/tensor_element.h).
inline void cublas_gemm_fp16(int M, int N, int K, const std::uint16_t* A, const std::uint16_t* B,
                             float* C) {
    table().cublas_gemm_fp16(M, N, K, A, B, C);
}

// *out = sum of in[0..n), CUB DeviceReduce::Sum.
inline void cub_reduce_sum(const float* in, float* out, std::size_t n) {
    table().cub_reduce_sum(in, out, n);
}

// out[i] = in[0] + ... + in[i], CUB DeviceScan::InclusiveSum.
inline void cub_inclusive_scan(const int* in, int* out, std::size_t n) {
    table().cub_inclusive_scan(in, out, n);
}

// bins[v] = count of bytes equal to v, 256 bins, CUB DeviceHistogram::HistogramEven.
inline void cub_histogram_256(const std::uint8_t* data, std::size_t n, unsigned int* bins) {
    table().cub_histogram_256(data, n, bins);
}

// Whether the cuDNN baselines can run here: the course was built with cuDNN and a cuDNN handle
// could be created. Checkers skip their cuDNN cases (with this reason) when it is false.
inline bool cudnn_available() { return loaded().table && table().cudnn_available(); }

// out = softmax of each row of a rows x cols row-major float matrix (max subtracted first):
// cuDNN's cudnnSoftmaxForward, CUDNN_SOFTMAX_ACCURATE over each row. Throws when
// !cudnn_available().
inline void cudnn_softmax(const float* in, float* out, int rows, int cols) {
    table().cudnn_softmax(in, out, rows, cols);
}

// Attention materialized with cuBLAS (module 07), Q, K, V, O of shape [batch][heads][T][D],
// row-major: S = Q K^T by a strided-batched GEMM into a T x T buffer per head, a softmax kernel
// over each row (scale, causal mask), O = P V by a second GEMM. Plain FP32 throughout.
inline void cublas_attention_f32(const float* Q, const float* K, const float* V, float* O,
                                 int batch, int heads, int T, int D, float scale, bool causal) {
    table().cublas_attention_f32(Q, K, V, O, batch, heads, T, D, scale, causal);
}

// The same in bf16 (bits of __nv_bfloat16): S in float32, P in bf16, O in bf16, and L [batch]
// [heads][T] the logsumexp of each row of scale * S (float32).
inline void cublas_attention_bf16(const std::uint16_t* Q, const std::uint16_t* K,
                                  const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                  int heads, int T, int D, float scale, bool causal) {
    table().cublas_attention_bf16(Q, K, V, O, L, batch, heads, T, D, scale, causal);
}

// Its backward: S recomputed, P from L, dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO O)),
// dQ = scale dS K, dK = scale dS^T Q; five GEMMs, gradients in float32.
inline void cublas_attention_backward_bf16(const std::uint16_t* Q, const std::uint16_t* K,
                                           const std::uint16_t* V, const std::uint16_t* O,
                                           const std::uint16_t* dO, const float* L, float* dQ,
                                           float* dK, float* dV, int batch, int heads, int T, int D,
                                           float scale, bool causal) {
    table().cublas_attention_backward_bf16(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale,
                                           causal);
}

// cuDNN's fused flash attention (the kernels PyTorch's cuDNN backend runs), bf16 in and out, with
// the same contract as cublas_attention_bf16: O, and L the logsumexp of each row of scale * S.
// Throws, with the reason, where the course was built without cuDNN or cuDNN has no engine for
// the shape (a GPU before Ampere, a cuDNN older than 9.6): module 07's checkers then time against
// cuBLAS's attention instead.
inline void cudnn_attention_bf16(const std::uint16_t* Q, const std::uint16_t* K,
                                 const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                 int heads, int T, int D, float scale, bool causal) {
    table().cudnn_attention_bf16(Q, K, V, O, L, batch, heads, T, D, scale, causal, 0, 0);
}

// The same over token-major tensors, [batch][T][heads][D] (module 07's are [batch][heads][T][D]):
// the rows of Q, K and V are qkv_row_stride elements apart, those of O o_row_stride apart, so that
// a transformer's packed projections (q, k, v side by side in one row per token) are read and
// written where they lie (trainer/). L stays [batch][heads][T].
inline void cudnn_attention_token_major_bf16(const std::uint16_t* Q, const std::uint16_t* K,
                                             const std::uint16_t* V, std::uint16_t* O, float* L,
                                             int batch, int heads, int T, int D, float scale,
                                             bool causal, int qkv_row_stride, int o_row_stride) {
    table().cudnn_attention_bf16(Q, K, V, O, L, batch, heads, T, D, scale, causal, qkv_row_stride,
                                 o_row_stride);
}

// Its backward, as cublas_attention_backward_bf16's but with the gradients in bf16 (cuDNN writes
// them in the inputs' type; it sums dQ in float32 internally).
inline void cudnn_attention_backward_bf16(const std::uint16_t* Q, const std::uint16_t* K,
                                          const std::uint16_t* V, const std::uint16_t* O,
                                          const std::uint16_t* dO, const float* L,
                                          std::uint16_t* dQ, std::uint16_t* dK, std::uint16_t* dV,
                                          int batch, int heads, int T, int D, float scale,
                                          bool causal) {
    table().cudnn_attention_backward_bf16(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale,
                                          causal, 0, 0);
}

// Its backward over token-major tensors: dQ, dK, dV laid out as Q, K, V, and dO as O.
inline void cudnn_attention_backward_token_major_bf16(
    const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V, const std::uint16_t* O,
    const std::uint16_t* dO, const float* L, std::uint16_t* dQ, std::uint16_t* dK,
    std::uint16_t* dV, int batch, int heads, int T, int D, float scale, bool causal,
    int qkv_row_stride, int o_row_stride) {
    table().cudnn_attention_backward_bf16(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale,
                                          causal, qkv_row_stride, o_row_stride);
}

// The fp16 twins of the four above (bits of __half; P, O and cuDNN's gradients in fp16): module
// 07's baselines in a build for sm_75 (course/tensor_element.h).
inline void cublas_attention_fp16(const std::uint16_t* Q, const std::uint16_t* K,
                                  const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                  int heads, int T, int D, float scale, bool causal) {
    table().cublas_attention_fp16(Q, K, V, O, L, batch, heads, T, D, scale, causal);
}
inline void cublas_attention_backward_fp16(const std::uint16_t* Q, const std::uint16_t* K,
                                           const std::uint16_t* V, const std::uint16_t* O,
                                           const std::uint16_t* dO, const float* L, float* dQ,
                                           float* dK, float* dV, int batch, int heads, int T, int D,
                                           float scale, bool causal) {
    table().cublas_attention_backward_fp16(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale,
                                           causal);
}
inline void cudnn_attention_fp16(const std::uint16_t* Q, const std::uint16_t* K,
                                 const std::uint16_t* V, std::uint16_t* O, float* L, int batch,
                                 int heads, int T, int D, float scale, bool causal) {
    table().cudnn_attention_fp16(Q, K, V, O, L, batch, heads, T, D, scale, causal, 0, 0);
}
inline void cudnn_attention_backward_fp16(const std::uint16_t* Q, const std::uint16_t* K,
                                          const std::uint16_t* V, const std::uint16_t* O,
                                          const std::uint16_t* dO, const float* L,
                                          std::uint16_t* dQ, std::uint16_t* dK, std::uint16_t* dV,
                                          int batch, int heads, int T, int D, float scale,
                                          bool causal) {
    table().cudnn_attention_backward_fp16(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale,
                                          causal, 0, 0);
}

// Whether the NCCL baselines can run here: the course was built with NCCL (COURSE_NCCL_ROOT,
// common/CMakeLists.txt). Checkers skip their NCCL cases (with this reason) when it is false.
inline bool nccl_available() { return loaded().table && table().nccl_available(); }

// Every buffers[g] (on GPU g, g = 0 .. gpus-1, `count` elements) replaced by the elementwise sum
// of all of them: ncclAllReduce with ncclSum, in place, one communicator per GPU of one process
// (ncclCommInitAll, made on the first call for `gpus` and kept). Enqueued on each GPU's default
// stream, like the exercise it is timed against; leaves the current device as it was. Throws
// when !nccl_available().
inline void nccl_all_reduce_sum(void* const* buffers, int gpus, std::size_t count,
                                Element element) {
    table().nccl_all_reduce_sum(buffers, gpus, count, element);
}

// Each row of a rows x cols row-major float matrix sorted, largest first, with the indices of
// its elements in the row: CUB's DeviceSegmentedRadixSort::SortPairsDescending (stable: equal
// keys keep their order, the smaller index first). The first k of a row are its top k (module
// 10's topk is timed against it).
inline void cub_segmented_sort_descending(const float* keys, float* sorted_keys,
                                          int* sorted_indices, int rows, int cols) {
    table().cub_segmented_sort_descending(keys, sorted_keys, sorted_indices, rows, cols);
}

}  // namespace
}  // namespace course::baseline
