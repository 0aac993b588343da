#include "course/reference/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace {

using course::reference::softmax_causal;
using course::reference::softmax_row;
using course::reference::softmax_rows;

constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(ReferenceSoftmax, KnownRow) {
    // exp(0) : exp(ln 3) = 1 : 3
    const float row[] = {0.0f, static_cast<float>(std::log(3.0))};
    const auto out = softmax_row(row, 2);
    EXPECT_NEAR(out[0], 0.25, 1e-7);
    EXPECT_NEAR(out[1], 0.75, 1e-7);
}

TEST(ReferenceSoftmax, ShiftInvariantAndNoOverflow) {
    // exp(1e4) overflows even a double; subtracting the maximum makes it exp(0).
    const float big[] = {1e4f, 1e4f, 1e4f, 1e4f};
    for (double p : softmax_row(big, 4)) EXPECT_DOUBLE_EQ(p, 0.25);
    const float spread[] = {-1e4f, 0.0f, 1e4f};
    const auto out = softmax_row(spread, 3);
    EXPECT_EQ(out[0], 0.0);
    EXPECT_EQ(out[1], 0.0);
    EXPECT_EQ(out[2], 1.0);
}

TEST(ReferenceSoftmax, MinusInfinityContributesZero) {
    const float row[] = {-kInf, 2.0f, -kInf, 2.0f};
    const auto out = softmax_row(row, 4);
    EXPECT_EQ(out[0], 0.0);
    EXPECT_DOUBLE_EQ(out[1], 0.5);
    EXPECT_EQ(out[2], 0.0);
    EXPECT_DOUBLE_EQ(out[3], 0.5);
}

TEST(ReferenceSoftmax, RowsAreIndependent) {
    const std::vector<float> in{1.0f, 1.0f, 5.0f, -kInf};  // 2 x 2
    EXPECT_EQ(softmax_rows(in, 2, 2), (std::vector<double>{0.5, 0.5, 1.0, 0.0}));
}

TEST(ReferenceSoftmax, ScaleMultipliesBeforeExp) {
    const float row[] = {0.0f, 2.0f};
    const auto out = softmax_row(row, 2, 0.5);  // softmax of {0, 1}
    EXPECT_NEAR(out[1] / out[0], std::exp(1.0), 1e-12);
}

TEST(ReferenceSoftmax, CausalMasksAboveTheDiagonalWithoutReadingIt) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    // One 3 x 3 head; NaN above the diagonal must not leak into the result.
    const std::vector<float> scores{0.0f, nan, nan,      //
                                    2.0f, 2.0f, nan,     //
                                    0.0f, 0.0f, 4.0f};
    const auto out = softmax_causal(scores, 1, 3, 0.5);  // row 2: softmax of {0, 0, 2}
    const double e2 = std::exp(2.0), sum = 2.0 + e2;
    const std::vector<double> want{1.0, 0.0, 0.0, 0.5, 0.5, 0.0, 1.0 / sum, 1.0 / sum, e2 / sum};
    ASSERT_EQ(out.size(), want.size());
    for (std::size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(out[k], want[k], 1e-15) << k;
    EXPECT_EQ(out[1], 0.0);  // masked entries are exact zeros
    EXPECT_EQ(out[5], 0.0);
}

}  // namespace
