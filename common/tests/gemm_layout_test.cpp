// The index arithmetic of the tensor-core GEMMs (course/gemm_layout.h), checked on the CPU: every
// fragment map covers its tile once; ldmatrix, emulated from the PTX ISA's description, hands each
// lane exactly the elements mma.sync expects when the lanes point it where ldmatrix_a_source and
// ldmatrix_b_source say, in a tile stored with the 128-byte swizzle; an mma emulated from the
// fragments gives the plain product; the swizzle makes every ldmatrix phase and every 16-byte
// store conflict-free and agrees with TMA's and wgmma's address-bit definition, a k16 step
// included; the wgmma accumulators cover 64 x N once; the descriptor's bits; the TMA map's order;
// the grouped tile order visits every tile once.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "course/gemm_layout.h"

namespace {

using course::Coord;

constexpr int kLanes = 32;

// Every (lane, index) of a fragment map lands inside rows x cols, and no element twice.
template <class Map>
void expect_covers_once(int rows, int cols, int per_lane, Map map, const std::string& what) {
    std::set<std::pair<int, int>> seen;
    for (int lane = 0; lane < kLanes; ++lane) {
        for (int i = 0; i < per_lane; ++i) {
            const Coord c = map(lane, i);
            ASSERT_TRUE(c.row >= 0 && c.row < rows && c.col >= 0 && c.col < cols)
                << what << ": lane " << lane << " element " << i << " at (" << c.row << ", "
                << c.col << ")";
            ASSERT_TRUE(seen.insert({c.row, c.col}).second)
                << what << ": (" << c.row << ", " << c.col << ") held twice";
        }
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(rows * cols)) << what;
}

TEST(GemmLayout, MmaFragmentsCoverTheirTilesOnce) {
    expect_covers_once(
        16, 16, 8, [](int lane, int i) { return course::mma_a_element(lane, i / 2, i % 2); },
        "mma A 16 x 16");
    expect_covers_once(
        8, 16, 4, [](int lane, int i) { return course::mma_b_element(lane, i / 2, i % 2); },
        "mma B 8 (n) x 16 (k)");
    expect_covers_once(16, 8, 4, course::mma_c_element, "mma C 16 x 8");
    expect_covers_once(8, 8, 2, course::ldmatrix_element, "ldmatrix 8 x 8");
}

TEST(GemmLayout, MmaFragmentsMatchThePtxTables) {
    // A few entries read off the ISA's figures: lane 5 is group 1, thread 1 of its group.
    EXPECT_EQ(course::mma_a_element(5, 0, 1).row, 1);
    EXPECT_EQ(course::mma_a_element(5, 0, 1).col, 3);
    EXPECT_EQ(course::mma_a_element(5, 1, 0).row, 9);   // a2: row + 8
    EXPECT_EQ(course::mma_a_element(5, 2, 0).col, 10);  // a4: k + 8
    EXPECT_EQ(course::mma_b_element(5, 1, 1).row, 1);   // n = group
    EXPECT_EQ(course::mma_b_element(5, 1, 1).col, 11);  // b3: k = 2 * 1 + 1 + 8
    EXPECT_EQ(course::mma_c_element(31, 3).row, 15);
    EXPECT_EQ(course::mma_c_element(31, 3).col, 7);
}

TEST(GemmLayout, MmaK8FragmentsAreTheHalvesOfK16) {
    expect_covers_once(
        16, 8, 4, [](int lane, int i) { return course::mma_k8_a_element(lane, i / 2, i % 2); },
        "mma.m16n8k8 A 16 x 8");
    expect_covers_once(8, 8, 2, course::mma_k8_b_element, "mma.m16n8k8 B 8 (n) x 8 (k)");
    // The ISA's m16n8k8 figures: lane 5 (group 1, thread 1) holds A (1, 2), (1, 3) in a0, a1 and
    // (9, 2), (9, 3) in a2, a3; B (k 2, 3; n 1).
    EXPECT_EQ(course::mma_k8_a_element(5, 1, 1).row, 9);
    EXPECT_EQ(course::mma_k8_a_element(5, 1, 1).col, 3);
    EXPECT_EQ(course::mma_k8_b_element(5, 0).row, 1);
    EXPECT_EQ(course::mma_k8_b_element(5, 0).col, 2);
    // m16n8k16's registers {2, 3} of A and 1 of B are the k8 fragments of k 8-15.
    for (int lane = 0; lane < kLanes; ++lane)
        for (int half = 0; half < 2; ++half) {
            for (int reg = 0; reg < 2; ++reg) {
                const Coord high = course::mma_a_element(lane, reg + 2, half);
                const Coord k8 = course::mma_k8_a_element(lane, reg, half);
                EXPECT_EQ(high.row, k8.row);
                EXPECT_EQ(high.col, k8.col + 8);
            }
            const Coord high = course::mma_b_element(lane, 1, half);
            EXPECT_EQ(high.row, course::mma_k8_b_element(lane, half).row);
            EXPECT_EQ(high.col, course::mma_k8_b_element(lane, half).col + 8);
        }
}

// Shared memory of a tile of `rows` 128-byte rows (64 values of k), stored with the swizzle; the
// values are the element's (row, k) so that a wrong address shows which element it fetched.
struct SwizzledTile {
    int rows;
    std::vector<std::pair<int, int>> slots;
    explicit SwizzledTile(int rows_) : rows(rows_), slots(static_cast<std::size_t>(rows_) * 64) {
        for (int r = 0; r < rows; ++r)
            for (int k = 0; k < 64; ++k) slots[course::swizzled_bf16_offset(r, k)] = {r, k};
    }
};

// ldmatrix.x4 as the ISA describes it: lane 8j + r gives the address (an element offset) of row r
// of matrix j; register j of each lane receives elements ldmatrix_element(lane, half) of matrix j.
// out[lane][j][half] = the element fetched.
using Registers = std::vector<std::vector<std::vector<std::pair<int, int>>>>;
Registers emulate_ldmatrix_x4(const SwizzledTile& tile, const std::vector<int>& row_address) {
    Registers out(kLanes, std::vector<std::vector<std::pair<int, int>>>(
                              4, std::vector<std::pair<int, int>>(2)));
    for (int lane = 0; lane < kLanes; ++lane)
        for (int j = 0; j < 4; ++j)
            for (int half = 0; half < 2; ++half) {
                const Coord e = course::ldmatrix_element(lane, half);
                out[lane][j][half] = tile.slots[row_address[8 * j + e.row] + e.col];
            }
    return out;
}

// The element offset lane `lane` gives ldmatrix for the fragment whose element (0, 0) is (row0,
// k0) of the tile, when its part of the fragment starts at `source` (ldmatrix_*_source).
int source_address(int row0, int k0, Coord source) {
    const int row = row0 + source.row, k = k0 + source.col;
    return course::swizzled_bf16_offset(row, k);  // k is a multiple of 8: a whole 16-byte chunk
}

TEST(GemmLayout, LdmatrixFromTheSwizzledTileGivesMmaItsFragments) {
    // A warp tile of 32 rows of A and 16 rows of B (two n8 tiles), each 64 k deep; every k16 step
    // and both m16 halves, from the swizzled layout.
    const SwizzledTile a(32), b(16);
    for (int m0 : {0, 16}) {
        for (int k0 = 0; k0 < 64; k0 += 16) {
            std::vector<int> a_rows(kLanes), b_rows(kLanes);
            for (int lane = 0; lane < kLanes; ++lane) {
                a_rows[lane] = source_address(m0, k0, course::ldmatrix_a_source(lane));
                b_rows[lane] = source_address(0, k0, course::ldmatrix_b_source(lane));
                ASSERT_EQ(a_rows[lane] % 8, 0) << "a row address inside a 16-byte chunk";
            }
            const Registers a_regs = emulate_ldmatrix_x4(a, a_rows);
            const Registers b_regs = emulate_ldmatrix_x4(b, b_rows);
            for (int lane = 0; lane < kLanes; ++lane)
                for (int reg = 0; reg < 4; ++reg)
                    for (int half = 0; half < 2; ++half) {
                        const Coord want_a = course::mma_a_element(lane, reg, half);
                        EXPECT_EQ(a_regs[lane][reg][half],
                                  std::make_pair(m0 + want_a.row, k0 + want_a.col))
                            << "A: lane " << lane << " register " << reg << " half " << half;
                        // Registers 0, 1: b0, b1 of n 0-7; registers 2, 3: of n 8-15.
                        const Coord want_b = course::mma_b_element(lane, reg % 2, half);
                        EXPECT_EQ(b_regs[lane][reg][half],
                                  std::make_pair(8 * (reg / 2) + want_b.row, k0 + want_b.col))
                            << "B: lane " << lane << " register " << reg << " half " << half;
                    }
        }
    }
}

TEST(GemmLayout, MmaEmulatedFromFragmentsIsTheProduct) {
    // D = A B^T for a 16 x 16 A and an 8 x 16 B with small integer values (exact in double),
    // computed the way the hardware sees it: each lane's accumulator i of row r and column c sums
    // the products of the A elements of row r and the B elements of column c over the k held by
    // all lanes' fragments.
    double A[16][16], B[8][16];
    for (int i = 0; i < 16; ++i)
        for (int k = 0; k < 16; ++k) A[i][k] = (i * 7 + k * 3) % 11 - 5;
    for (int j = 0; j < 8; ++j)
        for (int k = 0; k < 16; ++k) B[j][k] = (j * 5 + k * 2) % 13 - 6;
    double a_by_row_k[16][16] = {}, b_by_col_k[8][16] = {};
    for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < 8; ++i) {
            const Coord a = course::mma_a_element(lane, i / 2, i % 2);
            a_by_row_k[a.row][a.col] = A[a.row][a.col];
            if (i < 4) {
                const Coord b = course::mma_b_element(lane, i / 2, i % 2);
                b_by_col_k[b.row][b.col] = B[b.row][b.col];
            }
        }
    for (int lane = 0; lane < kLanes; ++lane)
        for (int i = 0; i < 4; ++i) {
            const Coord c = course::mma_c_element(lane, i);
            double d = 0, want = 0;
            for (int k = 0; k < 16; ++k) {
                d += a_by_row_k[c.row][k] * b_by_col_k[c.col][k];
                want += A[c.row][k] * B[c.col][k];
            }
            EXPECT_EQ(d, want) << "lane " << lane << " accumulator " << i;
        }
}

