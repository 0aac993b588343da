// The cases past 2^31 elements, where a contract allows them: an index held in an int overflows
// there (at 2^31 - 1), one in an unsigned int at 2^32 - 1. Their buffers are gigabytes: the inputs
// are made on the device (course/hashed.h) and the output is compared in windows around the
// places 32-bit arithmetic breaks, against a reference the host computes for those windows only.
//
//   TEST_F(VectorAdd, MoreThan2To31Elements) {
//       const std::size_t n = (std::size_t{1} << 31) + 1027;
//       COURSE_LARGE_CASE(3 * n * sizeof(float));   // one large case at a time; skips with why
//       ...fill, run...
//       EXPECT_TRUE(course::expect_windows_close(d_c, course::windows_past_int_range(n, rng),
//                                                reference_of_window, tolerance, {"c"}));
//   }
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "course/buffer.h"
#include "course/compare.h"
#include "course/random.h"

namespace course {

// Elements [first, first + count) of an output.
struct Window {
    std::size_t first = 0;
    std::size_t count = 0;
};

// Windows of `width` elements of an output of `count` elements: its start, both sides of 2^29,
// 2^30, 2^31 and 2^32 where the output reaches them (a 4-byte element's byte offset overflows an
// int, an unsigned int; its index does), its end, and `random` windows anywhere; sorted, not
// overlapping.
std::vector<Window> windows_past_int_range(std::size_t count, Rng& rng, std::size_t width = 512,
                                           int random = 4);

// The same in whole rows of a rows x cols matrix: the first row, the rows holding elements
// 2^k - 1 and 2^k for k = 29, 30, 31, 32 where there are such, the last row, and `random` rows.
std::vector<Window> rows_past_int_range(std::size_t rows, std::size_t cols, Rng& rng,
                                        int random = 4);

// Compares the windows of `out` (downloaded one by one) with `reference(window)`, a vector of
// the exact values of that window, as one comparison whose messages name the elements' indices
// in the whole output (CompareOptions::indices), and say so when only those past 2^31 are wrong.
template <class T, class Reference>
testing::AssertionResult expect_windows_close(const DeviceBuffer<T>& out,
                                              const std::vector<Window>& windows,
                                              Reference reference, const Tolerance& tol,
                                              CompareOptions opt) {
    std::vector<T> got;
    decltype(reference(windows.front())) want;
    for (const Window& window : windows) {
        const auto part = out.download(window.first, window.count);
        const auto expected = reference(window);
        got.insert(got.end(), part.begin(), part.end());
        want.insert(want.end(), expected.begin(), expected.end());
        for (std::size_t i = 0; i < window.count; ++i) opt.indices.push_back(window.first + i);
    }
    return expect_close(got, want, tol, opt);
}

// A reference for expect_windows_close made of one vector with every window's exact values, in
// the windows' order (for a reference computed for all the compared rows at once). `all` must
// outlive the comparison.
template <class R>
auto consecutive_slices(const std::vector<R>& all) {
    return [&all, next = std::size_t{0}](const Window& w) mutable {
        const auto first = all.begin() + static_cast<std::ptrdiff_t>(next);
        next += w.count;
        return std::vector<R>(first, first + static_cast<std::ptrdiff_t>(w.count));
    };
}

// A reference for expect_windows_close made of the exact value of each element on its own,
// `value(index)` with the element's index in the whole output (for an output whose elements each
// have a closed form: one dot product of a GEMM, a sum of hashed inputs).
template <class Value>
auto element_by_element(Value value) {
    return [value](const Window& w) {
        std::vector<decltype(value(std::size_t{0}))> out(w.count);
        for (std::size_t i = 0; i < w.count; ++i) out[i] = value(w.first + i);
        return out;
    };
}

// Runs the code under test on a large case and waits for it. A CUDA error it causes (an index or
// a byte offset that overflowed and left the buffers: an illegal address) fails the test with a
// line that says so, as a plain failure: whether a wild address faults or lands in another buffer
// depends on the memory map, and both are the same mistake. The error is sticky (every later CUDA
// call of the process fails), so a checker puts its large cases last, and the later large cases
// skip (large_case_skip_reason) rather than crash over the first one's diagnosis.
void run_large_case(const std::function<void()>& call);

// Why a large case cannot run here, or nothing: an earlier large case left a sticky CUDA error,
// the device lacks `bytes` of free memory, or the buffers are exact (COURSE_EXACT_ALLOCATIONS,
// under compute-sanitizer, which would take minutes over gigabytes; the case runs in every plain
// run).
std::optional<std::string> large_case_skip_reason(std::size_t bytes);

// Whether this process holds the large-case lock (a large case is running).
bool large_case_running();

// Held while a large case runs: one at a time on this machine (a lock file in the temporary
// folder), so that checkers run side by side (the mutant runs of dev/accept.sh) never allocate
// tens of gigabytes each at once. Blocks until the previous one is done.
class LargeCaseLock {
  public:
    LargeCaseLock();
    ~LargeCaseLock();
    LargeCaseLock(const LargeCaseLock&) = delete;
    LargeCaseLock& operator=(const LargeCaseLock&) = delete;

  private:
    int descriptor_ = -1;
};

}  // namespace course

// The start of a large case: takes the machine's large-case lock for the rest of the test, then
// skips the test, with the reason recorded for the grader, where the case cannot run.
#define COURSE_LARGE_CASE(bytes)                                            \
    ::course::LargeCaseLock course_large_case_lock;                         \
    do {                                                                    \
        if (auto course_reason = ::course::large_case_skip_reason(bytes)) { \
            ::testing::Test::RecordProperty("skip_reason", *course_reason); \
            GTEST_SKIP() << *course_reason;                                 \
        }                                                                   \
    } while (0)
