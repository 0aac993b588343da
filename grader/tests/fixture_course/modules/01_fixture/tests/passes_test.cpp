// Checker of 01_fixture/passes: a correctness test and two timed cases with fixed numbers, in the
// properties the real harness records (course/bench.h: record_bandwidth). The fast reference
// defines fixture_speedup(), by which its figures are scaled; the other files do not.
#include <gtest/gtest.h>

#include <string>

#include "passes.h"

double fixture_speedup() __attribute__((weak));

namespace {

void record_perf(const std::string& label, double value, double baseline_value) {
    using testing::Test;
    if (fixture_speedup) value *= fixture_speedup();
    Test::RecordProperty("perf_label", label);
    Test::RecordProperty("perf_metric", "GB/s");
    Test::RecordProperty("perf_value", std::to_string(value));
    Test::RecordProperty("perf_baseline", "copy");
    Test::RecordProperty("perf_baseline_value", std::to_string(baseline_value));
    Test::RecordProperty("perf_ratio", std::to_string(value / baseline_value));
    Test::RecordProperty("perf_median_ms", "1.25");
    Test::RecordProperty("perf_min_ms", "1.2");
    Test::RecordProperty("perf_spread_pct", "2.5");
    Test::RecordProperty("perf_samples", 20);
    Test::RecordProperty("perf_baseline_median_ms", "1.1");
}

}  // namespace

TEST(Twice, DoublesItsInput) { EXPECT_EQ(twice(21), 42); }

TEST(Twice, SmallCase) {
    ASSERT_EQ(twice(1), 2);
    record_perf("n=2^10", 900.0, 1000.0);
}

TEST(Twice, LargeCase) {
    ASSERT_EQ(twice(2), 4);
    record_perf("n=2^20", 850.0, 1000.0);
}
