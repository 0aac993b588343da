// Checker of 09_quantization/quantize_int8: q, the scales and the dequantized values, bit for bit
// against the CPU reference (common/include/course/reference/quantize.h), on row lengths around
// the float4 width and the block (1, 7, 31, 33, 127, 4100, 2^20), weight-like rows (a different
// size per row, some whose largest magnitude is negative) and activation-like rows (outlier
// channels), rows of zeros, and exact halves (x / scale = k + 0.5). A failure says which rule of
// the format the output breaks: the absmax, the rounding (truncation, half away from zero, a
// product with 127 / absmax instead of the division), the zero rows. Every case prints the
// format's accuracy (its error in steps, the scale). Then the bandwidth of both directions at
// 16384 x 4096 against a device-to-device copy, and 2049 rows of 2^20 (past 2^31 elements).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/quantize.h"
#include "course/testing.h"
#include "quant_checks.h"
#include "quantize_int8.h"

namespace {

namespace ref = course::reference;

class QuantizeInt8 : public course::GpuTest {};

// q under another rule, for the diagnoses: `rule(x, scale)` for every element.
template <class Rule>
std::vector<std::int8_t> q_by(const std::vector<float>& x, const std::vector<float>& scales,
                              std::size_t cols, Rule rule) {
    std::vector<std::int8_t> q(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const float s = scales[i / cols];
        const float v = s == 0.0f ? 0.0f : std::fmin(std::fmax(rule(x[i], s), -127.0f), 127.0f);
        q[i] = static_cast<std::int8_t>(v);
    }
    return q;
}

// What a wrong q with right scales is, when a known mistake explains it.
std::string diagnose_q(const std::vector<std::int8_t>& got, const std::vector<float>& x,
                       const ref::Int8Rows& want, std::size_t cols) {
    if (got == q_by(x, want.scales, cols, [](float v, float s) { return std::trunc(v / s); }))
        return "q is x / scale truncated toward zero: round to nearest (rintf), or every value "
               "moves toward zero by half a step on average";
    if (got == q_by(x, want.scales, cols, [](float v, float s) { return std::round(v / s); }))
        return "q differs only where x / scale is exactly k + 0.5: round half to even (rintf), "
               "not roundf, which rounds halves away from zero";
    if (got ==
        q_by(x, want.scales, cols, [](float v, float s) { return std::rint(v * (1.0f / s)); }))
        return "q is off by one where x * (1 / scale) rounds differently from x / scale: divide, "
               "as the format states";
    bool only_zero_rows = true, only_subnormal_scales = true, any = false;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != want.q[i]) {
            any = true;
            const float scale = want.scales[i / cols];
            if (scale != 0.0f) only_zero_rows = false;
            if (!(scale > 0.0f && scale < std::numeric_limits<float>::min()))
                only_subnormal_scales = false;
        }
    if (any && only_zero_rows)
        return "q is wrong only in the rows of zeros: their scale is 0, and 0 / 0 is NaN; give "
               "them q = 0";
    if (any && only_subnormal_scales)
        return "q is wrong only in rows whose scale is a float32 subnormal, where absmax / 127 "
               "rounds down and x / scale passes 127: clamp q to [-127, 127]";
    return "";
}

// What wrong scales are, when a known mistake explains it.
std::string diagnose_scales(const std::vector<float>& got, const std::vector<float>& x,
                            const std::vector<float>& want, std::size_t cols) {
    std::vector<float> from_max(want.size());
    for (std::size_t r = 0; r < want.size(); ++r) {
        float m = 0.0f;
        for (std::size_t c = 0; c < cols; ++c) m = std::fmax(m, x[r * cols + c]);
        from_max[r] = m / 127.0f;
    }
    if (got == from_max)
        return "the scales are wrong only in rows whose largest magnitude is negative: the scale "
               "is max |x| / 127, the absmax, not max x / 127";
    bool over_128 = true;
    for (std::size_t r = 0; r < want.size(); ++r)
        if (got[r] != want[r] * 127.0f / 128.0f && want[r] != 0.0f) over_128 = false;
    if (over_128) return "every scale is absmax / 128: the grid is -127 .. 127, so absmax / 127";
    return "";
}

