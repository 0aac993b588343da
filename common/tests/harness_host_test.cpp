// Seeds, generators and timing statistics.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "course/bench.h"
#include "course/random.h"

namespace {

TEST(Rng, SameSeedSameSequence) {
    course::Rng a(42), b(42), c(43);
    const auto x = course::random_floats(1000, -1.0f, 1.0f, a);
    EXPECT_EQ(x, course::random_floats(1000, -1.0f, 1.0f, b));
    EXPECT_NE(x, course::random_floats(1000, -1.0f, 1.0f, c));
}

TEST(Rng, StaysInRange) {
    course::Rng rng(7);
    for (float v : course::random_floats(10000, -2.0f, 3.0f, rng)) {
        ASSERT_GE(v, -2.0f);
        ASSERT_LE(v, 3.0f);
    }
    for (int v : course::random_ints(10000, -5, 5, rng)) {
        ASSERT_GE(v, -5);
        ASSERT_LE(v, 5);
    }
}

TEST(Rng, StreamsDifferByNameAndRunSeedIsStable) {
    EXPECT_NE(course::rng_for("a").next_u64(), course::rng_for("b").next_u64());
    EXPECT_EQ(course::rng_for("a").next_u64(), course::rng_for("a").next_u64());
    EXPECT_EQ(course::run_seed(), course::run_seed());
}

TEST(Summarize, MedianMinAndSpread) {
    const auto stats = course::summarize({5.0, 1.0, 3.0, 2.0, 4.0});
    EXPECT_DOUBLE_EQ(stats.median_ms, 3.0);
    EXPECT_DOUBLE_EQ(stats.min_ms, 1.0);
    EXPECT_EQ(stats.samples, 5);
    EXPECT_NEAR(stats.spread_pct, 100.0 * (5.0 - 1.0) / 3.0, 1e-9);
    EXPECT_DOUBLE_EQ(course::summarize({1.0, 2.0}).median_ms, 1.5);
    EXPECT_THROW(course::summarize({}), std::invalid_argument);
}

TEST(Rates, NapkinMath) {
    EXPECT_DOUBLE_EQ(course::gb_per_s(3e9, 1000.0), 3.0);     // 3 GB in 1 s
    EXPECT_DOUBLE_EQ(course::tflop_per_s(2e12, 1000.0), 2.0);  // 2 TFLOP in 1 s
}

}  // namespace
