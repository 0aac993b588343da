// The checker of an exercise this build cannot compile (cmake/Course.cmake,
// course_missing_library_exercise: its library is missing; dev/emu/Emulate.cmake: the CPU emulator
// has no TMA, mbarriers or wgmma): its one test skips with the reason, which the grader shows.
// Neither the exercise's code nor its real checker compiles here. Its main() is the harness's
// report channel alone (report_channel.h): without the report, the grader would call the run a
// crash; the rest of common/src/main.cpp needs the CUDA runtime, which such a build may lack.
#include <gtest/gtest.h>

#include "report_channel.h"

#ifndef COURSE_MISSING_LIBRARY
#error "COURSE_MISSING_LIBRARY: the reason, from course_missing_library_exercise()"
#endif

TEST(MissingLibrary, Skipped) {
    testing::Test::RecordProperty("skip_reason", COURSE_MISSING_LIBRARY);
    GTEST_SKIP() << COURSE_MISSING_LIBRARY;
}

int main(int argc, char** argv) {
    course::report_channel::init_google_test(&argc, argv);
    return RUN_ALL_TESTS();
}
