// CPU references for the multi-block patterns of module 03: a sum, inclusive scans and a byte
// histogram. Sums accumulate in double, prefix sums and counts in 64-bit integers, so the
// reference itself never rounds or overflows for the sizes the checkers use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace course::reference {

// values[0] + values[1] + ... + values[n - 1], accumulated in double.
double sum(const std::vector<float>& values);

// out[i] = values[0] + ... + values[i].
std::vector<std::int64_t> inclusive_scan(const std::vector<int>& values);

// The inclusive scan restarted at every multiple of `tile`: out[i] = values[t] + ... + values[i]
// with t = i - i % tile (each tile of `tile` elements is scanned on its own; the last one may be
// shorter).
std::vector<std::int64_t> inclusive_scan_per_tile(const std::vector<int>& values, std::size_t tile);

// counts[v] = how many of the bytes equal v, for v = 0..255.
std::vector<std::uint64_t> histogram_256(const std::vector<std::uint8_t>& bytes);

}  // namespace course::reference