// Quantizes x with the exercise, compares q and the scales with the reference, dequantizes the
// reference's q and compares that too; adds the case's errors to `accuracy`.
void check_case(const std::string& what, const std::vector<float>& x, int rows, int cols,
                quant::Accuracy& accuracy) {
    SCOPED_TRACE(what + ", " + std::to_string(rows) + " x " + std::to_string(cols));
    const auto want = ref::quantize_int8_rows(x, rows, cols);
    const auto want_out = ref::dequantize_int8_rows(want.q, want.scales, rows, cols);
    const std::size_t n = x.size();
    const course::Matrix shape{static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)};
    course::DeviceBuffer<float> d_x("x", x), d_scales("scales", rows), d_out("out", n);
    course::DeviceBuffer<std::int8_t> d_q("q", n);

    quantize_int8(d_x.data(), rows, cols, d_q.data(), d_scales.data());
    const auto got_scales = d_scales.download();
    const auto got_q = d_q.download();
    course::CompareOptions scale_options{"scales (one per row)"};
    scale_options.diagnose = [&] { return diagnose_scales(got_scales, x, want.scales, cols); };
    EXPECT_TRUE(course::expect_equal(got_scales, want.scales, scale_options));
    course::CompareOptions q_options{"q", shape};
    q_options.diagnose = [&] { return diagnose_q(got_q, x, want, cols); };
    if (got_scales == want.scales) EXPECT_TRUE(course::expect_equal(got_q, want.q, q_options));

    // The way back, from the reference's q and scales.
    course::DeviceBuffer<std::int8_t> d_want_q("q", want.q);
    course::DeviceBuffer<float> d_want_scales("scales", want.scales);
    dequantize_int8(d_want_q.data(), d_want_scales.data(), rows, cols, d_out.data());
    const auto got_out = d_out.download();
    course::CompareOptions out_options{"out (dequantized)", shape};
    out_options.diagnose = [&] {
        std::vector<float> first_scale(want.scales.size(), want.scales[0]);
        return got_out == ref::dequantize_int8_rows(want.q, first_scale, rows, cols)
                   ? "every row was dequantized with row 0's scale: row r's is scales[r]"
                   : "";
    };
    EXPECT_TRUE(course::expect_equal(got_out, want_out, out_options));

    for (std::size_t i = 0; i < n; ++i) accuracy.add(want_out[i] - x[i], want.scales[i / cols]);
}

TEST_F(QuantizeInt8, RowLengths) {
    auto rng = test_rng();
    quant::Accuracy weights, activations;
    // 1: a single column; 7, 31, 33, 127: not a multiple of 4 (the scalar path) or of a warp;
    // 128, 4096: whole float4s; 4100: float4s, not a multiple of the block's 1024 floats.
    for (int cols : {1, 7, 31, 33, 127, 128, 4096, 4100}) {
        const int rows = cols <= 128 ? 37 : 9;
        check_case("weight-like rows", quant::weights(rows, cols, cols, rng), rows, cols, weights);
        check_case("activation-like rows (outlier channels)", quant::activations(rows, cols, rng),
                   rows, cols, activations);
    }
    quant::record_accuracy("weights", "dequantized weight-like rows against x", weights);
    quant::record_accuracy("activations",
                           "dequantized activation-like rows against x (one outlier channel "
                           "sets every token's scale: most values use a few of the 255 levels)",
                           activations);
}

TEST_F(QuantizeInt8, LongestRows) {
    COURSE_SKIP_ON_EMULATOR("rows of 2^20");
    auto rng = test_rng();
    quant::Accuracy accuracy;
    check_case("rows of 2^20 (the contract's longest)", quant::weights(2, 1 << 20, 4096, rng), 2,
               1 << 20, accuracy);
}

TEST_F(QuantizeInt8, ZerosHalvesAndTheClamp) {
    quant::Accuracy accuracy;
    // Row 0 and 2: zeros (scale 0). Row 1: absmax 127 * 2^-3, so the scale is 2^-3 exactly and
    // x / scale = k + 0.5 for every other value: rounding half to even gives 0, 2, -2, 2, 4, ...
    // Row 3: absmax 190 * 2^-149, whose scale absmax / 127 rounds down to 2^-149 (a subnormal), so
    // that x / scale = +-190: only the clamp brings q back to +-127.
    const int cols = 12;
    std::vector<float> x(4 * cols, 0.0f);
    for (int c = 0; c < cols; ++c) x[cols + c] = (c % 2 ? 1.0f : -1.0f) * (c / 2 + 0.5f) * 0.125f;
    x[cols + cols - 1] = 127.0f * 0.125f;
    const float tiny = std::numeric_limits<float>::denorm_min();
    for (int c = 0; c < cols; ++c) x[3 * cols + c] = (c % 2 ? -190.0f : 190.0f - c) * tiny;
    check_case("rows of zeros, exact halves, a subnormal scale", x, 4, cols, accuracy);
}

