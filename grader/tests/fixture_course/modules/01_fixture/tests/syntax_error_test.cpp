// Checker of 01_fixture/syntax_error.
#include <gtest/gtest.h>

#include "syntax_error.h"

TEST(Twice, DoublesItsInput) { EXPECT_EQ(twice(21), 42); }
