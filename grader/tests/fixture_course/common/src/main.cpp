// main() of the fixture's checkers: the real harness's report channel (report_channel.h, copied
// in beside it by the tests), without the real main's GPU line.
#include <gtest/gtest.h>

#include "report_channel.h"

int main(int argc, char** argv) {
    course::report_channel::init_google_test(&argc, argv);
    return RUN_ALL_TESTS();
}
