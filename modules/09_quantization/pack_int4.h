// Contract of 09_quantization/pack_int4. Read-only: the checker calls exactly this.
#pragma once

#include <cstdint>

#include "quant_formats.h"

// INT4 of quant_formats.h, in groups of kInt4Group (128) consecutive values of each row of a
// row-major float32 matrix x (rows x cols):
//   pack_int4:   scales[r * (cols / 128) + g] = absmax(x[r][128 g .. 128 g + 127]) / 7,
//                q = clamp(round_half_even(x / scale), -7, 7) (a float32 division; q = 0 where the
//                scale is 0), two per byte: packed[(r * cols + c) / 2] holds column c in bits 0-3
//                when c is even, in bits 4-7 when c is odd, as a two's complement nibble;
//   unpack_int4: out[r * cols + c] = q(r, c) * scales[r * (cols / 128) + c / 128] (one float32
//                product), the nibble's sign extended.
// The checker compares every byte, scale and out bit for bit with its CPU reference.
// x and out (rows x cols floats), packed (rows x cols / 2 bytes) and scales (rows x cols / 128
// floats) are device pointers, none aliasing another, each starting on a 16-byte boundary; x is
// finite. rows >= 1; cols is a multiple of 128, 128 <= cols <= 2^20; rows * cols may exceed 2^31:
// compute offsets in 64 bits.
// Enqueue the work on the default stream and return; the checker synchronizes.
void pack_int4(const float* x, int rows, int cols, std::uint8_t* packed, float* scales);
void unpack_int4(const std::uint8_t* packed, const float* scales, int rows, int cols, float* out);
