// Checker of 01_fixture/segfault.
#include <gtest/gtest.h>

#include "segfault.h"

TEST(Twice, DoublesItsInput) { EXPECT_EQ(twice(21), 42); }