// The bank groups (16 bytes = 4 banks each, 8 per 128-byte wavefront) of 8 row addresses.
int distinct_bank_groups(const std::vector<int>& element_offsets) {
    std::set<int> groups;
    for (int offset : element_offsets) groups.insert(offset * 2 / 16 % 8);
    return static_cast<int>(groups.size());
}

TEST(GemmLayout, SwizzledLdmatrixPhasesAreConflictFree) {
    for (int m0 = 0; m0 < 128; m0 += 16) {
        for (int k0 = 0; k0 < 64; k0 += 16) {
            for (int j = 0; j < 4; ++j) {  // one phase per 8 x 8 matrix: 8 rows of 16 bytes
                std::vector<int> swizzled, plain;
                for (int lane = 8 * j; lane < 8 * j + 8; ++lane) {
                    const Coord s = course::ldmatrix_a_source(lane);
                    swizzled.push_back(source_address(m0, k0, s));
                    plain.push_back((m0 + s.row) * 64 + k0 + s.col);
                }
                EXPECT_EQ(distinct_bank_groups(swizzled), 8) << "m0 " << m0 << " k0 " << k0;
                // Unswizzled, the 8 rows 128 bytes apart start in the same 4 banks.
                EXPECT_EQ(distinct_bank_groups(plain), 1);
            }
        }
    }
}

