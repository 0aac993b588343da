// 09_quantization/gemv_w8a16: y = W x at decode time, INT8 weights (a scale per output row) and
// bf16 activations, the weights dequantized in registers.
//
// Teaches: the roofline of a decode GEMV (one token: 2 FLOP per weight, so the weights' bytes set
// the time, and INT8 halves bf16's); a warp per output row, 16-byte loads, several in flight; an
// int8 turned into a float without a conversion instruction (the exponent trick); the row's scale
// applied once, after the sum. The checker reports your bandwidth on the bytes that must move next
// to a copy, your time next to cuBLAS on bf16 weights, and the format's accuracy.
//
// Run:  grader run 09/gemv_w8a16             Stuck:  grader hint 09/gemv_w8a16
// Contract: gemv_w8a16.h                     Notes:  notes/09_quantization.md
#include <cstdint>

#include "course/exercise.h"
#include "gemv_w8a16.h"

__global__ void gemv_w8a16_kernel(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                                  const float* scales, float* y) {
    // TODO: a warp per output row n (8 per block of 256); lane l reads the uint4s (16 weights)
    //       l, l + 32, ... of row n (W + std::size_t(n) * K), several of them before using any.
    // TODO: each weight to a float (the exponent trick: notes, section 4), times the 16 bf16 of
    //       x at the same k (two uint4s) for every token m < M (x + m * K), summed in float32.
    // TODO: the warp's sum per token (__shfl_xor_sync), times scales[n]; y[m * N + n].
}

void gemv_w8a16(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                const float* scales, float* y) {
    // TODO: ceil_div(N, 8) blocks of 256 threads, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("gemv_w8a16: write gemv_w8a16_kernel and launch it, then delete this line");
}
