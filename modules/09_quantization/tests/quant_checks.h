// What the checkers of 09_quantization share: inputs shaped like a model's (weights with rows and
// groups of different sizes, activations with outlier channels), bf16 activations, the accuracy
// report every checker prints (a format's error in units of its step), the skip of the tensor-core
// exercises where the build cannot run them, the timed cases' bookkeeping, and the quantizers'
// case past 2^31 elements.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "course/launch.h"
#include "course/testing.h"

namespace quant {

// ---- Inputs ---------------------------------------------------------------------------------

// A weight-like matrix: uniform values whose size changes from one block of `span` values of a
// row to the next (by up to 2^+-spread), so that a scale taken from the wrong row, group or block
// is visibly wrong, with a few exact zeros and a few blocks whose largest magnitude is negative.
inline std::vector<float> weights(std::size_t rows, std::size_t cols, std::size_t span,
                                  course::Rng& rng, int spread = 6) {
    std::vector<float> x(rows * cols);
    for (std::size_t first = 0; first < x.size(); first += span) {
        const float size = std::ldexp(1.0f, static_cast<int>(rng.uniform_int(-spread, spread)));
        const std::size_t end = std::min(first + span, x.size());
        for (std::size_t i = first; i < end; ++i) x[i] = size * rng.uniform(-1.0f, 1.0f);
        // The largest magnitude negative: a scale from max(x) rather than max(|x|) is then wrong.
        if (rng.uniform_int(0, 3) == 0) x[first] = -1.25f * size;
    }
    for (int z = 0; z < 4 && !x.empty(); ++z)
        x[static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(x.size()) - 1))] =
            0.0f;
    return x;
}

// An activation-like matrix: rows (tokens) of uniform values in [-1, 1) where a few columns
// (channels) are 20x larger in every row, as in the activations of large language models: one
// channel sets every token's absmax.
inline std::vector<float> activations(std::size_t rows, std::size_t cols, course::Rng& rng) {
    std::vector<float> x = course::random_floats(rows * cols, -1.0f, 1.0f, rng);
    for (int o = 0; o < 3; ++o) {
        const auto c =
            static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(cols) - 1));
        for (std::size_t r = 0; r < rows; ++r) x[r * cols + c] *= 20.0f;
    }
    return x;
}

// bf16 values: the bits for the device, the values (exact in float) for the references.
struct Bf16Matrix {
    std::vector<std::uint16_t> bits;
    std::vector<float> values;
};

inline Bf16Matrix to_bf16(const std::vector<float>& x) {
    Bf16Matrix m{std::vector<std::uint16_t>(x.size()), std::vector<float>(x.size())};
    for (std::size_t i = 0; i < x.size(); ++i) {
        const __nv_bfloat16 rounded = __float2bfloat16_rn(x[i]);
        std::memcpy(&m.bits[i], &rounded, sizeof(std::uint16_t));
        m.values[i] = __bfloat162float(rounded);
    }
    return m;
}

inline const __nv_bfloat16* as_bf16(const course::DeviceBuffer<std::uint16_t>& buffer) {
    return reinterpret_cast<const __nv_bfloat16*>(buffer.data());
}

// ---- Accuracy: a format's error in units of its step ------------------------------------------

// The largest and the root-mean-square |x^ - x| / step over a set of values (round to nearest: at
// most 0.5; about 0.29 for values spread evenly between grid points), and how many were clipped
// (beyond the grid's ends: MXFP8's 448) with their largest error in steps.
struct Accuracy {
    double max_steps = 0.0;
    double sum_squares = 0.0;
    std::size_t count = 0;
    std::size_t clipped = 0;
    double clipped_max_steps = 0.0;

    void add(double error, double step, bool was_clipped = false) {
        const double steps = step > 0.0 ? std::fabs(error) / step : 0.0;
        if (was_clipped) {
            ++clipped;
            clipped_max_steps = std::max(clipped_max_steps, steps);
            return;
        }
        max_steps = std::max(max_steps, steps);
        sum_squares += steps * steps;
        ++count;
    }
    double rms_steps() const { return count ? std::sqrt(sum_squares / count) : 0.0; }
};