TEST(GemmLayout, SwizzledSixteenByteStoresAreConflictFree) {
    // Thread t of a block stores chunk t % 8 of row t / 8 (global memory read row by row): each 8
    // threads fill one 128-byte row, in 8 different bank groups.
    for (int first = 0; first < 1024; first += 8) {
        std::vector<int> offsets;
        for (int t = first; t < first + 8; ++t)
            offsets.push_back(course::swizzled_bf16_offset(t / 8, 8 * (t % 8)));
        EXPECT_EQ(distinct_bank_groups(offsets), 8);
    }
}

// TMA's and wgmma's 128-byte swizzle, from its definition on byte addresses (in a region that
// starts on 1024 bytes): bits 4-6 of the address XOR bits 7-9.
std::uint32_t swizzle_address_bits(std::uint32_t address) {
    return address ^ (((address >> 7) & 7u) << 4);
}

TEST(GemmLayout, SwizzleIsTheAddressBitPatternOfTmaAndWgmma) {
    for (int row = 0; row < 256; ++row)
        for (int k = 0; k < 64; ++k)
            EXPECT_EQ(2u * course::swizzled_bf16_offset(row, k),
                      swizzle_address_bits(static_cast<std::uint32_t>(row * 128 + 2 * k)));
}

TEST(GemmLayout, WgmmaKStepIsTheStartAddressPlus32Bytes) {
    // A 64-row K-major tile at a 1024-byte boundary: step s (k = 16 s .. 16 s + 15) described from
    // start + 32 s, rows 128 bytes apart and groups of 8 rows 1024 bytes apart (the descriptor's
    // stride), then swizzled by address bits, finds the element where the tile stores it.
    const std::uint32_t base = 3 * 1024;
    for (int step = 0; step < 4; ++step)
        for (int row = 0; row < 64; ++row)
            for (int kk = 0; kk < 16; ++kk) {
                const std::uint32_t unswizzled =
                    base + 32 * step + (row / 8) * 1024 + (row % 8) * 128 + 2 * kk;
                EXPECT_EQ(swizzle_address_bits(unswizzled),
                          base + 2u * course::swizzled_bf16_offset(row, 16 * step + kk));
            }
}

