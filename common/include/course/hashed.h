// Inputs too large to make on the host and upload quickly (gigabytes): element i is a function of
// (i, seed) alone, computed identically on the device, which fills the buffer in milliseconds
// (fill_* below), and on the host, which recomputes any element it needs for the reference.
//
//   course::fill_uniform(d_a.data(), n, seed, -1.0f, 1.0f);          // on the device
//   const float a_i = course::hashed::uniform(i, seed, -1.0f, 1.0f);  // the same value, here
//
// `period` > 0 repeats the input every `period` elements (element i is element i % period): a
// reference that needs every element before i (a prefix sum, a histogram, a column sum over all
// rows) is then one period's work, whatever the size.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "course/host_device.h"

namespace course {
namespace hashed {

// splitmix64 (the generator of course::Rng), addressed by index: well-mixed 64 bits for element i.
COURSE_HOST_DEVICE inline std::uint64_t bits(std::size_t i, std::uint64_t seed) {
    std::uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform in [lo, hi), 2^24 values apart by (hi - lo) / 2^24. One fused multiply-add, which
// rounds once and identically on both sides (a separate multiply and add might be contracted on
// the device and not on the host). uniform(i, seed, -1, 1) is exact: a multiple of 2^-23.
COURSE_HOST_DEVICE inline float uniform(std::size_t i, std::uint64_t seed, float lo, float hi) {
    const float unit = static_cast<float>(bits(i, seed) >> 40) * 0x1.0p-24f;  // exact
    return fmaf(hi - lo, unit, lo);
}

// Uniform integer in [lo, hi] (inclusive).
COURSE_HOST_DEVICE inline int uniform_int(std::size_t i, std::uint64_t seed, int lo, int hi) {
    const auto range = static_cast<std::uint64_t>(static_cast<std::int64_t>(hi) - lo + 1);
    return static_cast<int>(lo + static_cast<std::int64_t>(bits(i, seed) % range));
}

// Uniform byte.
COURSE_HOST_DEVICE inline std::uint8_t byte(std::size_t i, std::uint64_t seed) {
    return static_cast<std::uint8_t>(bits(i, seed) >> 56);
}

}  // namespace hashed

// The fills, on the default stream: out[i] = hashed::...(period ? i % period : i, seed, ...)
// for every i < n. Synchronize (or download) before reading on the host.
void fill_uniform(float* out, std::size_t n, std::uint64_t seed, float lo, float hi,
                  std::size_t period = 0);
void fill_uniform_int(int* out, std::size_t n, std::uint64_t seed, int lo, int hi,
                      std::size_t period = 0);
void fill_bytes(std::uint8_t* out, std::size_t n, std::uint64_t seed, std::size_t period = 0);

}  // namespace course
