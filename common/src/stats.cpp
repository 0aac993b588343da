#include <algorithm>
#include <stdexcept>

#include "course/bench.h"

namespace course {

TimingStats summarize(std::vector<double> samples_ms) {
    if (samples_ms.empty()) throw std::invalid_argument("summarize: no samples");
    std::sort(samples_ms.begin(), samples_ms.end());
    const std::size_t n = samples_ms.size();
    // Nearest-rank percentile on the sorted samples.
    auto percentile = [&](double p) { return samples_ms[static_cast<std::size_t>(p * (n - 1) + 0.5)]; };
    TimingStats stats;
    stats.samples = static_cast<int>(n);
    stats.min_ms = samples_ms.front();
    stats.median_ms = n % 2 ? samples_ms[n / 2] : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
    stats.spread_pct = 100.0 * (percentile(0.9) - percentile(0.1)) / stats.median_ms;
    return stats;
}

}  // namespace course