TEST(GemmLayout, WgmmaAccumulatorsCoverTheTileOnce) {
    for (int n : {8, 64, 128, 256}) {
        std::set<std::pair<int, int>> seen;
        for (int thread = 0; thread < 128; ++thread)
            for (int reg = 0; reg < n / 2; ++reg) {
                const Coord c = course::wgmma_d_element(thread, reg);
                ASSERT_TRUE(c.row >= 0 && c.row < 64 && c.col >= 0 && c.col < n);
                ASSERT_TRUE(seen.insert({c.row, c.col}).second);
            }
        EXPECT_EQ(seen.size(), static_cast<std::size_t>(64 * n));
    }
    // Thread 37 is lane 5 of warp 1: rows 16 + 1 and 16 + 9, columns 2, 3 of each 8.
    EXPECT_EQ(course::wgmma_d_element(37, 0).row, 17);
    EXPECT_EQ(course::wgmma_d_element(37, 2).row, 25);
    EXPECT_EQ(course::wgmma_d_element(37, 5).col, 11);
}

TEST(GemmLayout, WgmmaDescriptorBits) {
    // Start 0x1400, leading byte offset 16, stride 1024, 128-byte swizzle.
    const std::uint64_t d = course::wgmma_descriptor_k_major_128b(0x1400);
    EXPECT_EQ(d & 0x3FFF, 0x140u);       // start >> 4
    EXPECT_EQ((d >> 16) & 0x3FFF, 1u);   // 16 >> 4
    EXPECT_EQ((d >> 32) & 0x3FFF, 64u);  // 1024 >> 4
    EXPECT_EQ((d >> 49) & 0x7, 0u);      // base offset: the tile starts on 1024 bytes
    EXPECT_EQ(d >> 62, 1u);              // 128-byte swizzle
    EXPECT_EQ(d, 0x4000004000010140ull);
    // A k16 step of 32 bytes adds 2 to the start field and touches nothing else.
    EXPECT_EQ(course::wgmma_descriptor_k_major_128b(0x1400 + 32), d + 2);
    // Shared addresses are below 256 KB: the 18 bits the field keeps.
    EXPECT_EQ(course::wgmma_descriptor_field(0x3FFF0), 0x3FFFu);
}

