#include "course/reference/block_sums.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace {

TEST(ReferenceBlockSums, WholeSlicesAndAPartialLastOne) {
    const std::vector<float> in{1, 2, 3, 4, 5, 6, 7};  // slices {1,2,3} {4,5,6} {7}
    EXPECT_EQ(course::reference::block_sums(in, 3), (std::vector<double>{6, 15, 7}));
}

TEST(ReferenceBlockSums, ExactMultipleHasNoExtraSlice) {
    const std::vector<float> in{1, -1, 2, -2};
    EXPECT_EQ(course::reference::block_sums(in, 2), (std::vector<double>{0, 0}));
    EXPECT_EQ(course::reference::block_sums(in, 4), (std::vector<double>{0}));
}

TEST(ReferenceBlockSums, SliceLongerThanInput) {
    EXPECT_EQ(course::reference::block_sums({0.5f}, 512), (std::vector<double>{0.5}));
    EXPECT_TRUE(course::reference::block_sums({}, 512).empty());
}

TEST(ReferenceBlockSums, AccumulatesInDouble) {
    // 2^24 + 1 is not a float: a float accumulator would lose the last 1.
    std::vector<float> in{16777216.0f, 1.0f};
    EXPECT_EQ(course::reference::block_sums(in, 2), (std::vector<double>{16777217.0}));
}

TEST(ReferenceBlockSums, RejectsAnEmptySlice) {
    EXPECT_THROW(course::reference::block_sums({1.0f}, 0), std::invalid_argument);
}

}  // namespace
