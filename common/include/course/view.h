// Device views of activations for checkers: float, or __nv_bfloat16 held as its std::uint16_t
// bits (course/bf16.h), in a buffer that starts `offset` elements before the view, so that offset
// 1 starts the view 4 or 2 bytes past a 16-byte boundary, as a view into a larger tensor may (a
// kernel that takes 16-byte accesses from one pointer's alignment and not another's faults).
// Module 08's checkers (training_checks.h) and module 06's bf16 entry points use them, and skip
// their bf16 cases where the GPU has no bf16 (COURSE_REQUIRE_BF16).
//
//   course::View<__nv_bfloat16> x("x", values, 1), y("y", n, 0);   // an input, an output
//   kernel(x.data(), y.data(), n);
//   expect_close(y.values(), want, tol, {"y"});  EXPECT_TRUE(y.front_untouched());
#pragma once

#include <cuda_bf16.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "course/bf16.h"
#include "course/buffer.h"
#include "course/gpu.h"
#include "course/poison.h"

namespace course {

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
    static float* pointer(DeviceBuffer<float>& buffer) { return buffer.data(); }
};

template <>
struct Activations<__nv_bfloat16> {
    using Bits = std::uint16_t;
    static constexpr const char* kName = "bf16";
    static std::vector<std::uint16_t> store(const std::vector<float>& values) {
        return bf16_bits(values);
    }
    static std::vector<float> load(const std::vector<std::uint16_t>& bits) {
        return bf16_values(bits);
    }
    static float representable(float value) { return round_to_bf16(value); }
    static __nv_bfloat16* pointer(DeviceBuffer<std::uint16_t>& buffer) { return as_bf16(buffer); }
};

// ---- Views that start `offset` elements into their buffer ----

// A device view of n activations of type Act, `offset` elements past the start of its buffer (a
// 16-byte boundary), so that offset 1 starts it 4 or 2 bytes past one, as a view into a larger
// tensor may. The elements before it belong to someone else: an output's must keep their poison.
// An output's buffer is fenced by redzones; an input's (made from values) ends where unmapped
// memory begins (Placement), so that a load past the view's end faults.
template <class Act>
class View {
  public:
    using Bits = typename Activations<Act>::Bits;
    View(const std::string& name, std::size_t n, std::size_t offset,
         Placement placement = Placement::fenced)
        : buffer_(name, offset + n, placement), offset_(offset), n_(n) {}
    View(const std::string& name, const std::vector<float>& values, std::size_t offset)
        : View(name, values.size(), offset, Placement::end_guarded) {
        std::vector<float> all(offset, 0.0f);
        all.insert(all.end(), values.begin(), values.end());
        buffer_.upload(Activations<Act>::store(all));
    }
    Act* data() { return Activations<Act>::pointer(buffer_) + offset_; }
    DeviceBuffer<Bits>& buffer() { return buffer_; }
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
            if (!is_poison(bits[i]))
                return testing::AssertionFailure()
                       << "wrote before the start of `" << name() << "` (element " << i << " - "
                       << offset_ << "): the view starts " << offset_
                       << " element(s) into a larger tensor";
        return testing::AssertionSuccess();
    }

  private:
    DeviceBuffer<Bits> buffer_;
    std::size_t offset_;
    std::size_t n_;
};

// Why a bf16 case cannot run on this GPU, or nothing: bf16 arithmetic and conversions are
// compute capability 8.0 (Ampere) and newer; the float cases of the same checker still run.
inline std::optional<std::string> bf16_skip_reason() {
    if (auto reason = gpu_skip_reason(80)) return "bf16 activations: " + *reason;
    return std::nullopt;
}

}  // namespace course

// Skips the current test, with the reason recorded for the grader, where bf16 cannot run.
#define COURSE_REQUIRE_BF16()                                               \
    do {                                                                    \
        if (auto course_reason = ::course::bf16_skip_reason()) {            \
            ::testing::Test::RecordProperty("skip_reason", *course_reason); \
            GTEST_SKIP() << *course_reason;                                 \
        }                                                                   \
    } while (0)
