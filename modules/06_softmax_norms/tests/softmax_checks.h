// What the softmax checkers of module 06 share: the tolerance and its derivation, the row checks
// ("every row is a probability distribution") with messages that name the likely bug, and, for
// softmax_naive, softmax_block and softmax_online (one contract, three implementations), the
// whole list of cases. Each checker is then a list of TEST_Fs calling these.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/softmax.h"
#include "course/testing.h"

namespace softmax_checks {

constexpr double kUnitRoundoff = 0x1.0p-24;  // u: float32 rounds to within a relative 2^-24
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// How far a float32 softmax may be from the exact one, for rows of `row_length` entries.
// An output is y_j = e_j / S with e_j = expf(x_j - max) and S the float sum of the row's e's.
//  - S: a float sum of row_length positive terms. Its rounding error is a random walk of about
//    sqrt(n) roundings of the running sum; 8 u sqrt(n) covers any summation order (a thread's
//    sequential loop, a shuffle tree), the same margin as Tolerance::float32.
//  - e_j: expf is within 2 ulp (4u relative); the division or the multiply by 1 / S and the final
//    rounding of y_j add 2u. Together 6u.
//  - x_j - max is rounded too, by up to u |x_j - max|, which exp turns into a relative error
//    u |x_j - max| of e_j. Large only where e_j is tiny: its absolute effect on y_j is at most
//    u * max_t(t e^-t) = u / e (S >= 1, since the largest term is exp(0) = 1). With the similar
//    slack of other exp implementations this is the absolute term, atol = 2u.
//  - Causal softmax scales first: a kernel computing expf(scale * s_j - max) rounds scale * s_j,
//    a relative error of u |scale * s_j| in e_j; `largest_scaled_input` (max |scale * s|) adds it.
// A missing or doubled term changes S by a whole term, far outside this for short rows; for long
// rows the cases with one dominant element catch it instead (see dominant_element_rows).
inline course::Tolerance softmax_tolerance(std::size_t row_length,
                                           double largest_scaled_input = 0.0) {
    const double sum_error = 8.0 * std::sqrt(static_cast<double>(row_length));
    return {2.0 * kUnitRoundoff, kUnitRoundoff * (sum_error + 6.0 + largest_scaled_input)};
}

inline std::string number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.7g", value);
    return text;
}

inline std::string replay_note() {
    return "inputs from seed " + std::to_string(course::run_seed()) +
           ": GRADER_SEED=" + std::to_string(course::run_seed()) + " replays them";
}

// Row r of `got` (rows x cols, row-major) must hold a probability distribution in its first
// live(r) columns and exact zeros after them. The sum of a row may be off by twice tol.rtol: the
// errors of the exponentials cancel in the normalization, what remains is the rounding of the sum
// S (within tol.rtol) and, in an online softmax, of the factors that rescale partial sums (a few
// ulp each, a dozen times at most). Reports the first few bad rows, each with the symptom that
// points at the bug.
inline testing::AssertionResult rows_are_distributions(
    const std::vector<float>& got, std::size_t rows, std::size_t cols, const course::Tolerance& tol,
    const std::string& name, const std::function<std::size_t(std::size_t)>& live = nullptr) {
    constexpr int kShow = 3;
    int bad_rows = 0;
    std::string report;
    for (std::size_t r = 0; r < rows; ++r) {
        const float* row = got.data() + r * cols;
        const std::size_t live_cols = live ? live(r) : cols;
        const std::string where =
            "`" + name + "` row " + std::to_string(r) +
            (live ? " (live columns 0.." + std::to_string(live_cols - 1) + ")" : "");
        std::string problem;
        double sum = 0.0;
        for (std::size_t c = 0; c < cols && problem.empty(); ++c) {
            const float value = row[c];
            if (course::is_poison(value)) {
                problem = where + ": column " + std::to_string(c) +
                          " was never written (it still holds the NaN poison)";
            } else if (c >= live_cols && value != 0.0f) {
                problem = where + ": column " + std::to_string(c) +
                          " is masked and must be exactly 0, got " + number(value) +
                          ". Is the masked part written as 0?";
            } else if (!std::isfinite(value)) {
                problem =
                    where + ": column " + std::to_string(c) + " is " + number(value) +
                    " (non-finite). Either expf overflowed (it does past 88.7; is the row maximum "
                    "subtracted first, and does the maximum cover every live entry?) or the sum "
                    "you "
                    "divide by is 0 (does it cover the whole row?)";
            } else {
                sum += value;
            }
        }
        if (problem.empty() && std::fabs(sum - 1.0) > 2.0 * tol.rtol) {
            problem =
                where + " sums to " + number(sum) + ", not 1 (allowed error " +
                number(2.0 * tol.rtol) + "): " +
                (sum > 1.0 ? "the sum you divide by is too small: is a part of the row (a tail, "
                             "a warp's partial) missing from the sum?"
                           : "the sum you divide by is too large: are terms counted twice, or "
                             "taken against different maxima without rescaling?");
        }
        if (problem.empty()) continue;
        if (++bad_rows <= kShow) report += "  " + problem + "\n";
    }
    if (bad_rows == 0) return testing::AssertionSuccess();
    return testing::AssertionFailure() << bad_rows << " of " << rows << " rows of `" << name
                                       << "` are not probability distributions:\n"
                                       << report << "  " << replay_note();
}

