#include "course/reference/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "course/gemm_layout.h"

namespace {

using namespace course::reference;

TEST(ReferenceQuantize, Int8RoundsHalfToEvenAndKeepsTheGridSymmetric) {
    // absmax 127: scale 1, so q is x rounded: -63.5 -> -64, 0.5 -> 0, 1.5 -> 2, 2.5 -> 2.
    const auto out = quantize_int8_rows({127.0f, -63.5f, 0.5f, 1.5f, 2.5f, -127.0f}, 1, 6);
    EXPECT_EQ(out.scales[0], 1.0f);
    EXPECT_EQ(out.q, (std::vector<std::int8_t>{127, -64, 0, 2, 2, -127}));
    // -x gives -q: -128 is never used.
    const auto negated = quantize_int8_rows({-127.0f, 63.5f, -0.5f, -1.5f, -2.5f, 127.0f}, 1, 6);
    EXPECT_EQ(negated.q, (std::vector<std::int8_t>{-127, 64, 0, -2, -2, 127}));
}

TEST(ReferenceQuantize, Int8ScaleIsAFloatDivisionAndZeroRowsStayZero) {
    const auto out = quantize_int8_rows({0.0f, 0.0f, 3.0f, -1.0f}, 2, 2);
    EXPECT_EQ(out.scales[0], 0.0f);
    EXPECT_EQ(out.scales[1], 3.0f / 127.0f);
    EXPECT_EQ(out.q, (std::vector<std::int8_t>{0, 0, 127, -42}));  // -1 / (3 / 127) = -42.33
    EXPECT_EQ(dequantize_int8_rows(out.q, out.scales, 2, 2)[3], -42.0f * (3.0f / 127.0f));
}

TEST(ReferenceQuantize, Int8ClampsWhereASubnormalScaleRoundedDown) {
    // absmax = 190 * 2^-149: absmax / 127 = 1.496 * 2^-149 rounds to 2^-149, the smallest
    // subnormal, and x / scale = 190: the clamp brings it back to 127.
    const float absmax = 190 * std::numeric_limits<float>::denorm_min();
    const auto out = quantize_int8_rows({absmax, -absmax}, 1, 2);
    EXPECT_EQ(out.scales[0], std::numeric_limits<float>::denorm_min());
    EXPECT_EQ(out.q, (std::vector<std::int8_t>{127, -127}));
}

TEST(ReferenceQuantize, Int4PacksTheEvenColumnInTheLowNibble) {
    std::vector<float> x(128, 0.0f);
    x[0] = 7, x[1] = -7, x[2] = 1, x[3] = -1, x[127] = -3.5f;  // scale 1; -3.5 -> -4
    const auto out = quantize_int4_groups(x, 1, 128, 128);
    EXPECT_EQ(out.scales[0], 1.0f);
    EXPECT_EQ(out.packed[0], 0x97);   // 7 = 0x7 low, -7 = 0x9 high
    EXPECT_EQ(out.packed[1], 0xF1);   // 1 low, -1 = 0xF high
    EXPECT_EQ(out.packed[63], 0xC0);  // column 126 (0) low, column 127 (-4 = 0xC) high
    EXPECT_EQ(int4_nibble(0x97, 0), 7);
    EXPECT_EQ(int4_nibble(0x97, 1), -7);
    EXPECT_EQ(int4_nibble(0x80, 1), -8);
    const auto back = dequantize_int4_groups(out.packed, out.scales, 1, 128, 128);
    EXPECT_EQ(back[1], -7.0f);
    EXPECT_EQ(back[127], -4.0f);
}

TEST(ReferenceQuantize, Int4HasAScalePerGroup) {
    // Two groups of 128 in a row: absmax 7 and 14, so scales 1 and 2, and the same q.
    std::vector<float> x(256, 0.0f);
    x[5] = 7.0f, x[128 + 5] = 14.0f, x[128 + 6] = -5.0f;  // -5 / 2 = -2.5 -> -2
    const auto out = quantize_int4_groups(x, 1, 256, 128);
    EXPECT_EQ(out.scales, (std::vector<float>{1.0f, 2.0f}));
    EXPECT_EQ(out.packed[2] >> 4, 7);
    EXPECT_EQ(int4_nibble(out.packed[64 + 2], 1), 7);
    EXPECT_EQ(int4_nibble(out.packed[64 + 3], 0), -2);
}

// The tiled layout is the B fragment of mma.sync.m16n8k16 as the PTX ISA's table gives it
// (course::mma_b_element): in lane l's 16 bytes, nibble p of word s / 2 with p = 2 (s % 2) + r +
// 4 h is (n, k) = that table's (row, col) for register r, half h, in k16 step s of the group.
TEST(ReferenceQuantize, TiledInt4IsTheMmaBFragmentOrder) {
    const std::size_t N = 16, K = 256;
    for (std::size_t tile = 0; tile < N / 8; ++tile)
        for (std::size_t group = 0; group < K / 128; ++group)
            for (int lane = 0; lane < 32; ++lane)
                for (int step = 0; step < 8; ++step)
                    for (int reg = 0; reg < 2; ++reg)
                        for (int half = 0; half < 2; ++half) {
                            const course::Coord e = course::mma_b_element(lane, reg, half);
                            const std::size_t n = 8 * tile + e.row;
                            const std::size_t k = 128 * group + 16 * step + e.col;
                            const std::size_t want = ((tile * (K / 128) + group) * 32 + lane) * 32 +
                                                     8 * (step / 2) + 2 * (step % 2) + reg +
                                                     4 * half;
                            ASSERT_EQ(int4_tiled_index(n, k, K), want) << "n " << n << " k " << k;
                        }
}

TEST(ReferenceQuantize, TiledInt4MovesEveryNibbleOnce) {
    const std::size_t N = 24, K = 384;
    std::set<std::size_t> seen;
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) seen.insert(int4_tiled_index(n, k, K));
    EXPECT_EQ(seen.size(), N * K);
    EXPECT_EQ(*seen.rbegin(), N * K - 1);
    // A row-major matrix whose nibble at (n, k) is (n + k) % 16 lands where the index says.
    std::vector<std::uint8_t> packed(N * K / 2);
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; k += 2)
            packed[(n * K + k) / 2] =
                static_cast<std::uint8_t>((n + k) % 16 | ((n + k + 1) % 16) << 4);
    const auto tiled = int4_tiled(packed, N, K);
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) {
            const std::size_t at = int4_tiled_index(n, k, K);
            ASSERT_EQ((tiled[at / 2] >> (4 * (at % 2))) & 0xF, (n + k) % 16);
        }
}

