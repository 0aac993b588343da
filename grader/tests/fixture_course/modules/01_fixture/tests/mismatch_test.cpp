// Checker of 01_fixture/mismatch.
#include <gtest/gtest.h>

#include "mismatch.h"

TEST(Twice, DoublesItsInput) { EXPECT_EQ(twice(21), 42); }
