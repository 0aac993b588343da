// The comparison must pass right answers, fail wrong ones, and say what kind of wrong.
#include "course/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using course::CompareOptions;
using course::Tolerance;

std::vector<float> iota(std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = 1.0f + static_cast<float>(i);
    return v;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

float poison() {
    float value;
    const auto pattern = course::poison_pattern<float>();
    std::memcpy(&value, &pattern, sizeof value);
    return value;
}

TEST(Compare, AcceptsAnExactMatch) {
    const auto want = iota(100);
    EXPECT_TRUE(course::expect_close(want, as_double(want), Tolerance::float32()));
}

TEST(Compare, AcceptsRoundingWithinTolerance) {
    auto got = iota(100);
    const auto want = as_double(got);
    for (float& v : got) v = std::nextafter(v, 1e9f);  // one ulp off everywhere
    EXPECT_TRUE(course::expect_close(got, want, Tolerance::float32()));
}

TEST(Compare, RejectsAndCountsWrongElements) {
    auto got = iota(100);
    const auto want = as_double(got);
    got[7] += 0.5f;
    got[42] = -1.0f;
    const auto result = course::expect_close(got, want, Tolerance::float32(), {"c"});
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("`c`: 2 of 100 elements are wrong"));
    EXPECT_THAT(result.message(), testing::HasSubstr("[7] got 8.5, want 8"));
    EXPECT_THAT(result.message(), testing::HasSubstr("GRADER_SEED="));
}

TEST(Compare, NamesAMissingTail) {
    auto got = iota(1000);
    const auto want = as_double(got);
    for (std::size_t i = 997; i < 1000; ++i) got[i] = poison();
    const auto result = course::expect_close(got, want, Tolerance::float32());
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("never written"));
    EXPECT_THAT(result.message(), testing::HasSubstr("every element from [997] to the end"));
}

TEST(Compare, NamesAGridCappedWithoutAStrideLoop) {
    auto got = iota(100000);
    const auto want = as_double(got);
    for (std::size_t i = 4096; i < got.size(); ++i) got[i] = poison();  // 16 blocks of 256 only
    const auto result = course::expect_close(got, want, Tolerance::float32());
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("as if a grid of 4096 threads"));
    EXPECT_THAT(result.message(), testing::HasSubstr("grid-stride loop"));
}

TEST(Compare, NaNNeverPassesAndAllZerosIsNamed) {
    std::vector<float> zeros(10, 0.0f);
    const auto result = course::expect_close(zeros, as_double(iota(10)), Tolerance::float32());
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("the output is all zeros"));

    std::vector<float> nan(10, std::numeric_limits<float>::quiet_NaN());
    EXPECT_FALSE(course::expect_close(nan, as_double(iota(10)), Tolerance{1e9, 1e9}));
}

TEST(Compare, MatrixMessagesUseRowsAndColumns) {
    const std::size_t rows = 4, cols = 10;
    auto got = iota(rows * cols);
    const auto want = as_double(got);
    for (std::size_t r = 0; r < rows; ++r) got[r * cols + 9] = poison();  // last column unwritten
    CompareOptions options{"C", course::Matrix{rows, cols}};
    const auto result = course::expect_close(got, want, Tolerance::float32(), options);
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("(0, 9) got NaN/poison"));
    EXPECT_THAT(result.message(), testing::HasSubstr("only the last columns are wrong"));
}

TEST(Compare, TheDiagnosisComesBeforeTheElements) {
    auto got = iota(100);
    const auto want = as_double(got);
    for (std::size_t i = 0; i < 100; i += 2) got[i] = 0.0f;
    CompareOptions options{"c"};
    options.diagnose = [] { return std::string("likely cause: every other element"); };
    const auto result = course::expect_close(got, want, Tolerance::float32(), options);
    ASSERT_FALSE(result);
    const std::string message = result.message();
    const auto count = message.find("50 of 100"), diagnosis = message.find("likely cause"),
               element = message.find("[0] got 0");
    ASSERT_NE(diagnosis, std::string::npos);
    ASSERT_NE(element, std::string::npos);
    EXPECT_LT(count, diagnosis);
    EXPECT_LT(diagnosis, element);
}

TEST(Compare, ADiagnosisIsAskedForOnlyOnAFailure) {
    const auto want = iota(10);
    CompareOptions options;
    options.diagnose = []() -> std::string { throw std::logic_error("asked on a pass"); };
    EXPECT_TRUE(course::expect_close(want, as_double(want), Tolerance::float32(), options));
}

TEST(Compare, NamesANaNThatIsNotThePoison) {
    auto got = iota(10);
    got[3] = std::numeric_limits<float>::quiet_NaN();
    const auto result = course::expect_close(got, as_double(iota(10)), Tolerance::float32());
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("1 of them are NaN: did a load read past"));
    EXPECT_THAT(result.message(), testing::Not(testing::HasSubstr("never written")));
}