// For outputs too large for a full CPU reference: the first and last rows and `count` random
// ones, each compared with its reference row. Stops at the first wrong row.
inline testing::AssertionResult sampled_rows_match(
    const std::vector<float>& got, std::size_t rows, std::size_t cols, const course::Tolerance& tol,
    const std::string& name, const std::function<std::vector<double>(std::size_t)>& reference_row,
    course::Rng& rng, int count = 30) {
    std::vector<std::size_t> sample{0, rows - 1};
    for (int k = 0; k < count; ++k)
        sample.push_back(
            static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(rows) - 1)));
    for (std::size_t r : sample) {
        const std::vector<float> row(got.begin() + r * cols, got.begin() + (r + 1) * cols);
        auto result =
            course::expect_close(row, reference_row(r), tol, {name + " row " + std::to_string(r)});
        if (!result) return result;
    }
    return testing::AssertionSuccess();
}

// ---- The cases of the plain softmax contract (softmax_naive, softmax_block, softmax_online) ----

using Softmax = void (*)(const float* in, float* out, int rows, int cols);

// "" when two runs on the same inputs gave the same bits, else what that says: a race.
inline std::string race_diagnosis(const std::vector<float>& first,
                                  const std::vector<float>& second) {
    std::size_t differing = 0;
    for (std::size_t i = 0; i < first.size(); ++i)
        differing += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
    if (differing == 0) return "";
    return "the output differs between two identical runs at " + std::to_string(differing) +
           " of " + std::to_string(first.size()) +
           " elements: a race. Does a thread read shared memory that another warp writes "
           "without a __syncthreads() between them (the posted partials, a reused array)?";
}

// Runs `softmax` on `in` (rows x cols) twice and checks everything: each row a distribution, each
// element close to the double reference, the same bits both times, nothing written outside
// `out`. A race shows as results that change from run to run, named before the numbers.
inline void check_softmax(Softmax softmax, const std::vector<float>& in, std::size_t rows,
                          std::size_t cols) {
    course::DeviceBuffer<float> d_in("in", in), d_out("out", rows * cols);
    const auto run = [&] {
        d_out.poison();
        softmax(d_in.data(), d_out.data(), static_cast<int>(rows), static_cast<int>(cols));
        return d_out.download();
    };
    const auto got = run(), again = run();
    const std::string race = race_diagnosis(got, again);
    const auto tol = softmax_tolerance(cols);
    course::CompareOptions options{"out", course::Matrix{rows, cols}};
    options.diagnose = [&] { return race; };
    if (race.empty()) EXPECT_TRUE(rows_are_distributions(got, rows, cols, tol, "out"));
    EXPECT_TRUE(
        course::expect_close(got, course::reference::softmax_rows(in, rows, cols), tol, options));
    // A race can stay within the tolerance on both runs: still a bug.
    EXPECT_TRUE(race.empty()) << race;
}

