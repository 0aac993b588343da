#include "course/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <sstream>

#include "course/random.h"

namespace course {

namespace {

std::string number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.7g", value);
    return text;
}

// Where compared element `k` lies in the whole output.
std::size_t whole_index(std::size_t k, const CompareOptions& opt) {
    return opt.indices.empty() ? k : opt.indices.at(k);
}

std::string position(std::size_t k, const CompareOptions& opt) {
    const std::size_t index = whole_index(k, opt);
    if (!opt.matrix) return "[" + std::to_string(index) + "]";
    return "(" + std::to_string(index / opt.matrix->cols) + ", " +
           std::to_string(index % opt.matrix->cols) + ")";
}

// Where 32-bit arithmetic breaks on an index of 4-byte elements (floats, ints): the index itself
// in an int (2^31) or an unsigned int (2^32), or its byte offset, 4 times it, in an int (element
// 2^29) or an unsigned int (2^30).
struct Limit {
    std::size_t at;
    const char* index;    // "2^31 = 2147483648"
    const char* what;     // what overflows there
    const char* largest;  // the type's largest value
    bool wraps;           // unsigned: past the limit it wraps to 0 (an int goes negative)
};
constexpr Limit kLimits[] = {
    {std::size_t{1} << 32, "2^32 = 4294967296", "an index or offset computed in 32-bit unsigned",
     "unsigned int is 2^32 - 1", true},
    {std::size_t{1} << 31, "2^31 = 2147483648", "an index or offset computed in 32-bit int",
     "int is 2^31 - 1", false},
    {std::size_t{1} << 30, "2^30 = 1073741824",
     "a byte offset of 4-byte elements (4 x 2^30 = 2^32 bytes) computed in 32-bit unsigned",
     "unsigned int is 2^32 - 1", true},
    {std::size_t{1} << 29, "2^29 = 536870912",
     "a byte offset of 4-byte elements (4 x 2^29 = 2^31 bytes) computed in 32-bit int",
     "int is 2^31 - 1", false},
};

static_assert(std::size(kLimits) ==
              std::tuple_size_v<decltype(detail::Mismatches{}.wrong_past_limit)>);

// Compared elements at or past `at` in the whole output.
std::size_t compared_past(std::size_t at, std::size_t total, const CompareOptions& opt) {
    if (opt.indices.empty()) return total > at ? total - at : 0;
    return static_cast<std::size_t>(
        std::count_if(opt.indices.begin(), opt.indices.end(), [at](auto i) { return i >= at; }));
}

// When every element compared at or past one of kLimits of unsigned arithmetic is wrong, and wrong
// ones lie below it too: the index or offset wrapped, so the writes past the limit land back at
// the start of the output, over elements that were right (a signed int's overflow goes negative
// instead, out of the buffer: a crash, whose note says that).
std::string wrapped_writes(const detail::Mismatches& m, const CompareOptions& opt) {
    for (std::size_t l = 0; l < std::size(kLimits); ++l) {
        const Limit& limit = kLimits[l];
        const std::size_t past = compared_past(limit.at, m.total, opt);
        if (!limit.wraps || past == 0 || m.wrong_past_limit[l] != past ||
            whole_index(m.first_wrong, opt) >= limit.at)
            continue;
        return std::string("every element compared at or past index ") + limit.index +
               " is wrong, and elements near the start too: " + limit.what +
               " arithmetic wraps there (the largest " + limit.largest +
               "), so what belongs past it is written back at the start of the output, over "
               "other elements. Compute indices and offsets in std::size_t, and widen before "
               "multiplying: std::size_t(row) * cols, not row * cols";
    }
    return "";
}

// When every wrong element lies at or past one of kLimits of the whole output and every one
// compared below it is right: the mark of 32-bit index (or byte offset) arithmetic.
std::string index_overflow(const detail::Mismatches& m, const CompareOptions& opt) {
    const std::size_t first = whole_index(m.first_wrong, opt);
    for (const Limit& limit : kLimits) {
        if (first < limit.at) continue;
        const bool right_below = m.first_wrong > 0 && whole_index(0, opt) < limit.at;
        if (!right_below) return "";
        return std::string("every element compared below index ") + limit.index +
               " is right, and the first wrong one is " + position(m.first_wrong, opt) + ": " +
               limit.what + " arithmetic overflows there (the largest " + limit.largest +
               "). Compute indices and offsets in std::size_t, and widen before multiplying: "
               "std::size_t(row) * cols, not row * cols";
    }
    return "";
}

// "columns 96..99 of 0..99": a range, and whether it is the end of the axis.
std::string span(const char* what, std::size_t lo, std::size_t hi, std::size_t extent) {
    std::string text = std::string(what) + " " + std::to_string(lo);
    if (hi != lo) text += ".." + std::to_string(hi);
    text += " (of 0.." + std::to_string(extent - 1) + ")";
    return text;
}

// A grid capped in size (one wave, a fixed count of blocks) without a grid-stride loop: the
// elements past its threads are never written. Told apart from a missed tail (at most a block of
// elements short) by the length of what is missing.
bool capped_grid(const detail::Mismatches& m, const CompareOptions& opt) {
    constexpr std::size_t kWarp = 32, kLargestBlock = 1024;
    return opt.indices.empty() && m.never_written == m.wrong && m.first_wrong % kWarp == 0 &&
           m.total - m.first_wrong > kLargestBlock;
}

}  // namespace

