// Comparing a device result with a CPU reference, and saying what is wrong in words a learner
// can act on: how many elements, the first few with their index, whether they were never
// written, and where they lie (the tail, the last partial tile, whole rows or columns).
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "course/host_device.h"
#include "course/poison.h"

namespace course {

// An element passes when |got - want| <= atol + rtol * |want|.
struct Tolerance {
    double atol = 0.0;
    double rtol = 0.0;

    static Tolerance exact() { return {}; }

    // A float32 result computed from `terms` float32 values whose typical magnitude is
    // `magnitude` (for a dot product: the typical |a_k * b_k|). Rounding errors of a sum of K
    // terms behave like a random walk: about sqrt(K) unit roundoffs (2^-24) of the running sum.
    // 8x that leaves room for any summation order and for fused multiply-adds, while a single
    // missing or doubled term (error ~ magnitude) stays far outside it for every K we test.
    static Tolerance float32(std::size_t terms = 1, double magnitude = 1.0) {
        const double unit_roundoff = 0x1.0p-24;
        const double rtol = 8.0 * unit_roundoff * std::sqrt(static_cast<double>(terms));
        return {rtol * magnitude * std::sqrt(static_cast<double>(terms)), rtol};
    }

    // On the device too: the harness checks every timed call's output there (course/bench.h).
    COURSE_HOST_DEVICE bool accepts(double got, double want) const {
        if (std::isnan(want)) return std::isnan(got);
        if (std::isinf(want)) return got == want;
        return std::fabs(got - want) <= atol + rtol * std::fabs(want);  // false for NaN got
    }
    std::string describe() const;
};

// Where the elements live, for messages in (row, col) terms. `cols` is the logical row length;
// the compared vectors are dense (row stride = cols).
struct Matrix {
    std::size_t rows = 0;
    std::size_t cols = 0;
};

struct CompareOptions {
    std::string name = "out";      // the buffer's name in messages
    std::optional<Matrix> matrix;  // report (row, col) and row/column patterns
    std::size_t show = 5;          // how many wrong elements to list
    // What the checker can tell about a wrong output that the comparison cannot (the bins were
    // never zeroed, the first wrong element starts a tile): called only on a failure, and shown
    // right after the count, before the harness's own patterns and the list of elements, so that
    // it is among the first lines a learner reads. Return "" when nothing applies.
    std::function<std::string()> diagnose;
    // For an output too large to compare whole: the index, in the whole output, of each compared
    // element (the comparison is of samples; see course/large.h). Messages then name those
    // indices, and say so when every wrong one lies past 2^31 or 2^32 (32-bit index arithmetic).
    std::vector<std::size_t> indices;
};

namespace detail {

// What the comparison saw; turned into words by explain(). Host-only and testable.
struct Mismatches {
    std::size_t total = 0;          // elements compared
    std::size_t wrong = 0;          // elements outside the tolerance
    std::size_t never_written = 0;  // wrong elements that still hold the poison
    std::size_t other_nan = 0;      // wrong elements that are NaN, but not the poison
    std::size_t first_wrong = 0;
    std::size_t last_wrong = 0;
    std::size_t min_row = 0, max_row = 0, min_col = 0, max_col = 0;
    // Wrong elements at or past each 32-bit limit of compare.cpp (2^32, 2^31, 2^30, 2^29).
    std::array<std::size_t, 4> wrong_past_limit{};
    bool all_zero_output = true;     // every element of got is exactly 0
    bool reference_nonzero = false;  // some element of want is not 0
    struct Example {
        std::size_t index;
        double got, want;
        bool never_written;
    };
    std::vector<Example> examples;

    void add(std::size_t index, double got, double want, bool poisoned, const CompareOptions& opt);
};

std::string explain(const Mismatches& m, const Tolerance& tol, const CompareOptions& opt);

}  // namespace detail

template <class T, class R>
testing::AssertionResult expect_close(const std::vector<T>& got, const std::vector<R>& want,
                                      const Tolerance& tol, const CompareOptions& opt = {}) {
    if (got.size() != want.size())
        return testing::AssertionFailure() << "`" << opt.name << "`: compared " << got.size()
                                           << " elements with a reference of " << want.size();
    detail::Mismatches m;
    m.total = got.size();
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double g = static_cast<double>(got[i]);
        const double w = static_cast<double>(want[i]);
        if (g != 0.0) m.all_zero_output = false;
        if (w != 0.0) m.reference_nonzero = true;
        if (!tol.accepts(g, w)) m.add(i, g, w, is_poison(got[i]), opt);
    }
    if (m.wrong == 0) return testing::AssertionSuccess();
    return testing::AssertionFailure() << detail::explain(m, tol, opt);
}

// Integers (counts, scans, indices) must match exactly.
template <class T>
testing::AssertionResult expect_equal(const std::vector<T>& got, const std::vector<T>& want,
                                      const CompareOptions& opt = {}) {
    return expect_close(got, want, Tolerance::exact(), opt);
}

}  // namespace course