// Row lengths around every boundary a kernel has: 1 (a row is one element), 7 and 31 (shorter
// than a warp, not a multiple of 4), 32 and 33 (a warp, and one more), 1000, 1023 and 1024 (up
// to the longest row a warp handles well), 4097 (long and odd), 32768 and 50304 (GPT-2's
// vocabulary, padded to a multiple of 64; split over a cluster of blocks on Hopper), 50001 (long
// and odd: the scalar path, uneven slices), 70001 (a cluster of three on Hopper, more than one
// block's shared memory before it), 204803 (more than a cluster holds: read twice). 37 rows: not
// a multiple of the rows a block holds.
inline void edge_columns(Softmax softmax, course::Rng& rng) {
    for (std::size_t cols :
         {1, 7, 31, 32, 33, 1000, 1023, 1024, 4097, 32768, 50304, 50001, 70001, 204803}) {
        const std::size_t rows = cols <= 1024 ? 37 : 3;
        SCOPED_TRACE("rows = " + std::to_string(rows) + ", cols = " + std::to_string(cols));
        check_softmax(softmax, course::random_floats(rows * cols, -5.0f, 5.0f, rng), rows, cols);
    }
}

// Many short rows: many blocks, and a last block only partly used (4099 is prime).
inline void many_rows(Softmax softmax, course::Rng& rng) {
    for (std::size_t cols : {33, 260}) {
        const std::size_t rows = 4099;
        SCOPED_TRACE("rows = " + std::to_string(rows) + ", cols = " + std::to_string(cols));
        check_softmax(softmax, course::random_floats(rows * cols, -5.0f, 5.0f, rng), rows, cols);
    }
}

// 2^20 rows of 3: more than the 65535 blocks a grid holds along y (a block per row there fails).
inline void most_rows(Softmax softmax, course::Rng& rng) {
    COURSE_SKIP_ON_EMULATOR("2^20 rows");
    const std::size_t rows = std::size_t{1} << 20, cols = 3;
    SCOPED_TRACE("rows = 2^20, cols = 3");
    check_softmax(softmax, course::random_floats(rows * cols, -5.0f, 5.0f, rng), rows, cols);
}

// The contract's rows * cols < 2^31 at its end: 41942 rows of 51200 = 2^31 - 53248 floats, past
// 2^30 (4 bytes each: a byte offset held in 32 bits wraps, at element 2^29 when signed). The
// input is made on the device; whole rows are compared (the first and last, those around
// elements 2^29 and 2^30, random ones). A large case: last in a checker.
inline void largest(Softmax softmax, course::Rng& rng) {
    const std::size_t rows = 41942, cols = 51200, n = rows * cols;
    COURSE_LARGE_CASE(2 * n * sizeof(float) + (64u << 20));
    SCOPED_TRACE("rows = 41942, cols = 51200 (2^31 - 53248 elements), in made on the device");
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> d_in("in", n), d_out("out", n);
    course::fill_uniform(d_in.data(), n, seed, -5.0f, 5.0f);
    course::run_large_case([&] {
        softmax(d_in.data(), d_out.data(), static_cast<int>(rows), static_cast<int>(cols));
    });
    const auto reference = [&](const course::Window& w) {  // whole rows
        std::vector<double> want;
        std::vector<float> row(cols);
        for (std::size_t r = w.first / cols; r < (w.first + w.count) / cols; ++r) {
            for (std::size_t c = 0; c < cols; ++c)
                row[c] = course::hashed::uniform(r * cols + c, seed, -5.0f, 5.0f);
            const auto p = course::reference::softmax_row(row.data(), cols);
            want.insert(want.end(), p.begin(), p.end());
        }
        return want;
    };
    EXPECT_TRUE(course::expect_windows_close(d_out, course::rows_past_int_range(rows, cols, rng),
                                             reference, softmax_tolerance(cols), {"out"}));
}

