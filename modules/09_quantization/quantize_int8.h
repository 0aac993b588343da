// Contract of 09_quantization/quantize_int8. Read-only: the checker calls exactly this.
#pragma once

#include <cstdint>

#include "quant_formats.h"

// INT8 of quant_formats.h, one scale per row of a row-major float32 matrix x (rows x cols): the
// rows of a weight matrix are its output channels, the rows of an activation matrix its tokens.
//   quantize_int8:   scales[r] = absmax(x[r][*]) / 127,
//                    q[r * cols + c] = clamp(round_half_even(x[r][c] / scales[r]), -127, 127)
//                    with the float32 division the format states (not a product with 127 / absmax,
//                    which rounds differently), and q = 0 where scales[r] is 0;
//   dequantize_int8: out[r * cols + c] = q[r * cols + c] * scales[r]   (one float32 product).
// The checker compares every q, scale and out bit for bit with its CPU reference.
// x and out (rows x cols floats), q (rows x cols int8) and scales (rows floats) are device
// pointers, none aliasing another, each starting on a 16-byte boundary; x is finite. rows >= 1 and
// 1 <= cols <= 2^20, any values (not multiples of anything), so a row starts on a 16-byte boundary
// only when cols % 4 == 0; rows * cols may exceed 2^31: compute offsets in 64 bits.
// Enqueue the work on the default stream and return; the checker synchronizes.
void quantize_int8(const float* x, int rows, int cols, std::int8_t* q, float* scales);
void dequantize_int8(const std::int8_t* q, const float* scales, int rows, int cols, float* out);
