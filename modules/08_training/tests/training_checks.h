// What the checkers of module 08 share: the activation types under test (float, and bf16 kept on
// the device as its bits), the skip of the bf16 cases on GPUs without bf16, views that start off
// a 16-byte boundary, and the comparison of two runs' bits.
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

namespace training_checks {

constexpr double kUnitRoundoff = 0x1.0p-24;  // float32

// ---- The activation types: float, or __nv_bfloat16 held as std::uint16_t bits ----

template <class Act>
struct Activations;

template <>
struct Activations<float> {
    using Bits = float;  // what a DeviceBuffer holds
    static constexpr const char* kName = "float";
    static std::vector<float> store(const std::vector<float>& values) { return values; }
    static std::vector<float> load(const std::vector<float>& bits) { return bits; }
    // A value the type holds exactly (inputs are drawn so, and the reference uses them as such).
    static float representable(float value) { return value; }
    static float* pointer(course::DeviceBuffer<float>& buffer) { return buffer.data(); }
};

template <>
struct Activations<__nv_bfloat16> {
    using Bits = std::uint16_t;
    static constexpr const char* kName = "bf16";
    static std::vector<std::uint16_t> store(const std::vector<float>& values) {
        return course::bf16_bits(values);
    }
    static std::vector<float> load(const std::vector<std::uint16_t>& bits) {
        return course::bf16_values(bits);
    }
    static float representable(float value) { return course::round_to_bf16(value); }
    static __nv_bfloat16* pointer(course::DeviceBuffer<std::uint16_t>& buffer) {
        return course::as_bf16(buffer);
    }
};

template <class Act>
constexpr bool kIsBf16 = sizeof(Act) == 2;

// Values drawn uniformly from [lo, hi) and rounded to what Act holds.
template <class Act>
std::vector<float> random_activations(std::size_t n, float lo, float hi, course::Rng& rng) {
    auto values = course::random_floats(n, lo, hi, rng);
    for (float& v : values) v = Activations<Act>::representable(v);
    return values;
}

// Why a bf16 case cannot run on this GPU, or nothing: bf16 arithmetic and conversions are
// compute capability 8.0 (Ampere) and newer; the float cases of the same checker still run.
inline std::optional<std::string> bf16_skip_reason() {
    if (auto reason = course::gpu_skip_reason(80)) return "bf16 activations: " + *reason;
    return std::nullopt;
}

// ---- Views that start `offset` elements into their buffer ----

// A device view of n activations of type Act, `offset` elements past the start of its buffer (a
// 16-byte boundary), so that offset 1 starts it 4 or 2 bytes past one, as a view into a larger
// tensor may. The elements before it belong to someone else: an output's must keep their poison.
// An output's buffer is fenced by redzones; an input's (made from values) ends where unmapped
// memory begins (course::Placement), so that a load past the view's end faults.
template <class Act>
class View {
  public:
    using Bits = typename Activations<Act>::Bits;
    View(const std::string& name, std::size_t n, std::size_t offset,
         course::Placement placement = course::Placement::fenced)
        : buffer_(name, offset + n, placement), offset_(offset), n_(n) {}
    View(const std::string& name, const std::vector<float>& values, std::size_t offset)
        : View(name, values.size(), offset, course::Placement::end_guarded) {
        std::vector<float> all(offset, 0.0f);
        all.insert(all.end(), values.begin(), values.end());
        buffer_.upload(Activations<Act>::store(all));
    }
    Act* data() { return Activations<Act>::pointer(buffer_) + offset_; }
    course::DeviceBuffer<Bits>& buffer() { return buffer_; }
    std::size_t size() const { return n_; }
    const std::string& name() const { return buffer_.name(); }

    // The view's values as floats (never written: the float poison).
    std::vector<float> values() const {
        const auto bits = buffer_.download(offset_, n_);
        return Activations<Act>::load(bits);
    }
    // Whether the elements before the view (an output's) still hold the poison.
    testing::AssertionResult front_untouched() const {
        const auto bits = buffer_.download(0, offset_);
        for (std::size_t i = 0; i < offset_; ++i)
            if (!course::is_poison(bits[i]))
                return testing::AssertionFailure()
                       << "wrote before the start of `" << name() << "` (element " << i << " - "
                       << offset_ << "): the view starts " << offset_
                       << " element(s) into a larger tensor";
        return testing::AssertionSuccess();
    }

  private:
    course::DeviceBuffer<Bits> buffer_;
    std::size_t offset_;
    std::size_t n_;
};

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

// Skips the current test, with the reason recorded for the grader, where bf16 cannot run.
#define TRAINING_REQUIRE_BF16()                                               \
    do {                                                                      \
        if (auto training_reason = ::training_checks::bf16_skip_reason()) {   \
            ::testing::Test::RecordProperty("skip_reason", *training_reason); \
            GTEST_SKIP() << *training_reason;                                 \
        }                                                                     \
    } while (0)
