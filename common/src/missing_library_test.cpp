// The checker of an exercise whose library this build lacks (cmake/Course.cmake,
// course_missing_library_exercise): its one test skips with the reason, which the grader shows.
// Neither the exercise's code nor its real checker compiles without the library's headers.
#include <gtest/gtest.h>

#ifndef COURSE_MISSING_LIBRARY
#error "COURSE_MISSING_LIBRARY: the reason, from course_missing_library_exercise()"
#endif

TEST(MissingLibrary, Skipped) {
    testing::Test::RecordProperty("skip_reason", COURSE_MISSING_LIBRARY);
    GTEST_SKIP() << COURSE_MISSING_LIBRARY;
}