TEST(ReferenceQuantize, E4m3OfKnownValues) {
    EXPECT_EQ(e4m3_encode(1.0f), 0x38);  // exponent 7 (bias 7), mantissa 0
    EXPECT_EQ(e4m3_encode(-1.0f), 0xB8);
    EXPECT_EQ(e4m3_encode(448.0f), 0x7E);   // the largest finite
    EXPECT_EQ(e4m3_encode(1000.0f), 0x7E);  // saturates (0x7F is NaN)
    EXPECT_EQ(e4m3_encode(-460.0f), 0xFE);
    EXPECT_EQ(e4m3_encode(240.0f), 0x77);    // 1.875 * 2^7
    EXPECT_EQ(e4m3_encode(0x1p-6f), 0x08);   // the smallest normal
    EXPECT_EQ(e4m3_encode(0x1p-9f), 0x01);   // the smallest subnormal
    EXPECT_EQ(e4m3_encode(0x1p-10f), 0x00);  // half of it: a tie, to even (0)
    EXPECT_EQ(e4m3_encode(0x3p-10f), 0x02);  // 1.5 * 2^-9: a tie, to even (2)
    EXPECT_EQ(e4m3_encode(1.0625f), 0x38);   // between 1 and 1.125: to even (1)
    EXPECT_EQ(e4m3_encode(1.1875f), 0x3A);   // between 1.125 and 1.25: to even (1.25)
    EXPECT_EQ(e4m3_encode(0.0f), 0x00);
    EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
    EXPECT_EQ(e4m3_encode(-1e-30f), 0x80);  // rounds to zero, keeps its sign
    EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
    EXPECT_EQ(e4m3_decode(0x01), 0x1p-9f);
    EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
    EXPECT_TRUE(std::isnan(e4m3_decode(0xFF)));
}

