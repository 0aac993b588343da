#include "course/reference/reduce.h"

#include <stdexcept>

namespace course::reference {

double sum(const std::vector<float>& values) {
    double total = 0.0;
    for (float v : values) total += v;
    return total;
}

std::vector<std::int64_t> inclusive_scan(const std::vector<int>& values) {
    std::vector<std::int64_t> out(values.size());
    std::int64_t running = 0;
    for (std::size_t i = 0; i < values.size(); ++i) out[i] = running += values[i];
    return out;
}

std::vector<std::int64_t> inclusive_scan_per_tile(const std::vector<int>& values, std::size_t tile) {
    if (tile == 0) throw std::invalid_argument("inclusive_scan_per_tile: tile must be positive");
    std::vector<std::int64_t> out(values.size());
    std::int64_t running = 0;
    for (std::size_t i = 0; i < values.size(); ++i) {
        if (i % tile == 0) running = 0;  // a new tile starts from nothing
        out[i] = running += values[i];
    }
    return out;
}

std::vector<std::uint64_t> histogram_256(const std::vector<std::uint8_t>& bytes) {
    std::vector<std::uint64_t> counts(256, 0);
    for (std::uint8_t b : bytes) ++counts[b];
    return counts;
}

}  // namespace course::reference
