// 09_quantization/gemv_w4a16: y = W x at decode time, INT4 weights in pack_int4's format (a scale
// per group of 128 values of a row) and bf16 activations, the weights dequantized in registers.
//
// Teaches: what a quarter of bf16's bytes buys a memory-bound kernel; 32 nibbles from one 16-byte
// load, each to a float by the exponent trick in two instructions; the next loads in flight while
// the arithmetic runs; a scale per group, applied to the group's partial sums; gemv_w8a16's shared
// tile of x and rows per warp for a batch of tokens. The checker reports
// your bandwidth on the bytes that must move next to a copy, your time next to cuBLAS on bf16
// weights, and the format's accuracy.
//
// Run:  grader run 09/gemv_w4a16             Stuck:  grader hint 09/gemv_w4a16
// Contract: gemv_w4a16.h                     Notes:  notes/09_quantization.md
#include <cstdint>

#include "course/exercise.h"
#include "gemv_w4a16.h"

__global__ void gemv_w4a16_kernel(int M, int N, int K, const __nv_bfloat16* x,
                                  const std::uint8_t* W, const float* scales, float* y) {
    // TODO: gemv_w8a16's kernel (4 rows per warp, x's chunk of every token in a shared tile),
    //       with uint4s of 32 nibbles: uint4 c of row n (W + std::size_t(n) * K / 2) holds
    //       columns 32 c .. 32 c + 31, all in group c / 4; steps of 1024 columns, one uint4 per
    //       lane and row, the next step's loads issued before this step's arithmetic.
    // TODO: nibble i of a word is column 8 p + i of the load's word p; its value q is two's
    //       complement; one XOR with 0x88888888 makes every nibble q + 8, and the exponent trick,
    //       with the nibble left in place under 2^23's exponent bits, turns it into a float.
    // TODO: each partial sum (a row's 8 weights times a token's 8 values of x) times its group's
    //       scale, scales[n * (K / 128) + c / 4], loaded with the weights; the warp's sum per row
    //       and token; y[m * N + n].
}

void gemv_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* W,
                const float* scales, float* y) {
    // TODO: ceil_div(N, 16) blocks of 128 threads, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("gemv_w4a16: write gemv_w4a16_kernel and launch it, then delete this line");
}
