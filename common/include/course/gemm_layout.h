// The index arithmetic of the tensor-core GEMMs (module 05), in one place, on the host and the
// device: which element of a tile each lane holds in the fragments of mma.sync and wgmma, which
// row each lane points ldmatrix at, the 128-byte XOR swizzle of shared tiles, the shared-memory
// descriptor of wgmma, the arguments of a 2D TMA tensor map, and an order of output tiles that
// keeps operands in L2. Each function transcribes a table of the PTX ISA (the section is named
// beside it); common/tests/gemm_layout_test.cpp checks them against each other on the CPU: an
// emulated ldmatrix + mma.sync over a swizzled tile gives the plain product.
//
//   const course::Coord a = course::ldmatrix_a_source(lane);   // this lane's row of the 16 x 16
//   const int chunk = course::swizzle_128b(row, a.col / 8);    // where its 16 bytes lie
//   const course::Coord c = course::mma_c_element(lane, i);    // accumulator i of this lane
//
// Coordinates are (row, col) within the fragment: for A (M x K) row = m and col = k, for B stored
// N x K (K contiguous, what mma's ".col" B and wgmma's K-major B read) row = n and col = k, for the
// accumulators row = m and col = n.
#pragma once

#include <cstdint>

#include "course/host_device.h"

#define COURSE_LAYOUT_FN COURSE_HOST_DEVICE constexpr

namespace course {

struct Coord {
    int row = 0;
    int col = 0;
};

// ---- mma.sync.aligned.m16n8k16, .bf16 or .f16 inputs, .f32 accumulators (sm_80) -----------------
// (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type".) A warp's 32 lanes form
// 8 groups of 4: group = lane / 4 picks the row (of 8), lane % 4 a pair of columns. Each 32-bit
// register holds two 16-bit elements, `half` 0 in the low bits.

// A (16 x 16, ".row"): register reg (0..3), half (0, 1). Registers 0 and 2 hold rows 0-7, 1 and 3
// rows 8-15; registers 0 and 1 hold k 0-7, 2 and 3 hold k 8-15.
COURSE_LAYOUT_FN Coord mma_a_element(int lane, int reg, int half) {
    return {lane / 4 + 8 * (reg % 2), 2 * (lane % 4) + half + 8 * (reg / 2)};
}

// B (16 x 8, ".col": stored as 8 rows n of 16 k): register reg (0, 1), half. Returned as
// (row = n, col = k). Register 0 holds k 0-7, register 1 k 8-15.
COURSE_LAYOUT_FN Coord mma_b_element(int lane, int reg, int half) {
    return {lane / 4, 2 * (lane % 4) + half + 8 * reg};
}

// C and D (16 x 8, .f32): accumulator i (0..3). 0 and 1 are row lane / 4, 2 and 3 eight rows
// below; the two of a row are neighbouring columns.
COURSE_LAYOUT_FN Coord mma_c_element(int lane, int i) {
    return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2};
}

// ---- mma.sync.aligned.m16n8k8, .f16 inputs, .f32 accumulators (sm_75) ---------------------------
// (PTX ISA, "Matrix Fragments for mma.m16n8k8", .f16.) Turing's tensor-core instruction: half the
// k of m16n8k16, and its fragments are the first half of m16n8k16's. A (16 x 8) is 2 registers,
// B (8 x 8) one, C and D as above (mma_c_element). So m16n8k16's A registers {0, 1} and {2, 3}
// are the A fragments of its k 0-7 and k 8-15, and its B registers 0 and 1 their B fragments:
// one m16n8k16 is two m16n8k8 on the same registers, and ldmatrix feeds both alike.

// A (16 x 8, ".row"): register reg (0, 1), half: register 0 holds rows 0-7, register 1 rows 8-15.
COURSE_LAYOUT_FN Coord mma_k8_a_element(int lane, int reg, int half) {
    return mma_a_element(lane, reg, half);
}
// B (8 x 8, ".col": stored as 8 rows n of 8 k), its one register: (row = n, col = k).
COURSE_LAYOUT_FN Coord mma_k8_b_element(int lane, int half) { return mma_b_element(lane, 0, half); }

// ---- ldmatrix.sync.aligned.m8n8.x4.b16 ----------------------------------------------------------
// (PTX ISA, "Warp-level matrix load instruction: ldmatrix".) Loads four 8 x 8 matrices of 16-bit
// elements. Lanes 8j .. 8j + 7 each give the address of one row (16 contiguous bytes) of matrix
// j; afterwards register j of every lane holds two elements of matrix j:
COURSE_LAYOUT_FN Coord ldmatrix_element(int lane, int half) {
    return {lane / 4, 2 * (lane % 4) + half};
}
// Which matrix (row = j) and which of its rows (col = 0..7) lane `lane` gives the address of.
COURSE_LAYOUT_FN Coord ldmatrix_source(int lane) { return {lane / 8, lane % 8}; }

