// 09_quantization/mxfp8: OCP Microscaling FP8 (MXFP8: E4M3 elements, blocks of 32 sharing an
// E8M0 scale), quantized and dequantized bit for bit as the specification writes it.
//
// Teaches: a floating-point format taken apart by hand, with integer operations on the bits of a
// float32: the block's shared exponent from its absmax's exponent field, E4M3's rounding (half to
// even on the dropped mantissa bits), its subnormals and its saturation at 448, and the decoding
// by a shift and one product. Memory-bound: the checker reports your bandwidth next to a copy, and
// the format's error in steps.
//
// Run:  grader run 09/mxfp8                  Stuck:  grader hint 09/mxfp8
// Contract: mxfp8.h                          Notes:  notes/09_quantization.md
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "mxfp8.h"

__global__ void mxfp8_quantize_kernel(const float4* x, std::size_t quads, std::uint32_t* elements,
                                      std::uint8_t* scales) {
    // TODO: thread i takes floats 4 i .. 4 i + 3 (a grid-stride loop in 64 bits that runs whole
    //       warps: the shuffles need every lane); 8 lanes hold a block of 32.
    // TODO: the block's absmax (__shfl_xor_sync, offsets 1, 2, 4); E8M0 byte = max(exponent field
    //       of absmax - 8, 0), written by the block's first lane to scales[i / 8].
    // TODO: each value times 2^-s (exact), to E4M3 by hand (saturate past 448, subnormals below
    //       2^-6, else round the mantissa to 3 bits half to even), the 4 codes in one word.
}

__global__ void mxfp8_dequantize_kernel(const std::uint32_t* elements, const std::uint8_t* scales,
                                        std::size_t quads, float4* out) {
    // TODO: each code: its bits under float32's exponent, times 2^120, times X = 2^(scale - 127)
    //       (0 is 2^-127; 255 and the E4M3 codes 0x7F, 0xFF are NaN).
}

void mxfp8_quantize(const float* x, int rows, int cols, std::uint8_t* elements,
                    std::uint8_t* scales) {
    // TODO: quads = std::size_t(rows) * cols / 4; launch on the float4 and uint32 views, then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("mxfp8: write mxfp8_quantize_kernel and launch it, then delete this line");
}

void mxfp8_dequantize(const std::uint8_t* elements, const std::uint8_t* scales, int rows, int cols,
                      float* out) {
    // TODO: launch mxfp8_dequantize_kernel likewise, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("mxfp8: write mxfp8_dequantize_kernel and launch it, then delete this line");
}
