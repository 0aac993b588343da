// 07_attention/flash_backward: the backward pass of flash attention (FlashAttention-2's
// algorithm), bf16 on the tensor cores (fp16 on a T4: m16n8k8, no cp.async).
//
// Teaches: recomputing P from the saved logsumexp L instead of storing it, the loop order of the
// backward (a block owns a tile of keys and walks over the query tiles, so dK and dV stay in
// registers), the five products of a tile on mma.sync, and accumulating dQ across key tiles
// with float32 atomics.
//
// Run:  grader run 07/flash_backward       Stuck:  grader hint 07/flash_backward
// Contract: flash_backward.h               Notes:  notes/07_attention.md
#include <cmath>
#include <cstdint>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "flash_backward.h"
#include "tensor_core.h"

using tc::Element;  // bf16, or fp16 in a build for sm_75 (tensor_core.h)

// D_i = dO_i . O_i, one warp per row.
__global__ void row_dot_kernel(const Element* O, const Element* dO, float* delta, long long rows,
                               int D) {
    // TODO: warp w of the grid owns row w; a strided dot product (tc::to_float) and a shuffle
    //       sum.
}

template <int kD>
__global__ void flash_backward_kernel(const Element* Q, const Element* K, const Element* V,
                                      const Element* dO, const float* L, const float* delta,
                                      float* dQ, float* dK, float* dV, int T, float scale,
                                      bool causal) {
    // TODO: this block's 64 keys: K and V tiles in shared memory; Q and dO tiles of 32 queries,
    //       double-buffered with cp.async; dK and dV accumulators in registers. On a T4
    //       (tc::kAsyncCopies is false): one Q and one dO buffer, the next tile's chunks loaded
    //       into registers before the compute and stored after its closing __syncthreads().
    // TODO: lanes' ldmatrix addresses: course::ldmatrix_a_source(lane) for an A (plain) or a
    //       k-major B (.trans), course::ldmatrix_b_source(lane) for an n-major B (plain) or the
    //       transposed dS^T tile read as A (.trans).
    // TODO: per query tile: P^T = exp2(S^T * scale * log2e - L * log2e), dP^T = V dO^T,
    //       dS^T = P^T (dP^T - D); dV += P^T dO; dK += dS^T Q.
    // TODO: dS^T to shared memory, __syncthreads(), dQ = dS K for a quarter of D per warp,
    //       atomicAdd(scale * dQ) into global memory; __syncthreads().
    // TODO: write scale * dK and dV for the keys < T.
}

void flash_backward(const course::TensorElement* Q, const course::TensorElement* K,
                    const course::TensorElement* V, const course::TensorElement* O,
                    const course::TensorElement* dO, const float* L, float* dQ, float* dK,
                    float* dV, int batch, int heads, int T, int D, float scale, bool causal) {
    // TODO: scratch for D (cudaMallocAsync), row_dot_kernel, cudaMemsetAsync(dQ, 0, ...), the
    //       main kernel (grid: key tiles x batch * heads, opted-in shared memory), cudaFreeAsync.
    COURSE_TODO("flash_backward: write the kernels and launch them, then delete this line");
}
