// The channel through which a checker's GoogleTest report reaches the grader (CONTRIBUTING.md,
// "The checker protocol"). Included by main() only.
//
// The grader opens a file of its own, lets the checker inherit its descriptor and sets
// COURSE_REPORT=<descriptor>:<nonce> (a random string, new for every run). Before the static
// initializers of the other files run, the harness takes the variable out of the environment;
// main() then has GoogleTest write its JSON report into that descriptor, the nonce in it. A
// report without the nonce was not written by the harness: the grader fails it. Nothing on the
// command line names the report, so the exercise's code finds no path to write one at.
// Without COURSE_REPORT (ctest, a checker run by hand) GoogleTest's own flags apply.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace course::report_channel {

constexpr const char* kVariable = "COURSE_REPORT";
constexpr const char* kNonceProperty = "course_report_nonce";

struct Channel {
    std::string descriptor;  // empty: no grader asked for a report
    std::string nonce;
};

inline Channel& channel() {
    static Channel taken;
    return taken;
}

// Priority 101 runs before every constructor of default priority, those of the exercise included.
__attribute__((constructor(101))) static void take_from_environment() {
    const char* value = std::getenv(kVariable);
    if (value == nullptr) return;
    const std::string text = value;
    unsetenv(kVariable);
    const std::size_t colon = text.find(':');
    if (colon == std::string::npos) return;
    channel() = {text.substr(0, colon), text.substr(colon + 1)};
}

// testing::InitGoogleTest, told to write its JSON report into the channel: the flag goes last, so
// it wins over any --gtest_output on the command line (GoogleTest reads its flags once, here).
inline void init_google_test(int* argc, char** argv) {
    const Channel& taken = channel();
    if (taken.descriptor.empty()) {
        testing::InitGoogleTest(argc, argv);
        return;
    }
    static std::string output_flag = "--gtest_output=json:/dev/fd/" + taken.descriptor;
    std::vector<char*> arguments(argv, argv + *argc);
    arguments.push_back(output_flag.data());
    int count = static_cast<int>(arguments.size());
    arguments.push_back(nullptr);
    testing::InitGoogleTest(&count, arguments.data());
    // Recorded outside any test: a top-level property of the report.
    testing::Test::RecordProperty(kNonceProperty, taken.nonce);
}

}  // namespace course::report_channel