TEST(Compare, SampledElementsAreNamedByTheirIndexInTheWholeOutput) {
    // Windows around 0, 2^31 and the end of an output of 2^31 + 100 elements, wrong from 2^31 on.
    const std::size_t two_to_31 = std::size_t{1} << 31;
    std::vector<std::size_t> indices;
    for (std::size_t i = 0; i < 4; ++i) indices.push_back(i);
    for (std::size_t i = two_to_31 - 4; i < two_to_31 + 4; ++i) indices.push_back(i);
    for (std::size_t i = two_to_31 + 96; i < two_to_31 + 100; ++i) indices.push_back(i);
    std::vector<float> got(indices.size(), 1.0f);
    const std::vector<double> want(indices.size(), 1.0);
    for (std::size_t k = 0; k < indices.size(); ++k)
        if (indices[k] >= two_to_31) got[k] = poison();
    CompareOptions options{"c"};
    options.indices = indices;
    const auto result = course::expect_close(got, want, Tolerance::exact(), options);
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("8 of 16 elements compared are wrong"));
    EXPECT_THAT(result.message(), testing::HasSubstr("first wrong one is [2147483648]"));
    EXPECT_THAT(result.message(), testing::HasSubstr("32-bit int arithmetic overflows there"));
    EXPECT_THAT(result.message(), testing::HasSubstr("[2147483648] got NaN/poison"));
}

TEST(Compare, OnlyElementsPastAByteOffsetsLimitWrongAreNamedSo) {
    // Rows of C around elements 0, 2^29, 2^30 and the end: wrong from 2^30 on, where the byte
    // offset of a float, 4 x 2^30, leaves a 32-bit unsigned int.
    const std::size_t two_to_29 = std::size_t{1} << 29, two_to_30 = std::size_t{1} << 30;
    std::vector<std::size_t> indices{0, 1, two_to_29, two_to_29 + 1, two_to_30, two_to_30 + 1};
    std::vector<float> got{1.0f, 1.0f, 1.0f, 1.0f, 7.0f, 7.0f};
    CompareOptions options{"C"};
    options.indices = indices;
    auto result =
        course::expect_close(got, std::vector<double>(6, 1.0), Tolerance::exact(), options);
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::HasSubstr("below index 2^30 = 1073741824 is right"));
    EXPECT_THAT(result.message(), testing::HasSubstr("4 x 2^30 = 2^32 bytes) computed in 32-bit "
                                                     "unsigned arithmetic overflows there"));
    // Wrong from 2^29 on: a byte offset in an int.
    got[2] = got[3] = 7.0f;
    result = course::expect_close(got, std::vector<double>(6, 1.0), Tolerance::exact(), options);
    EXPECT_THAT(result.message(), testing::HasSubstr("4 x 2^29 = 2^31 bytes) computed in 32-bit "
                                                     "int arithmetic overflows there"));
}

TEST(Compare, WrongPastAnUnsignedLimitAndAtTheStartIsNamedAWrap) {
    // A byte offset in 32-bit unsigned: C's elements from 2^30 on are written 2^30 elements
    // earlier, over the start of C; those just below 2^30 (past the wrapped ones) stay right.
    const std::size_t two_to_30 = std::size_t{1} << 30;
    CompareOptions options{"C"};
    options.indices = {0, 1, two_to_30 - 1, two_to_30, two_to_30 + 1};
    const std::vector<float> got{7.0f, 7.0f, 1.0f, 7.0f, 7.0f};
    const auto result =
        course::expect_close(got, std::vector<double>(5, 1.0), Tolerance::exact(), options);
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(),
                testing::HasSubstr("at or past index 2^30 = 1073741824 is wrong, and elements "
                                   "near the start too"));
    EXPECT_THAT(result.message(), testing::HasSubstr("computed in 32-bit unsigned arithmetic "
                                                     "wraps there"));
}

TEST(Compare, NoOverflowDiagnosisWhenElementsBelow2To31AreWrongToo) {
    const std::size_t two_to_31 = std::size_t{1} << 31;
    CompareOptions options{"c"};
    options.indices = {0, 1, two_to_31, two_to_31 + 1};
    const std::vector<float> got{1.0f, 5.0f, 5.0f, 5.0f};
    const auto result =
        course::expect_close(got, std::vector<double>(4, 1.0), Tolerance::exact(), options);
    ASSERT_FALSE(result);
    EXPECT_THAT(result.message(), testing::Not(testing::HasSubstr("overflows")));
}

TEST(Compare, IntegersMustMatchExactly) {
    std::vector<int> got{1, 2, 3}, want{1, 2, 4};
    EXPECT_FALSE(course::expect_equal(got, want));
    EXPECT_TRUE(course::expect_equal(want, want));
}

TEST(Tolerance, GrowsWithTheReductionLengthButNotToAMissingTerm) {
    const Tolerance short_sum = Tolerance::float32(16), long_sum = Tolerance::float32(4096);
    EXPECT_LT(short_sum.rtol, long_sum.rtol);
    // A dot product of K = 4096 terms of magnitude ~0.25: dropping one term must fail.
    const Tolerance dot = Tolerance::float32(4096, 0.25);
    EXPECT_FALSE(dot.accepts(10.0 + 0.25, 10.0));
    EXPECT_TRUE(dot.accepts(10.0 + 1e-5, 10.0));
}

}  // namespace
