// 07_attention/flash_tc: flash attention on the tensor cores, bf16 in (fp16 on a T4), float32
// accumulation.
//
// Teaches: the flash_forward algorithm with its two matrix products on mma.sync m16n8k16 (S = Q K^T
// and O += P V), operands fed by ldmatrix from an XOR-swizzled shared layout, K/V tiles loaded by
// cp.async one tile ahead (double buffering), and the online softmax done in registers on the
// accumulator fragments with exp2f and the scale folded into one multiply-add. On a T4 (a build
// for sm_75: fp16, m16n8k8, no cp.async) the next K/V tile waits in registers instead.
//
// Run:  grader run 07/flash_tc             Stuck:  grader hint 07/flash_tc
// Contract: flash_tc.h                     Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "flash_tc.h"
#include "tensor_core.h"

namespace {

using tc::Element;  // bf16, or fp16 in a build for sm_75 (tensor_core.h)

template <int kD>
__global__ void flash_tc_kernel(const Element* Q, const Element* K, const Element* V, Element* O,
                                float* L, int T, float scale, bool causal) {
    // TODO: shared memory: the query tile and two buffers each for K and V, swizzled
    //       (tc::swizzled). Issue cp.async copies of Q and the first K/V tile (tc::cp_async_16,
    //       zero-filled past T), commit.
    // TODO: loop over K/V tiles: issue the next tile into the other buffer, commit,
    //       tc::cp_async_wait<1>() (or <0> on the last), __syncthreads(); on the first tile load
    //       this warp's Q fragments with tc::ldmatrix_x4.
    // TODO (a T4: tc::kAsyncCopies is false, sm_75 has no cp.async): one buffer each for K and
    //       V; copy Q and the first tile through registers (uint4 loads, then stores to the
    //       swizzled tiles). In the loop, load the next tile's chunks into registers before
    //       __syncthreads() and the compute; after the compute's closing __syncthreads(), store
    //       them into the buffers (the loop's next __syncthreads() makes them visible).
    // TODO: lanes' ldmatrix addresses: course::ldmatrix_a_source(lane) for Q (plain) and V
    //       (.trans), course::ldmatrix_b_source(lane) for K (plain).
    // TODO: S = Q K^T with tc::mma (K fragments: plain ldmatrix), mask, online softmax on
    //       the accumulators (exp2f, scale folded in), rescale o, O += P V (P from the S
    //       accumulators packed with tc::pack; V fragments: ldmatrix .trans);
    //       __syncthreads() before the next iteration overwrites the buffer.
    // TODO: add the 4 lanes' row sums, write O (pairs packed with tc::pack) and
    //       L = scale * m + logf(l) for rows < T.
}

}  // namespace

void flash_tc(const course::TensorElement* Q, const course::TensorElement* K,
              const course::TensorElement* V, course::TensorElement* O, float* L, int batch,
              int heads, int T, int D, float scale, bool causal) {
    // TODO: instantiate for D = 64 and 128, opt in to the dynamic shared memory, grid (query
    //       tiles, batch * heads), CUDA_CHECK_LAUNCH().
    COURSE_TODO("flash_tc: write the kernel and launch it, then delete this line");
}