// Times quantize and dequantize at rows x cols against a device-to-device copy of x.
void time_case(int rows, int cols, course::Rng& rng) {
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    // x, out and the copy's destination (4 bytes per element), q and the harness's two copies of
    // it (1 each), the harness's two copies of out (4 each), the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(n * (3 * 4 + 3 * 1 + 2 * 4) + (256u << 20));
    const std::string label = quant::shape_label(rows, cols);
    SCOPED_TRACE(label);
    const auto x = quant::weights(rows, cols, cols, rng);
    const auto want = ref::quantize_int8_rows(x, rows, cols);
    course::DeviceBuffer<float> d_x("x", x), d_scales("scales", rows), d_out("out", n),
        d_copy("copy", n);
    course::DeviceBuffer<std::int8_t> d_q("q", n);
    const auto copy_x = [&] { course::baseline::device_copy(d_copy.data(), d_x.data(), 4 * n); };

    const auto quantize_timing = course::time_against(
        [&] { quantize_int8(d_x.data(), rows, cols, d_q.data(), d_scales.data()); }, copy_x,
        {course::TimedOutput(d_q), course::TimedOutput(d_scales)}, {course::TimedInput(d_x)});
    EXPECT_TRUE(course::expect_equal(d_scales.download(), want.scales, {"scales"}));
    EXPECT_TRUE(course::expect_equal(d_q.download(), want.q, {"q"}));
    // Reads x (4 bytes an element), writes q (1) and a scale per row; the copy reads and writes 4.
    course::record_bandwidth(label + " quantize", quantize_timing, 5.0 * n + 4.0 * rows, "copy",
                             8.0 * n);

    const auto dequantize_timing = course::time_against(
        [&] { dequantize_int8(d_q.data(), d_scales.data(), rows, cols, d_out.data()); }, copy_x,
        {course::TimedOutput(d_out)},
        {course::TimedInput(d_scales)});  // the scales' signs flipped: every value negated
    EXPECT_TRUE(course::expect_equal(
        d_out.download(), ref::dequantize_int8_rows(want.q, want.scales, rows, cols), {"out"}));
    // Reads q (1) and the scales, writes out (4).
    course::record_bandwidth(label + " dequantize", dequantize_timing, 5.0 * n + 4.0 * rows, "copy",
                             8.0 * n);
}

// 16384 x 4096: x 256 MiB, far above any L2.
TEST_F(QuantizeInt8, Bandwidth16384x4096) {
    auto rng = test_rng();
    time_case(16384, 4096, rng);
}

TEST_F(QuantizeInt8, MoreThan2To31Elements) {
    // 2049 rows of 2^20 (the longest the contract allows): the last row starts at element
    // 2^31, where a row offset row * cols held in an int overflows. x is made on the device; whole
    // rows at the start, around 2^31 and at the end are compared with the reference.
    const int rows = quant::kPastIntRows, cols = quant::kPastIntCols;
    const std::size_t n = quant::kPastIntElements;
    COURSE_LARGE_CASE(n * (4 + 1 + 4) + (64u << 20));
    SCOPED_TRACE(quant::kPastIntLabel);
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> d_x("x", n), d_scales("scales", rows), d_out("out", n);
    course::DeviceBuffer<std::int8_t> d_q("q", n);
    course::fill_uniform(d_x.data(), n, seed, -1.0f, 1.0f);

    course::run_large_case([&] {
        quantize_int8(d_x.data(), rows, cols, d_q.data(), d_scales.data());
        dequantize_int8(d_q.data(), d_scales.data(), rows, cols, d_out.data());
    });

    const auto windows = course::rows_past_int_range(rows, cols, rng);
    const auto reference_rows = [&](const course::Window& w) {
        return ref::quantize_int8_rows(quant::hashed_x(w, seed), w.count / cols, cols);
    };
    EXPECT_TRUE(course::expect_windows_close(
        d_q, windows, [&](const course::Window& w) { return reference_rows(w).q; },
        course::Tolerance::exact(), {"q (flat index row * cols + col)"}));
    EXPECT_TRUE(course::expect_windows_close(
        d_out, windows,
        [&](const course::Window& w) {
            const auto r = reference_rows(w);
            return ref::dequantize_int8_rows(r.q, r.scales, w.count / cols, cols);
        },
        course::Tolerance::exact(), {"out (flat index row * cols + col)"}));
}

}  // namespace
