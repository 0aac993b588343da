// Contract of 09_quantization/mxfp8. Read-only: the checker calls exactly this.
#pragma once

#include <cstdint>

#include "quant_formats.h"

// MXFP8 of quant_formats.h (OCP Microscaling, E4M3 elements, blocks of kMxBlock = 32 consecutive
// values of a row, one E8M0 scale per block), for a row-major float32 matrix x (rows x cols):
//   mxfp8_quantize:   scales[r * (cols / 32) + b] = s + 127 with s = max(floor(log2(absmax of
//                     block b of row r)) - 8, -127); elements[r * cols + c] = the E4M3 code nearest
//                     to x[r][c] / 2^s, ties to even, saturated at +-448 (0x7E, 0xFE), its sign
//                     bit that of x (-0 is 0x80);
//   mxfp8_dequantize: out[r * cols + c] = decode(elements[r * cols + c]) * 2^(scales[...] - 127),
//                     one float32 product; E8M0 255 and E4M3 S.1111.111 decode to NaN.
// The checker compares every code, scale and out bit for bit with its CPU reference, written from
// the specification (common/include/course/reference/quantize.h).
// x and out (rows x cols floats), elements (rows x cols bytes) and scales (rows x cols / 32 bytes)
// are device pointers, none aliasing another, each starting on a 16-byte boundary; x is finite
// (no NaN, no infinity). rows >= 1; cols a multiple of 32, 32 <= cols <= 2^20; rows * cols may
// exceed 2^31: compute offsets in 64 bits.
// Enqueue the work on the default stream and return; the checker synchronizes.
void mxfp8_quantize(const float* x, int rows, int cols, std::uint8_t* elements,
                    std::uint8_t* scales);
void mxfp8_dequantize(const std::uint8_t* elements, const std::uint8_t* scales, int rows, int cols,
                      float* out);
