// The number formats of 09_quantization, in one place: every contract of the module includes this
// file, and the checkers' CPU references (common/include/course/reference/quantize.h) follow it bit
// for bit. Read-only. notes/09_quantization.md, section 1, draws them.
//
// INT8, symmetric, one float32 scale per row (a weight row is an output channel, an activation
// row a token):
//     scale = absmax(row) / 127                   (a float32 division)
//     q     = clamp(round_half_even(x / scale), -127, 127)   (a float32 division, then rint)
//     x^    = q * scale                           (one float32 product)
// A row whose scale is 0 (all zeros, or an absmax so small that absmax / 127 underflows) has
// q = 0. -128 is never produced: the grid is symmetric (quantizing -x gives -q), and absmax lands
// on +-127 exactly.
//
// INT4, symmetric, one float32 scale per group of kInt4Group consecutive values of a row:
//     scale = absmax(group) / 7, q = clamp(round_half_even(x / scale), -7, 7), x^ = q * scale
// Two values per byte, as two's complement nibbles: byte j of a row holds column 2j in bits 0-3
// and column 2j + 1 in bits 4-7. Nibbles 8 .. 15 are -8 .. -1 (-8 is never produced, as above).
//
// MXFP8 (OCP Microscaling Formats v1.0, MXFP8 with E4M3 elements): blocks of kMxBlock consecutive
// values of a row share one scale X = 2^s, stored as E8M0 (the byte s + 127; 255 would be NaN):
//     s  = max(floor(log2(absmax(block))) - 8, -127)   (8: the largest exponent of E4M3; a block
//                                                       of zeros gets -127)
//     P  = E4M3 nearest to x / X, ties to even, past +-448 saturated to +-448, sign kept (-0 is
//          0x80); x / X is exact (X is a power of two)
//     x^ = decode(P) * X                          (one float32 product)
// E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits: exponent field e > 0 is
// (1 + m / 8) * 2^(e - 7), e = 0 is (m / 8) * 2^-6; no infinity; S.1111.111 is NaN. Its largest
// value is 448 (0x7E), so x / X, which lies in [256, 512) for the block's largest value, can clip:
// the spec's choice, which the checker measures.
#pragma once

constexpr int kInt8Max = 127;    // INT8: q in [-127, 127]
constexpr int kInt4Max = 7;      // INT4: q in [-7, 7]
constexpr int kInt4Group = 128;  // INT4: values per scale, along a row
constexpr int kMxBlock = 32;     // MXFP8: values per E8M0 scale, along a row