// Advancing a descriptor is making it afresh at the farther address, for both layouts, over the
// shared addresses a block can have (under 227 KB), with the high word untouched.
TEST(GemmLayout, WgmmaDescriptorAdvanceIsTheDescriptorFurtherOn) {
    for (std::uint32_t start : {0x0u, 0x400u, 0x1400u, 0x20000u}) {
        const std::uint64_t k_major = course::wgmma_descriptor_k_major_128b(start);
        const std::uint64_t mn_major = course::wgmma_descriptor_mn_major_128b(start, 128 * 128);
        for (int bytes : {32, 96, 8 * 1024 + 32, 5 * 32 * 1024, 227 * 1024 - 0x20000 - 16}) {
            if (start + bytes >= 227 * 1024) continue;
            SCOPED_TRACE("start " + std::to_string(start) + " + " + std::to_string(bytes));
            EXPECT_EQ(course::wgmma_descriptor_advance(k_major, bytes),
                      course::wgmma_descriptor_k_major_128b(start + bytes));
            EXPECT_EQ(course::wgmma_descriptor_advance(mn_major, bytes),
                      course::wgmma_descriptor_mn_major_128b(start + bytes, 128 * 128));
        }
    }
}

TEST(GemmLayout, WgmmaMnMajorDescriptorBits) {
    // V tiles of 128 keys x 64 d (16 KB each): the leading byte offset is the distance from d 0-63
    // to d 64-127, the stride byte offset that of 8 key rows (1024 bytes), 128-byte swizzle.
    const std::uint64_t d = course::wgmma_descriptor_mn_major_128b(0x8000, 128 * 128);
    EXPECT_EQ(d & 0x3FFF, 0x800u);
    EXPECT_EQ((d >> 16) & 0x3FFF, 0x400u);  // 16384 >> 4
    EXPECT_EQ((d >> 32) & 0x3FFF, 64u);     // 1024 >> 4
    EXPECT_EQ((d >> 49) & 0x7, 0u);
    EXPECT_EQ(d >> 62, 1u);
    // A k16 step (16 key rows, 2048 bytes) adds 128 to the start field only.
    EXPECT_EQ(course::wgmma_descriptor_mn_major_128b(0x8000 + 2048, 128 * 128), d + 128);
}

TEST(GemmLayout, TensorMapIsInnermostFirst) {
    const course::TensorMap2d map = course::tensor_map_2d_bf16(1000, 520, 128, 64);
    EXPECT_EQ(map.dims[0], 520u);
    EXPECT_EQ(map.dims[1], 1000u);
    EXPECT_EQ(map.row_stride_bytes, 1040u);
    EXPECT_EQ(map.box[0], 64u);
    EXPECT_EQ(map.box[1], 128u);
    alignas(16) static const char aligned[32] = {};
    EXPECT_EQ(course::tensor_map_2d_bf16_problem(aligned, map), nullptr);
    EXPECT_NE(course::tensor_map_2d_bf16_problem(aligned + 8, map), nullptr);
    EXPECT_NE(course::tensor_map_2d_bf16_problem(aligned, course::tensor_map_2d_bf16(8, 12, 8, 8)),
              nullptr);  // rows of 24 bytes
    EXPECT_NE(
        course::tensor_map_2d_bf16_problem(aligned, course::tensor_map_2d_bf16(8, 128, 8, 128)),
        nullptr);  // 256-byte box rows: wider than the swizzle
}

TEST(GemmLayout, GroupedTileOrderVisitsEveryTileOnce) {
    for (auto [tiles_m, tiles_n, group] :
         {std::tuple{32, 16, 8}, std::tuple{7, 5, 3}, std::tuple{1, 9, 8}, std::tuple{13, 1, 4}}) {
        std::set<std::pair<int, int>> seen;
        for (int index = 0; index < tiles_m * tiles_n; ++index) {
            const Coord t = course::grouped_tile(index, tiles_m, tiles_n, group);
            ASSERT_TRUE(t.row >= 0 && t.row < tiles_m && t.col >= 0 && t.col < tiles_n)
                << index << " of " << tiles_m << " x " << tiles_n;
            ASSERT_TRUE(seen.insert({t.row, t.col}).second) << index;
        }
    }
    // The first `group` blocks are one column of `group` rows.
    for (int index = 0; index < 8; ++index) {
        EXPECT_EQ(course::grouped_tile(index, 32, 16, 8).row, index);
        EXPECT_EQ(course::grouped_tile(index, 32, 16, 8).col, 0);
    }
}

}  // namespace
