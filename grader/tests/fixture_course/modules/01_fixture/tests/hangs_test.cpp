// Checker of 01_fixture/hangs.
#include <gtest/gtest.h>

#include "hangs.h"

TEST(Twice, DoublesItsInput) { EXPECT_EQ(twice(21), 42); }