// The accuracy line of a case: printed, and kept as the GoogleTest property accuracy_<name> (in
// the grader's JSON report). `what` says which values and against what.
inline void record_accuracy(const std::string& name, const std::string& what, const Accuracy& a) {
    char line[256];
    std::snprintf(line, sizeof line, "max %.3f step, rms %.3f step over %zu values", a.max_steps,
                  a.rms_steps(), a.count);
    std::string text = what + ": " + line;
    if (a.clipped) {
        std::snprintf(line, sizeof line, "; %zu clipped (at most %.2f step off)", a.clipped,
                      a.clipped_max_steps);
        text += line;
    }
    testing::Test::RecordProperty("accuracy_" + name, text);
    std::printf("[accuracy] %s\n", text.c_str());
}

// The error of a product y = W x whose W was quantized, against the product with the float32 W,
// in units of what rounding to nearest predicts: each weight off by a uniform error of at most
// half its step, whose variance is step^2 / 12, so y_n is off by about
// sqrt(sum_k x_k^2 step_nk^2 / 12). A ratio near 1 is the format doing what it should; truncation
// instead of rounding doubles it and adds a bias.
struct ProductAccuracy {
    double sum_squares = 0.0;
    std::size_t count = 0;
    void add(double y, double y_float_weights, double predicted_sd) {
        if (predicted_sd <= 0.0) return;
        const double ratio = (y - y_float_weights) / predicted_sd;
        sum_squares += ratio * ratio;
        ++count;
    }
    double rms() const { return count ? std::sqrt(sum_squares / count) : 0.0; }
};

inline void record_product_accuracy(const std::string& name, const std::string& what,
                                    const ProductAccuracy& a) {
    char line[200];
    std::snprintf(
        line, sizeof line,
        "rms error %.2f x what rounding each weight to nearest predicts, over %zu outputs", a.rms(),
        a.count);
    const std::string text = what + ": " + line;
    testing::Test::RecordProperty("accuracy_" + name, text);
    std::printf("[accuracy] %s\n", text.c_str());
}

// ---- The tensor-core exercises ------------------------------------------------------------------

// A kernel of this build, whose device code is compiled for the build's architecture.
__global__ void build_probe_kernel() {}

// Why an exercise on the bf16 tensor cores cannot run here although the GPU can (the tree was
// built for an older architecture, whose code traps), or nothing.
inline std::optional<std::string> build_skip_reason(int min_sm) {
    const int built = course::compiled_arch(build_probe_kernel);
    if (built >= min_sm) return std::nullopt;
    return "needs device code for sm_" + std::to_string(min_sm) +
           " or newer (bf16 tensor cores): this build is for sm_" + std::to_string(built) +
           ": rebuild the grader's tree for this GPU (cmake build/<tree> "
           "-DCMAKE_CUDA_ARCHITECTURES=" +
           std::to_string(course::gpu().sm) + ")";
}

class TensorCoreTest : public course::GpuTest {
  protected:
    void SetUp() override {
        course::GpuTest::SetUp();
        if (IsSkipped()) return;
        if (auto reason = build_skip_reason(COURSE_MIN_SM)) {
            RecordProperty("skip_reason", *reason);
            GTEST_SKIP() << *reason;
        }
    }
};

// ---- Labels
// --------------------------------------------------------------------------------------

inline std::string shape_label(std::size_t a, std::size_t b) {
    return std::to_string(a) + "x" + std::to_string(b);
}
inline std::string shape_label(std::size_t a, std::size_t b, std::size_t c) {
    return shape_label(a, b) + "x" + std::to_string(c);
}

// ---- Past 2^31 elements (the quantizers) -----------------------------------------------------

// The quantizers' largest case: 2049 rows of 2^20 values (the longest row their contracts allow),
// the last row starting at element 2^31, where an offset held in an int overflows. x is made on
// the device (course::fill_uniform in [-1, 1) from a seed), and the rows compared
// (course::rows_past_int_range: at the start, around 2^31, at the end) are made again here.
constexpr int kPastIntRows = 2049, kPastIntCols = 1 << 20;
constexpr std::size_t kPastIntElements = std::size_t{kPastIntRows} * kPastIntCols;
constexpr const char* kPastIntLabel =
    "2049 x 2^20 (the last row starts at element 2^31), x made on the device";

// x at the flat indices of `window`, as course::fill_uniform(x, n, seed, -1.0f, 1.0f) made it.
inline std::vector<float> hashed_x(const course::Window& window, std::uint64_t seed) {
    std::vector<float> x(window.count);
    for (std::size_t k = 0; k < window.count; ++k)
        x[k] = course::hashed::uniform(window.first + k, seed, -1.0f, 1.0f);
    return x;
}

}  // namespace quant