// The row and first column (a multiple of 8) of a 16 x 16 A fragment (rows m, columns k) whose
// address lane `lane` gives one ldmatrix.x4, so that registers 0..3 come out as mma's A registers
// 0..3: matrix 0 = rows 0-7 k 0-7, 1 = rows 8-15 k 0-7, 2 = rows 0-7 k 8-15, 3 = rows 8-15 k 8-15.
COURSE_LAYOUT_FN Coord ldmatrix_a_source(int lane) { return {lane % 16, 8 * (lane / 16)}; }

// The same for B: 16 rows n (two n8 tiles of mma) by 16 k, stored n-major (K contiguous). The
// registers come out as {b0, b1} of the first n8 tile, then {b0, b1} of the second: matrix 0 =
// n 0-7 k 0-7, 1 = n 0-7 k 8-15, 2 = n 8-15 k 0-7, 3 = n 8-15 k 8-15.
COURSE_LAYOUT_FN Coord ldmatrix_b_source(int lane) {
    return {lane % 8 + 8 * (lane / 16), 8 * ((lane / 8) % 2)};
}

// ---- The 128-byte XOR swizzle -------------------------------------------------------------------
// A shared tile whose rows are 128 bytes (64 bf16) holds 8 chunks of 16 bytes per row. Stored
// plainly, the 8 rows one ldmatrix phase reads (same chunk, 8 rows) all start in banks 0-3 +
// 4 * chunk: an 8-way conflict. Stored at chunk ^ (row % 8), the 8 rows' chunks are a permutation
// of 0..7: the 8 reads cover all 32 banks once. It is the pattern TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B and wgmma reads with the descriptor's 128-byte swizzle mode (the
// address bits 4-6 XORed with bits 7-9, in tiles that start on 1024 bytes).
inline constexpr int kSwizzleRowBytes = 128;
inline constexpr int kSwizzleChunkBytes = 16;
COURSE_LAYOUT_FN int swizzle_128b(int row, int chunk) { return chunk ^ (row % 8); }

// Offset in elements of (row, col) in a tile of 128-byte rows of 16-bit elements (64 per row).
COURSE_LAYOUT_FN int swizzled_bf16_offset(int row, int col) {
    return row * 64 + swizzle_128b(row, col / 8) * 8 + col % 8;
}

// ---- wgmma.mma_async.m64nNk16, .f32 accumulators ------------------------------------------------
// (PTX ISA, "Matrix Fragments for wgmma.mma_async.m64nNk16", accumulator D.) A warpgroup's 128
// threads: warp w = thread / 32 holds rows 16 w .. 16 w + 15, and within them the mma.sync layout
// above, repeated for each 8 columns: register r is accumulator r % 4 of columns 8 (r / 4) ...
COURSE_LAYOUT_FN Coord wgmma_d_element(int thread, int reg) {
    const Coord in_warp = mma_c_element(thread % 32, reg % 4);
    return {16 * (thread / 32) + in_warp.row, 8 * (reg / 4) + in_warp.col};
}

// ---- The wgmma shared-memory matrix descriptor --------------------------------------------------
// (PTX ISA, "Matrix Descriptor Format".) 64 bits: start address (bits 0-13), leading dimension
// byte offset (16-29), stride dimension byte offset (32-45), each stored as (x & 0x3FFFF) >> 4;
// base offset (49-51), 0 when the swizzle pattern starts on its boundary (1024 bytes for 128B);
// swizzle mode (62-63): 0 none, 1 128-byte, 2 64-byte, 3 32-byte.
enum class WgmmaSwizzle : std::uint64_t { kNone = 0, k128B = 1, k64B = 2, k32B = 3 };

COURSE_LAYOUT_FN std::uint64_t wgmma_descriptor_field(std::uint32_t bytes) {
    return (bytes & 0x3FFFFu) >> 4;
}

COURSE_LAYOUT_FN std::uint64_t wgmma_descriptor(std::uint32_t smem_address,
                                                std::uint32_t leading_byte_offset,
                                                std::uint32_t stride_byte_offset,
                                                WgmmaSwizzle swizzle) {
    return wgmma_descriptor_field(smem_address) |
           wgmma_descriptor_field(leading_byte_offset) << 16 |
           wgmma_descriptor_field(stride_byte_offset) << 32 |
           static_cast<std::uint64_t>(swizzle) << 62;
}

