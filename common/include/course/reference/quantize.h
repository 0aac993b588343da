// CPU references of module 09's number formats, bit for bit: symmetric INT8 per row, INT4 in
// groups along a row (two values per byte), the tiled INT4 layout of gemm_w4a16, and OCP MXFP8
// (E4M3 elements in blocks of 32 sharing an E8M0 scale). Each follows the rule its exercise's
// contract states, with the same float32 operations (a division, a product: IEEE single
// precision rounds them the same on the host and the device), so that a correct kernel matches
// these exactly. common/tests/reference_quantize_test.cpp checks them against hand-worked values
// and against the PTX ISA's fragment tables (course/gemm_layout.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace course::reference {

// ---- INT8, symmetric, one scale per row ---------------------------------------------------------
// scale = absmax / 127 (float division), q = clamp(round_half_even(x / scale), -127, 127); a row
// of zeros has scale 0 and q 0. -128 is never produced: the grid is symmetric, so quantizing -x
// gives -q, and absmax lands exactly on +-127.
struct Int8Rows {
    std::vector<std::int8_t> q;  // rows x cols
    std::vector<float> scales;   // rows
};
float int8_scale(float absmax);
std::int8_t quantize_int8(float x, float scale);
Int8Rows quantize_int8_rows(const std::vector<float>& x, std::size_t rows, std::size_t cols);
// x^ = q * scale (one float product, exact here: 8 significant bits times a float).
std::vector<float> dequantize_int8_rows(const std::vector<std::int8_t>& q,
                                        const std::vector<float>& scales, std::size_t rows,
                                        std::size_t cols);

// ---- INT4, symmetric, one scale per group of `group` values along a row ----------------------
// scale = absmax of the group / 7, q = clamp(round_half_even(x / scale), -7, 7), as INT8's. Two
// values per byte, two's complement nibbles: byte j of a row holds column 2j in its low nibble
// and column 2j + 1 in its high nibble. cols is a multiple of `group`, and `group` even.
struct Int4Groups {
    std::vector<std::uint8_t> packed;  // rows x cols / 2
    std::vector<float> scales;         // rows x cols / group
};
float int4_scale(float absmax);
int quantize_int4(float x, float scale);
// The signed value of nibble `high` (0: bits 0-3, 1: bits 4-7) of `byte`.
int int4_nibble(std::uint8_t byte, int high);
Int4Groups quantize_int4_groups(const std::vector<float>& x, std::size_t rows, std::size_t cols,
                                std::size_t group);
std::vector<float> dequantize_int4_groups(const std::vector<std::uint8_t>& packed,
                                          const std::vector<float>& scales, std::size_t rows,
                                          std::size_t cols, std::size_t group);

// ---- The tiled INT4 layout of gemm_w4a16 (a weight matrix W, N x K, N % 8 == 0, K % 128 == 0) --
// Per n8 tile (8 rows) and group of 128 k, 512 bytes: 32 lanes of 16 bytes, lane l holding the 32
// values that lane l of a warp gives mma.sync.m16n8k16 as its B fragment in the group's 8 k16
// steps: in its 4 words (little-endian), nibble p of word w is step 2 w + (p % 4) / 2, register
// p % 2, half p / 4 (so a register's two halves are nibbles p and p + 4, 16 bits apart). The
// nibble index of W[n][k] in that layout:
std::size_t int4_tiled_index(std::size_t n, std::size_t k, std::size_t K);
// The same bytes as pack_int4 writes them (row-major, `packed`: N x K / 2), moved to that layout.
std::vector<std::uint8_t> int4_tiled(const std::vector<std::uint8_t>& packed, std::size_t N,
                                     std::size_t K);

// ---- OCP MXFP8: E4M3 elements, blocks of 32 along a row, one E8M0 scale per block ------------
// E4M3 (OCP FP8, "E4M3FN"): sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinity, NaN is
// S.1111.111; largest finite 448 = 1.75 * 2^8, smallest normal 2^-6, subnormals m * 2^-9.
// E8M0: a power of two 2^(e - 127) for e = 0..254; 255 is NaN.
constexpr int kMxBlock = 32;
constexpr int kE4m3MaxExponent = 8;  // emax of the elements: 448 lies in [2^8, 2^9)
// Nearest E4M3 to a finite float, ties to even, saturating to +-448; the sign kept (-0 is 0x80).
std::uint8_t e4m3_encode(float value);
float e4m3_decode(std::uint8_t code);  // NaN for 0x7F and 0xFF
// The distance between E4M3 neighbours around |value| (a float inside the element range): the
// "step" the error of a rounding is measured in.
double e4m3_step(double magnitude);
// The block's shared exponent, the spec's floor(log2(absmax)) - emax of the elements, held at
// the E8M0 minimum -127 (a block of zeros, or values below 2^-119); absmax is finite.
int mx_shared_exponent(float absmax);
float e8m0_decode(std::uint8_t biased);  // 2^(biased - 127); NaN for 255
struct MxBlocks {
    std::vector<std::uint8_t> elements;  // rows x cols, E4M3 codes
    std::vector<std::uint8_t> scales;    // rows x cols / 32, E8M0 (biased exponents)
};
// Each block: X = 2^shared_exponent, every element e4m3_encode(x / X) (x / X is exact: a power of
// two). cols is a multiple of 32; every x finite.
MxBlocks quantize_mxfp8(const std::vector<float>& x, std::size_t rows, std::size_t cols);
// x^ = e4m3_decode(P) * X, one float product.
std::vector<float> dequantize_mxfp8(const std::vector<std::uint8_t>& elements,
                                    const std::vector<std::uint8_t>& scales, std::size_t rows,
                                    std::size_t cols);

}  // namespace course::reference
