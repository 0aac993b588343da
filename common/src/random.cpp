#include "course/random.h"

#include <chrono>
#include <cstdlib>
#include <stdexcept>

namespace course {

std::uint64_t run_seed() {
    static const std::uint64_t seed = [] {
        if (const char* text = std::getenv("GRADER_SEED")) {
            char* end = nullptr;
            const unsigned long long value = std::strtoull(text, &end, 10);
            if (end == text || *end != '\0')
                throw std::invalid_argument(std::string("GRADER_SEED must be a number, got '") +
                                            text + "'");
            return static_cast<std::uint64_t>(value);
        }
        // Keep it short enough to retype: a six-digit seed.
        const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        return static_cast<std::uint64_t>(now) % 1000000u;
    }();
    return seed;
}

Rng rng_for(const std::string& stream) {
    std::uint64_t hash = 1469598103934665603ull;  // FNV-1a of the stream name
    for (unsigned char c : stream) hash = (hash ^ c) * 1099511628211ull;
    return Rng(run_seed() ^ hash);
}

std::vector<float> random_floats(std::size_t count, float lo, float hi, Rng& rng) {
    std::vector<float> values(count);
    for (float& v : values) v = rng.uniform(lo, hi);
    return values;
}

std::vector<int> random_ints(std::size_t count, int lo, int hi, Rng& rng) {
    std::vector<int> values(count);
    for (int& v : values) v = static_cast<int>(rng.uniform_int(lo, hi));
    return values;
}

}  // namespace course
