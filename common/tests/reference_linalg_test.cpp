#include "course/reference/linalg.h"

#include <gtest/gtest.h>

namespace {

TEST(ReferenceLinalg, MatmulOfKnownMatrices) {
    // [1 2 3]   [1 0]   [ 4  5]
    // [4 5 6] * [0 1] = [10 11]
    //           [1 1]
    const std::vector<float> A{1, 2, 3, 4, 5, 6}, B{1, 0, 0, 1, 1, 1};
    EXPECT_EQ(course::reference::matmul(A, B, 2, 2, 3), (std::vector<double>{4, 5, 10, 11}));
    EXPECT_DOUBLE_EQ(course::reference::matmul_element(A, B, 2, 3, 1, 0), 10.0);
}

TEST(ReferenceLinalg, MatmulWithTheSecondOperandTransposed) {
    // The product above with B given as its transpose (N x K): the same C.
    const std::vector<float> A{1, 2, 3, 4, 5, 6}, B_t{1, 0, 1, 0, 1, 1};
    EXPECT_EQ(course::reference::matmul_abt(A, B_t, 2, 2, 3), (std::vector<double>{4, 5, 10, 11}));
    EXPECT_DOUBLE_EQ(course::reference::matmul_abt_element(A, B_t, 3, 1, 1), 11.0);
}

TEST(ReferenceLinalg, TransposeOfARectangle) {
    const std::vector<float> in{1, 2, 3, 4, 5, 6};  // 2 x 3
    EXPECT_EQ(course::reference::transpose(in, 2, 3), (std::vector<float>{1, 4, 2, 5, 3, 6}));
}

}  // namespace