TEST(ReferenceQuantize, E4m3CodesRoundTripInOrder) {
    float previous = -1.0f;
    for (int code = 0; code < 256; ++code) {
        if ((code & 0x7F) == 0x7F) continue;  // the two NaNs
        const float value = e4m3_decode(static_cast<std::uint8_t>(code));
        EXPECT_EQ(e4m3_encode(value), code) << code;
        if (code < 0x7F) {
            EXPECT_GT(value, previous) << code;  // the positive codes are in increasing order
            previous = value;
        }
    }
}

TEST(ReferenceQuantize, E8m0AndTheSharedExponent) {
    EXPECT_EQ(e8m0_decode(127), 1.0f);
    EXPECT_EQ(e8m0_decode(0), 0x1p-127f);
    EXPECT_EQ(e8m0_decode(254), 0x1p127f);
    EXPECT_TRUE(std::isnan(e8m0_decode(255)));
    EXPECT_EQ(mx_shared_exponent(1.0f), -8);  // floor(log2 1) - 8
    EXPECT_EQ(mx_shared_exponent(448.0f), 0);
    EXPECT_EQ(mx_shared_exponent(511.9f), 0);
    EXPECT_EQ(mx_shared_exponent(0.75f), -9);
    EXPECT_EQ(mx_shared_exponent(0.0f), -127);  // a block of zeros
    EXPECT_EQ(mx_shared_exponent(0x1p-130f), -127);
    EXPECT_EQ(mx_shared_exponent(std::numeric_limits<float>::max()), 119);
}

TEST(ReferenceQuantize, Mxfp8BlocksScaleRoundAndClip) {
    std::vector<float> x(96, 0.0f);
    // Block 0: absmax 300, shared exponent 0 (X = 1): 300 = 9.375 * 32 -> 9 * 32 = 288.
    x[0] = 300.0f, x[1] = -1.0f;
    // Block 1: absmax 500 -> shared exponent 0 again, and 500 clips to 448: the spec's clamp.
    x[32] = 500.0f;
    // Block 2: zeros -> X = 2^-127 (E8M0 0), elements 0.
    const auto out = quantize_mxfp8(x, 1, 96);
    EXPECT_EQ(out.scales, (std::vector<std::uint8_t>{127, 127, 0}));
    EXPECT_EQ(out.elements[0], 0x79);
    EXPECT_EQ(out.elements[1], 0xB8);
    EXPECT_EQ(out.elements[32], 0x7E);
    EXPECT_EQ(out.elements[64], 0x00);
    const auto back = dequantize_mxfp8(out.elements, out.scales, 1, 96);
    EXPECT_EQ(back[0], 288.0f);
    EXPECT_EQ(back[32], 448.0f);
    EXPECT_EQ(back[64], 0.0f);
}

TEST(ReferenceQuantize, Mxfp8ErrorIsHalfAStepBelowTheClip) {
    // Values spread over ten binades, one block per row: every element not clipped is within
    // half an E4M3 step (times X) of the input.
    std::vector<float> x;
    for (int i = 0; i < 32 * 8; ++i) x.push_back(std::ldexp(1.0f + (i % 97) / 97.0f, i % 10 - 5));
    const auto out = quantize_mxfp8(x, 8, 32);
    const auto back = dequantize_mxfp8(out.elements, out.scales, 8, 32);
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double X = e8m0_decode(out.scales[i / 32]);
        const double scaled = std::fabs(x[i]) / X;
        if (scaled > 448.0) continue;
        EXPECT_LE(std::fabs(back[i] - x[i]), 0.5 * e4m3_step(scaled) * X) << i;
    }
}

}  // namespace
