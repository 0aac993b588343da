// The runs of a race check compared bit for bit (course/repeated_runs.h).
#include "course/repeated_runs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace {

TEST(DifferingElements, CountsEachElementOnceWhereAnyRunDiffers) {
    const std::vector<std::vector<float>> runs{
        {1.0f, 2.0f, 3.0f, 4.0f}, {1.0f, 2.5f, 3.0f, 4.5f}, {1.0f, 2.0f, 3.5f, 4.5f}};
    // Elements 1, 2 and 3; the last differs in two runs, and counts once.
    EXPECT_EQ(course::differing_elements(runs), 3u);
}

TEST(DifferingElements, ComparesBitsNotValues) {
    const float nan = std::nanf("");
    EXPECT_EQ(course::differing_elements(std::vector<std::vector<float>>{{nan, 1.0f}, {nan, 1.0f}}),
              0u);  // NaN != NaN as a value, the same bits
    EXPECT_EQ(course::differing_elements(std::vector<std::vector<float>>{{0.0f}, {-0.0f}}),
              1u);  // 0 == -0 as a value, other bits
}

TEST(DifferingElements, OneRunAgreesWithItself) {
    EXPECT_EQ(course::differing_elements(std::vector<std::vector<int>>{{1, 2, 3}}), 0u);
}

}  // namespace