// One row per position p: 1e4 at column p, the rest in [-5, 5]. The output is exactly one-hot at
// p, but only if column p takes part in all three steps: left out of the maximum, expf(1e4 - 5)
// overflows; left out of the sum, the sum is 0; left out of the write, it keeps the poison. The
// positions are where loops start and end: the first columns, vector (4), warp (32 floats, 32
// float4) and block (1024 float4) strides, the middle, and the last five.
inline std::vector<float> dominant_element_rows(const std::vector<std::size_t>& positions,
                                                std::size_t cols, course::Rng& rng) {
    auto in = course::random_floats(positions.size() * cols, -5.0f, 5.0f, rng);
    for (std::size_t r = 0; r < positions.size(); ++r) in[r * cols + positions[r]] = 1e4f;
    return in;
}

inline std::vector<std::size_t> boundary_positions(std::size_t cols) {
    std::vector<std::size_t> positions;
    for (std::size_t p : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{4},
                          std::size_t{31}, std::size_t{32}, std::size_t{127}, std::size_t{128},
                          std::size_t{4095}, std::size_t{4096}, cols / 2})
        if (p < cols) positions.push_back(p);
    for (std::size_t back = std::min<std::size_t>(cols, 5); back > 0; --back)
        positions.push_back(cols - back);
    std::sort(positions.begin(), positions.end());
    positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
    return positions;
}

inline void dominant_element(Softmax softmax, course::Rng& rng) {
    for (std::size_t cols : {1, 7, 33, 1000, 1024, 4097, 4100, 50304}) {
        const auto positions = boundary_positions(cols);
        SCOPED_TRACE("cols = " + std::to_string(cols) + ", one row per position of the 1e4 entry");
        check_softmax(softmax, dominant_element_rows(positions, cols, rng), positions.size(), cols);
    }
}

// Rows a naive exp overflows on, and -inf entries (masked logits).
inline std::vector<float> extreme_rows(std::size_t cols, course::Rng& rng) {
    std::vector<std::vector<float>> rows;
    rows.push_back(course::random_floats(cols, -1e4f, 1e4f, rng));  // huge spread: one-hot-ish
    rows.push_back(std::vector<float>(cols, 1e4f));                 // equal and huge: 1 / cols each
    rows.push_back(std::vector<float>(cols, -1e4f));                // equal and very negative
    rows.push_back(std::vector<float>(cols, 3.5f));                 // equal
    auto half_masked = course::random_floats(cols, -5.0f, 5.0f, rng);  // about half -inf
    for (std::size_t c = 1; c < cols; ++c)
        if (rng.uniform01() < 0.5) half_masked[c] = kMinusInf;
    rows.push_back(half_masked);
    std::vector<float> last_only(cols, kMinusInf), first_only(cols, kMinusInf);
    last_only[cols - 1] = 2.0f;  // all -inf except the last column
    first_only[0] = -3.0f;       // all -inf except the first column
    rows.push_back(last_only);
    rows.push_back(first_only);
    auto one_huge = course::random_floats(cols, -5.0f, 5.0f, rng);  // one huge logit
    one_huge[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(cols) - 1))] =
        1e4f;
    rows.push_back(one_huge);
    std::vector<float> in;
    for (const auto& row : rows) in.insert(in.end(), row.begin(), row.end());
    return in;
}

constexpr std::size_t kExtremeRows = 8;

inline void extreme_inputs(Softmax softmax, course::Rng& rng) {
    for (std::size_t cols : {1, 33, 1000, 4097, 4100}) {
        SCOPED_TRACE("cols = " + std::to_string(cols) +
                     "; rows: +-1e4 spread, all 1e4, all -1e4, all equal, half -inf, "
                     "-inf but the last, -inf but the first, one 1e4");
        check_softmax(softmax, extreme_rows(cols, rng), kExtremeRows, cols);
    }
}

