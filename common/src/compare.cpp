#include "course/compare.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "course/random.h"

namespace course {

namespace {

std::string number(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%.7g", value);
    return text;
}

std::string position(std::size_t index, const CompareOptions& opt) {
    if (!opt.matrix) return "[" + std::to_string(index) + "]";
    return "(" + std::to_string(index / opt.matrix->cols) + ", " +
           std::to_string(index % opt.matrix->cols) + ")";
}

// "columns 96..99 of 0..99": a range, and whether it is the end of the axis.
std::string span(const char* what, std::size_t lo, std::size_t hi, std::size_t extent) {
    std::string text = std::string(what) + " " + std::to_string(lo);
    if (hi != lo) text += ".." + std::to_string(hi);
    text += " (of 0.." + std::to_string(extent - 1) + ")";
    return text;
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
    if (opt.matrix) {
        const std::size_t row = index / opt.matrix->cols, col = index % opt.matrix->cols;
        if (wrong == 0) {
            min_row = max_row = row;
            min_col = max_col = col;
        }
        min_row = std::min(min_row, row), max_row = std::max(max_row, row);
        min_col = std::min(min_col, col), max_col = std::max(max_col, col);
    }
    ++wrong;
    if (examples.size() < opt.show) examples.push_back({index, got, want, poisoned});
}

std::string explain(const Mismatches& m, const Tolerance& tol, const CompareOptions& opt) {
    std::ostringstream out;
    out << "`" << opt.name << "`: " << m.wrong << " of " << m.total << " elements are wrong ("
        << tol.describe() << ")\n";
    for (const auto& e : m.examples) {
        out << "  " << position(e.index, opt) << " got "
            << (e.never_written ? "NaN/poison (never written)" : number(e.got)) << ", want "
            << number(e.want) << "\n";
    }
    if (m.wrong > m.examples.size()) out << "  ...\n";

    // Patterns, most specific first.
    if (m.all_zero_output && m.reference_nonzero) {
        out << "  the output is all zeros: did the kernel run, and write to the output pointer?\n";
    }
    if (m.never_written == m.wrong) {
        out << "  none of the wrong elements was written (they still hold the poison value): "
               "no thread stored to them\n";
    } else if (m.never_written > 0) {
        out << "  " << m.never_written << " of them were never written\n";
    }
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
    } else if (whole_tail && m.first_wrong > 0) {
        out << "  every element from " << position(m.first_wrong, opt)
            << " to the end is wrong, and only those: does the grid (or the loop) cover all "
            << m.total << " elements? Check the ceil_div and the tail.\n";
    } else if (m.wrong > 1) {
        out << "  wrong elements lie between " << position(m.first_wrong, opt) << " and "
            << position(m.last_wrong, opt) << "\n";
    }
    out << "  inputs from seed " << run_seed() << ": GRADER_SEED=" << run_seed()
        << " replays them";
    return out.str();
}

}  // namespace detail
}  // namespace course
