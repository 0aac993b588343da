// Checker of 01_fixture/todo.
#include <gtest/gtest.h>

#include "todo.h"

TEST(Twice, DoublesItsInput) { EXPECT_EQ(twice(21), 42); }