// Pointers one float past an aligned address: rows start 4 bytes off a 16-byte boundary even
// though cols is a multiple of 4, so a float4 load there faults ("misaligned address").
inline void misaligned(Softmax softmax, course::Rng& rng) {
    for (std::size_t cols : {1024, 4096}) {
        const std::size_t rows = 5, n = rows * cols;
        SCOPED_TRACE("in and out one float past an aligned address; rows = 5, cols = " +
                     std::to_string(cols));
        const auto in = course::random_floats(n, -5.0f, 5.0f, rng);
        std::vector<float> padded_in(1, 0.0f);
        padded_in.insert(padded_in.end(), in.begin(), in.end());
        course::DeviceBuffer<float> d_in("in", padded_in), d_out("out", n + 1);
        softmax(d_in.data() + 1, d_out.data() + 1, static_cast<int>(rows), static_cast<int>(cols));
        const auto padded_got = d_out.download();
        EXPECT_TRUE(course::is_poison(padded_got[0]))
            << "wrote before the start of `out`: the float just before out[0] changed";
        const std::vector<float> got(padded_got.begin() + 1, padded_got.end());
        const auto tol = softmax_tolerance(cols);
        EXPECT_TRUE(rows_are_distributions(got, rows, cols, tol, "out"));
        EXPECT_TRUE(course::expect_close(got, course::reference::softmax_rows(in, rows, cols), tol,
                                         {"out", course::Matrix{rows, cols}}));
    }
}

enum class Baseline { copy, cudnn };

// Times `softmax` on a rows x cols matrix against a device copy of it, or against cuDNN's
// softmax, then checks the timed output: every row a distribution, sampled rows against the
// reference.
inline void perf(Softmax softmax, std::size_t rows, std::size_t cols, Baseline baseline,
                 course::Rng& rng) {
    const std::size_t n = rows * cols;
    // in, out, the baseline's output and the harness's two copies of out, plus room for the L2
    // flush buffer and cuDNN.
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(float) + (512u << 20));
    if (baseline == Baseline::cudnn && !course::baseline::cudnn_available()) {
        const std::string reason =
            "cuDNN is not available (built without it, or no cuDNN handle on this machine)";
        ::testing::Test::RecordProperty("skip_reason", reason);
        GTEST_SKIP() << reason;
    }
    const auto in = course::random_floats(n, -5.0f, 5.0f, rng);
    course::DeviceBuffer<float> d_in("in", in), d_out("out", n), d_baseline("baseline_out", n);
    const int r = static_cast<int>(rows), c = static_cast<int>(cols);
    const auto tol = softmax_tolerance(cols);

    const auto timing = course::time_against(
        [&] { softmax(d_in.data(), d_out.data(), r, c); },
        [&] {
            if (baseline == Baseline::copy)
                course::baseline::device_copy(d_baseline.data(), d_in.data(), n * sizeof(float));
            else
                course::baseline::cudnn_softmax(d_in.data(), d_baseline.data(), r, c);
        },
        {course::TimedOutput(d_out, tol)}, {course::TimedInput(d_in)});

    // The timed output must be right too: all rows, and 32 of them element by element.
    const auto got = d_out.download();
    EXPECT_TRUE(rows_are_distributions(got, rows, cols, tol, "out"));
    EXPECT_TRUE(sampled_rows_match(
        got, rows, cols, tol, "out",
        [&](std::size_t row) {
            return course::reference::softmax_row(in.data() + row * cols, cols);
        },
        rng));

    // Device memory must at least read the matrix once and write it once: 4 + 4 bytes per
    // element (the second and third reads of a row are free when they hit L1/L2/shared memory).
    // The copy moves the same 8 bytes per element; cuDNN does the same softmax.
    const double bytes = 8.0 * static_cast<double>(n);
    course::record_bandwidth(std::to_string(rows) + "x" + std::to_string(cols), timing, bytes,
                             baseline == Baseline::copy ? "copy" : "cudnn_softmax", bytes);
}

}  // namespace softmax_checks
