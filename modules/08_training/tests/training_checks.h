// What the checkers of module 08 share: the activation types under test (float, and bf16 kept on
// the device as its bits), views that start off a 16-byte boundary and the skip of the bf16 cases
// on GPUs without bf16 (course/view.h: COURSE_REQUIRE_BF16), and the comparison of two runs'
// bits.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "course/bf16.h"
#include "course/testing.h"
#include "course/view.h"

namespace training_checks {

constexpr double kUnitRoundoff = 0x1.0p-24;  // float32

// The activation types (float, or __nv_bfloat16 held as std::uint16_t bits) and views that start
// off a 16-byte boundary: course/view.h, shared with module 06's bf16 entry points.
using course::Activations;
using course::View;

template <class Act>
constexpr bool kIsBf16 = sizeof(Act) == 2;

// Values drawn uniformly from [lo, hi) and rounded to what Act holds.
template <class Act>
std::vector<float> random_activations(std::size_t n, float lo, float hi, course::Rng& rng) {
    auto values = course::random_floats(n, lo, hi, rng);
    for (float& v : values) v = Activations<Act>::representable(v);
    return values;
}

// ---- Two runs' bits ----

// "" when two runs on the same inputs gave the same bits, else what that says.
inline std::string bits_diagnosis(const std::string& name, const std::vector<float>& first,
                                  const std::vector<float>& second, const std::string& why) {
    std::size_t differing = 0;
    for (std::size_t i = 0; i < first.size(); ++i)
        differing += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
    if (differing == 0) return "";
    return "`" + name + "` differs between two identical runs at " + std::to_string(differing) +
           " of " + std::to_string(first.size()) + " elements: not deterministic. " + why;
}

}  // namespace training_checks