// A K-major tile of 128-byte rows (64 bf16 of k per row) as TMA writes it with the 128-byte
// swizzle, starting on a 1024-byte boundary: groups of 8 rows are 1024 bytes apart (the stride
// dimension byte offset); the leading dimension byte offset is not used by swizzled K-major
// layouts (the 16 k of one wgmma lie inside a row) and is set to 16 (encoded 1). Step s of k16
// starts 32 * s bytes into the rows: its descriptor is this one with the start address advanced
// by 32 * s (wgmma swizzles the address bits, so the step needs no swizzle of its own).
COURSE_LAYOUT_FN std::uint64_t wgmma_descriptor_k_major_128b(std::uint32_t smem_address) {
    return wgmma_descriptor(smem_address, 16, 8 * kSwizzleRowBytes, WgmmaSwizzle::k128B);
}

// A descriptor `bytes` further into shared memory (a multiple of 16): its address field (bits
// 0-13, the address / 16) takes the sum in place, shared memory being under 256 KB (no carry
// out), and the low word alone changes (a 64-bit add would carry into the high word, in more
// instructions). A loop of wgmma adds constants to a few descriptors made once, where each
// made afresh costs some 5 to 10 integer instructions per wgmma.
COURSE_LAYOUT_FN std::uint64_t wgmma_descriptor_advance(std::uint64_t descriptor, int bytes) {
    const std::uint32_t low = static_cast<std::uint32_t>(descriptor) + (bytes >> 4);
    return (descriptor & 0xFFFFFFFF00000000ull) | low;
}

// An N-major B (stored K x N, N contiguous: attention's V, [key][d]) in tiles of 128-byte rows
// (64 bf16 of n per row, one row per k) as TMA writes them with the 128-byte swizzle, each tile
// on a 1024-byte boundary and `tile_bytes` after the previous one (n 64 .. 127 in the second).
// The canonical layout of the PTX ISA's "Shared Memory Matrix Layout" (CUTLASS's Layout_MN_SW128):
// groups of 8 k rows are 1024 bytes apart (the stride dimension byte offset), tiles of 64 n
// `tile_bytes` apart (the leading dimension byte offset). Step s of k16 covers 16 rows: it starts
// 16 * 128 bytes further, on the swizzle pattern's boundary again.
COURSE_LAYOUT_FN std::uint64_t wgmma_descriptor_mn_major_128b(std::uint32_t smem_address,
                                                              std::uint32_t tile_bytes) {
    return wgmma_descriptor(smem_address, tile_bytes, 8 * kSwizzleRowBytes, WgmmaSwizzle::k128B);
}

// ---- A 2D TMA tensor map of a row-major matrix of 16-bit elements -------------------------------
// (CUDA driver API, cuTensorMapEncodeTiled.) Dimensions and box are given innermost first: the
// columns (contiguous), then the rows; the strides of the dimensions past the first, in bytes.
struct TensorMap2d {
    std::uint64_t dims[2];           // {cols, rows}
    std::uint64_t row_stride_bytes;  // globalStrides[0]
    std::uint32_t box[2];            // {box_cols, box_rows}: the tile one copy moves
};

COURSE_LAYOUT_FN TensorMap2d tensor_map_2d_bf16(std::uint64_t rows, std::uint64_t cols,
                                                std::uint32_t box_rows, std::uint32_t box_cols) {
    return {{cols, rows}, cols * 2, {box_cols, box_rows}};
}

// Why cuTensorMapEncodeTiled would refuse this map with the 128-byte swizzle, or nullptr: the
// global address and the row stride must be multiples of 16 bytes, a box side at most 256
// elements, and the box's inner side at most the 128 bytes of the swizzle span.
inline const char* tensor_map_2d_bf16_problem(const void* base, const TensorMap2d& map) {
    if (reinterpret_cast<std::uintptr_t>(base) % 16 != 0)
        return "the matrix must start on a 16-byte boundary";
    if (map.row_stride_bytes % 16 != 0)
        return "a row must be a multiple of 16 bytes (8 bf16 elements)";
    if (map.box[0] == 0 || map.box[1] == 0 || map.box[0] > 256 || map.box[1] > 256)
        return "a box side must be 1 to 256 elements";
    if (map.box[0] * 2 > kSwizzleRowBytes) return "the box's rows must fit the 128-byte swizzle";
    return nullptr;
}

// ---- The order of output tiles ------------------------------------------------------------------
// Block `index` of a 1D grid over tiles_m x tiles_n output tiles: the grid walks down groups of
// `group_rows` tile rows, one column of the group after another (the last group may have fewer
// rows). Blocks that run at the same time then share their rows of A and columns of B, which stay
// in L2, where row after row would stream all of B through L2 for each row of tiles.
COURSE_LAYOUT_FN Coord grouped_tile(int index, int tiles_m, int tiles_n, int group_rows) {
    const int per_group = group_rows * tiles_n;
    const int first_row = index / per_group * group_rows;
    const int rows_here = tiles_m - first_row < group_rows ? tiles_m - first_row : group_rows;
    const int in_group = index % per_group;
    return {first_row + in_group % rows_here, in_group / rows_here};
}

}  // namespace course

#undef COURSE_LAYOUT_FN