std::string Tolerance::describe() const {
    if (atol == 0.0 && rtol == 0.0) return "exact match";
    return "|got - want| <= " + number(atol) + " + " + number(rtol) + " * |want|";
}

namespace detail {

void Mismatches::add(std::size_t index, double got, double want, bool poisoned,
                     const CompareOptions& opt) {
    if (wrong == 0) first_wrong = index;
    last_wrong = index;
    if (poisoned) ++never_written;
    if (!poisoned && std::isnan(got)) ++other_nan;
    if (opt.matrix) {
        const std::size_t row = index / opt.matrix->cols, col = index % opt.matrix->cols;
        if (wrong == 0) {
            min_row = max_row = row;
            min_col = max_col = col;
        }
        min_row = std::min(min_row, row), max_row = std::max(max_row, row);
        min_col = std::min(min_col, col), max_col = std::max(max_col, col);
    }
    const std::size_t whole = whole_index(index, opt);
    for (std::size_t l = 0; l < std::size(kLimits); ++l)
        if (whole >= kLimits[l].at) ++wrong_past_limit[l];
    ++wrong;
    if (examples.size() < opt.show) examples.push_back({index, got, want, poisoned});
}

std::string explain(const Mismatches& m, const Tolerance& tol, const CompareOptions& opt) {
    // The count, then what the mistake looks like (the checker's diagnosis, then the harness's
    // patterns, most specific first), then the elements: the grader shows the first lines only.
    std::ostringstream out;
    out << "`" << opt.name << "`: " << m.wrong << " of " << m.total << " elements "
        << (opt.indices.empty() ? "" : "compared ") << "are wrong (" << tol.describe() << ")\n";
    if (opt.diagnose) {
        const std::string diagnosis = opt.diagnose();
        if (!diagnosis.empty()) out << "  " << diagnosis << "\n";
    }
    if (const std::string overflow = index_overflow(m, opt); !overflow.empty())
        out << "  " << overflow << "\n";
    else if (const std::string wrapped = wrapped_writes(m, opt); !wrapped.empty())
        out << "  " << wrapped << "\n";
    if (m.all_zero_output && m.reference_nonzero) {
        out << "  the output is all zeros: did the kernel run, and write to the output pointer?\n";
    }
    if (m.never_written == m.wrong) {
        out << "  none of the wrong elements was written (they still hold the poison value): "
               "no thread stored to them\n";
    } else if (m.never_written > 0) {
        out << "  " << m.never_written << " of them were never written\n";
    }
    if (m.other_nan > 0)
        out << "  " << m.other_nan
            << " of them are NaN: did a load read past the end of an input "
               "(the harness keeps NaN there), or is there a 0/0, inf - inf or sqrt of a negative "
               "number?\n";
    const bool whole_tail = m.last_wrong == m.total - 1 && m.wrong == m.total - m.first_wrong;
    if (opt.matrix) {
        out << "  wrong elements lie in " << span("rows", m.min_row, m.max_row, opt.matrix->rows)
            << ", " << span("columns", m.min_col, m.max_col, opt.matrix->cols) << "\n";
        if (m.min_col > 0 && m.max_col == opt.matrix->cols - 1)
            out << "  only the last columns are wrong: is the partial tile at the right edge "
                   "handled (cols not a multiple of the block)?\n";
        if (m.min_row > 0 && m.max_row == opt.matrix->rows - 1 && m.min_col == 0)
            out << "  only the last rows are wrong: is the partial tile at the bottom edge "
                   "handled (rows not a multiple of the block)?\n";
    } else if (whole_tail && m.first_wrong > 0 && capped_grid(m, opt)) {
        out << "  every element from " << position(m.first_wrong, opt)
            << " to the end is wrong and was never written, and the " << m.first_wrong
            << " before it are right: a whole number of warps, as if a grid of " << m.first_wrong
            << " threads wrote one element each and stopped. A grid smaller than n needs a "
               "grid-stride loop (i += gridDim.x * blockDim.x).\n";
    } else if (whole_tail && m.first_wrong > 0) {
        out << "  every element " << (opt.indices.empty() ? "" : "compared ") << "from "
            << position(m.first_wrong, opt)
            << " to the end is wrong, and only those: does the grid (or the loop) cover all "
            << (opt.indices.empty() ? m.total : whole_index(m.total - 1, opt) + 1)
            << " elements? Check the ceil_div and the tail.\n";
    } else if (m.wrong > 1) {
        out << "  wrong elements lie between " << position(m.first_wrong, opt) << " and "
            << position(m.last_wrong, opt) << "\n";
    }
    for (const auto& e : m.examples) {
        out << "  " << position(e.index, opt) << " got "
            << (e.never_written ? "NaN/poison (never written)" : number(e.got)) << ", want "
            << number(e.want) << "\n";
    }
    if (m.wrong > m.examples.size()) out << "  ...\n";
    out << "  inputs from seed " << run_seed() << ": GRADER_SEED=" << run_seed() << " replays them";
    return out.str();
}

}  // namespace detail
}  // namespace course
