// 09_quantization/quantize_int8: symmetric INT8 quantization with one scale per row (a weight
// matrix's output channel, an activation matrix's token), and the way back to float32.
//
// Teaches: what a quantization format is made of (a grid of integers, a scale, a rounding, a
// clamp); the absmax of a row as a block-wide max reduction; round half to even and why not
// truncation; the float32 division the format states, bit for bit; the clamp at -127 and 127 (a
// symmetric grid: -x gives -q). Memory-bound: the checker reports your bandwidth next to a
// device-to-device copy, and the format's error in steps.
//
// Run:  grader run 09/quantize_int8          Stuck:  grader hint 09/quantize_int8
// Contract: quantize_int8.h                  Notes:  notes/09_quantization.md
#include <cstdint>

#include "course/exercise.h"
#include "quantize_int8.h"

__global__ void quantize_int8_kernel(const float* x, int cols, std::int8_t* q, float* scales) {
    // TODO: one block per row: row = blockIdx.x, starting at x + std::size_t(row) * cols (64-bit:
    //       rows * cols can pass 2^31).
    // TODO: pass 1: each thread's largest fabsf over columns t, t + blockDim.x, ...; then the
    //       block's maximum (warp shuffles with fmaxf, a __shared__ float per warp, a barrier).
    // TODO: scale = absmax / 127 (thread 0 writes scales[row]); pass 2: q = x / scale rounded half
    //       to even (rintf), clamped to [-127, 127]; q = 0 where the scale is 0.
    // TODO (fast): float4 loads and char4 stores when cols % 4 == 0 (every row 16-byte aligned).
}

__global__ void dequantize_int8_kernel(const std::int8_t* q, const float* scales, int cols,
                                       float* out) {
    // TODO: one block per row: out = static_cast<float>(q) * scales[row] for each column.
}

void quantize_int8(const float* x, int rows, int cols, std::int8_t* q, float* scales) {
    // TODO: launch quantize_int8_kernel, one block of 256 threads per row, then
    // CUDA_CHECK_LAUNCH().
    COURSE_TODO("quantize_int8: write quantize_int8_kernel and launch it, then delete this line");
}

void dequantize_int8(const std::int8_t* q, const float* scales, int rows, int cols, float* out) {
    // TODO: launch dequantize_int8_kernel, one block per row, then CUDA_CHECK_LAUNCH().
    COURSE_TODO(
        "dequantize_int8: write dequantize_int8_kernel and launch it, then delete this line");
}
