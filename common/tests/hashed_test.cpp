// The host side of the hashed inputs (course/hashed.h): the values the reference recomputes.
#include "course/hashed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace {

TEST(Hashed, UniformStaysInItsRange) {
    for (std::size_t i = 0; i < 10000; ++i) {
        const float v = course::hashed::uniform(i, 42, -5.0f, 3.0f);
        EXPECT_GE(v, -5.0f);
        EXPECT_LT(v, 3.0f);
    }
}

TEST(Hashed, UniformOnMinusOneToOneIsExactOnTheGridOf2ToMinus23) {
    for (std::size_t i = 0; i < 10000; ++i) {
        const float v = course::hashed::uniform(i, 7, -1.0f, 1.0f);
        const float scaled = (v + 1.0f) * 0x1.0p23f;
        EXPECT_EQ(scaled, std::floor(scaled));
    }
}

TEST(Hashed, IntegersCoverTheirRangeInclusive) {
    bool saw_lo = false, saw_hi = false;
    for (std::size_t i = 0; i < 10000; ++i) {
        const int v = course::hashed::uniform_int(i, 3, -8, 8);
        ASSERT_GE(v, -8);
        ASSERT_LE(v, 8);
        saw_lo |= v == -8;
        saw_hi |= v == 8;
    }
    EXPECT_TRUE(saw_lo && saw_hi);
}

TEST(Hashed, ElementsDependOnIndexAndSeed) {
    EXPECT_NE(course::hashed::bits(0, 1), course::hashed::bits(1, 1));
    EXPECT_NE(course::hashed::bits(5, 1), course::hashed::bits(5, 2));
    EXPECT_EQ(course::hashed::bits(5, 1), course::hashed::bits(5, 1));
}

}  // namespace
