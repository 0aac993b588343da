// 09_quantization/gemv_w8a16: y = W x at decode time, INT8 weights (a scale per output row) and
// bf16 activations, the weights dequantized in registers.
//
// Teaches: the roofline of a decode GEMV (one token: 2 FLOP per weight, so the weights' bytes set
// the time, and INT8 halves bf16's); 16-byte loads, several in flight; an int8 turned into a
// float without a conversion instruction (the exponent trick); the row's scale applied once, after
// the sum; for a batch of tokens, x staged in shared memory once per block and each value of it
// used for several rows of W from registers. The checker reports your bandwidth on the bytes that
// must move next to a copy, your time next to cuBLAS on bf16 weights, and the format's accuracy.
//
// Run:  grader run 09/gemv_w8a16             Stuck:  grader hint 09/gemv_w8a16
// Contract: gemv_w8a16.h                     Notes:  notes/09_quantization.md
#include <cstdint>

#include "course/exercise.h"
#include "gemv_w8a16.h"

__global__ void gemv_w8a16_kernel(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                                  const float* scales, float* y) {
    // TODO: 4 rows per warp (16 per block of 128 threads); walk K in chunks (2048 columns, 1024
    //       at 16 tokens: x's tile stays at 32 KB). Per chunk, first lane l's loads of W: the
    //       uint4s (16 weights) l, l + 32, ... of the chunk in each of its rows
    //       (W + std::size_t(n) * K), all issued before any is used; rows n >= N load nothing.
    // TODO: then x's chunk of every token m < M (x + m * K) into a __shared__ tile, by the whole
    //       block, __syncthreads(); each warp reads the 16 bf16 of x under a load (two uint4s)
    //       once per token and uses them for its 4 rows; __syncthreads() before the next chunk.
    // TODO: each weight to a float (the exponent trick: notes, section 4), dequantized once for
    //       every token; a float32 sum per row and token; then the warp's sum per row and token
    //       (__shfl_xor_sync), times scales[n]; y[m * N + n].
}

void gemv_w8a16(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                const float* scales, float* y) {
    // TODO: ceil_div(N, 16) blocks of 128 threads, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("gemv_w8a16: write gemv_w8a16_kernel and launch it, then delete this line");
}
