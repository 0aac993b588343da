// Checker of 01_fixture/cuda_error.
#include <gtest/gtest.h>

#include "cuda_error.h"

TEST(Twice, DoublesItsInput) { EXPECT_EQ(twice(21), 42); }
