#include "course/reference/reduce.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace {

using course::reference::histogram_256;
using course::reference::inclusive_scan;
using course::reference::inclusive_scan_per_tile;
using course::reference::sum;

TEST(ReferenceReduce, SumIsExactInDouble) {
    EXPECT_EQ(sum({}), 0.0);
    EXPECT_EQ(sum({1.5f, -2.0f, 4.0f}), 3.5);
    // 2^24 + 1 is not a float: a float accumulator would lose the 1, double keeps it.
    EXPECT_EQ(sum({16777216.0f, 1.0f}), 16777217.0);
}

TEST(ReferenceReduce, InclusiveScanDoesNotOverflow) {
    EXPECT_EQ(inclusive_scan({3, -1, 4, 1}), (std::vector<std::int64_t>{3, 2, 6, 7}));
    const int big = 2000000000;
    EXPECT_EQ(inclusive_scan({big, big}), (std::vector<std::int64_t>{big, 4000000000LL}));
}

TEST(ReferenceReduce, InclusiveScanPerTileRestartsAtEachTile) {
    // tiles of 3: {1, 2, 3} {4, 5, 6} {7} (the last tile is partial)
    EXPECT_EQ(inclusive_scan_per_tile({1, 2, 3, 4, 5, 6, 7}, 3),
              (std::vector<std::int64_t>{1, 3, 6, 4, 9, 15, 7}));
    EXPECT_EQ(inclusive_scan_per_tile({1, 2, 3}, 8), inclusive_scan({1, 2, 3}));
    EXPECT_THROW(inclusive_scan_per_tile({1}, 0), std::invalid_argument);
}

TEST(ReferenceReduce, HistogramCountsEveryByte) {
    const auto counts = histogram_256({0, 255, 7, 7, 7, 0});
    ASSERT_EQ(counts.size(), 256u);
    EXPECT_EQ(counts[0], 2u);
    EXPECT_EQ(counts[7], 3u);
    EXPECT_EQ(counts[255], 1u);
    std::uint64_t total = 0;
    for (auto c : counts) total += c;
    EXPECT_EQ(total, 6u);
    EXPECT_EQ(histogram_256({}), std::vector<std::uint64_t>(256, 0));
}

}  // namespace
