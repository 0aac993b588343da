// Checker of 01_fixture/no_gpu: skips, as the real harness does without a GPU, when the grader's
// environment has FIXTURE_SKIP_REASON (which also proves the environment reaches the checker).
#include <gtest/gtest.h>

#include <cstdlib>

#include "no_gpu.h"

TEST(Twice, DoublesItsInput) {
    if (const char* reason = std::getenv("FIXTURE_SKIP_REASON")) {
        RecordProperty("skip_reason", reason);
        GTEST_SKIP() << reason;
    }
    EXPECT_EQ(twice(21), 42);
}
