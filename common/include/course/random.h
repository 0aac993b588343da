// Seeded inputs. One seed per checker run, printed on failure; GRADER_SEED=<seed> replays it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace course {

// The run's seed: GRADER_SEED if set, else drawn once from the clock.
std::uint64_t run_seed();

// splitmix64: tiny, fast enough to fill hundreds of MB on the host, identical on every platform
// (std:: distributions are not), so a seed replays the same inputs everywhere.
class Rng {
public:
    explicit Rng(std::uint64_t seed) : state_(seed) {}

    std::uint64_t next_u64() {
        std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    // Uniform in [0, 1) with 53 random bits.
    double uniform01() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
    float uniform(float lo, float hi) { return static_cast<float>(lo + (hi - lo) * uniform01()); }
    // Uniform integer in [lo, hi] (inclusive).
    std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
        return lo + static_cast<std::int64_t>(next_u64() % static_cast<std::uint64_t>(hi - lo + 1));
    }

private:
    std::uint64_t state_;
};

// A generator of its own for each named stream (use the test's name), so that a test's inputs
// do not depend on which other tests ran before it.
Rng rng_for(const std::string& stream);

std::vector<float> random_floats(std::size_t count, float lo, float hi, Rng& rng);
std::vector<int> random_ints(std::size_t count, int lo, int hi, Rng& rng);

}  // namespace course
