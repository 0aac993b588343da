// Inputs too large to make on the host and upload quickly (gigabytes): element i is a function
// of (i, seed) alone, computed identically on the device, which fills the buffer in
// milliseconds, and on the host, which recomputes any element for the reference.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hashed_inputs {

// splitmix64 (the generator of course::Rng), addressed by index: well-mixed 64 bits for element i.
__host__ __device__ inline std::uint64_t bits(std::size_t i, std::uint64_t seed) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform in [-1, 1) on a grid of 2^-23: every value is exact in float, on both sides.
__host__ __device__ inline float uniform(std::size_t i, std::uint64_t seed) {
    return static_cast<float>(bits(i, seed) >> 40) * 0x1.0p-23f - 1.0f;
}

}  // namespace hashed_inputs
