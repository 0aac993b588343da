// Contract of 09_quantization/gemm_w4a16. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "quant_formats.h"

// The W4A16 linear layer of gemv_w4a16 for a few tokens to a few dozen, on the tensor cores, with
// its weights in a layout made for them once, ahead of time (as Marlin's are).
//
// tile_int4_weights: W in pack_int4's format (N x K / 2 bytes, row-major, two's complement
// nibbles, the even column low) into the tiled layout: for each n8 tile j = n / 8 and group
// G = k / 128, 512 bytes at byte 512 * (j * (K / 128) + G); in them, lane l of a warp has the 16
// bytes at 16 l, read as four little-endian 32-bit words; nibble p (bits 4p .. 4p + 3) of word w
// holds W[8 j + l / 4][128 G + 16 s + 2 (l % 4) + h + 8 r] with s = 2 w + (p % 4) / 2, r = p % 2,
// h = p / 4. That is the B fragment lane l gives mma.sync.m16n8k16 (".col": n = l / 4, k =
// 2 (l % 4) + half, + 8 in register 1) in k16 step s of the group, register r, half h: one 16-byte
// load per lane per n8 tile and group holds the lane's fragments for the group's 8 steps, and the
// two halves of a register are nibbles p and p + 4 of one word, 16 bits apart, where one shift and
// one mask put them into the two halves of a bf16 pair. Nibbles are moved, not changed.
// notes/09_quantization.md, section 5, draws it.
//
// gemm_w4a16:
//     y[m * N + n] = sum over k of x[m * K + k] * (q(n, k) * scales[n * (K / 128) + k / 128])
// as gemv_w4a16's (the same scales, float32, one per group of 128 of a row), with W given in the
// tiled layout; x (M x K bf16, row-major), y (M x N float32, output only: its old contents may be
// anything, NaN included). On the tensor cores: q is a bf16 exactly (and so is x), so each group's
// products can be summed in float32 and the sum multiplied by the group's scale; a kernel may
// instead round each q * scale to bf16 before the product (Marlin's way): the checker's tolerance
// allows that rounding.
// - 1 <= M <= 64; N a multiple of 8, 8 <= N <= 65536; K a multiple of 128, 128 <= K <= 65536;
//   N * K <= 2^31 (the weights, at most 1 GiB, and every nibble index fit an int).
// - All pointers are device pointers, none aliasing another, each on a 16-byte boundary.
// Enqueue the work on the default stream and return; the checker synchronizes.
void tile_int4_weights(const std::uint8_t* packed, int N, int K, std::uint8_t* tiled);
void gemm_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
                const float* scales, float* y);
