// Checker of 09_quantization/mxfp8: the E4M3 codes, the E8M0 scales and the dequantized values,
// bit for bit against a CPU reference written from the OCP MX specification
// (common/include/course/reference/quantize.h; its E4M3 rounding agrees with cuda_fp8.h's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) on every float tried). Blocks of sizes
// 2^-20 .. 2^20 apart; blocks that clip (x / X past 448), that hold exact ties, E4M3 subnormals,
// values that round to -0, float32 subnormals (X at its least, 2^-127) and values near float32's
// largest (X = 2^119); every code of E4M3 (the NaNs too) with E8M0 scales from 2^-127 to 2^127 and
// NaN on the way back. A failure names the rule it breaks: E8M0's bias, the shared exponent's
// offset of 8, the absmax, the rounding (toward zero), the saturation (0x7F is NaN), the sign of
// zero, the subnormals. Every case prints the format's accuracy (the error in E4M3 steps times X,
// and the clipped values apart). Then the bandwidth at 16384 x 4096 and 2049 rows of 2^20 values.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/quantize.h"
#include "course/testing.h"
#include "mxfp8.h"
#include "quant_checks.h"

namespace {

namespace ref = course::reference;

class Mxfp8 : public course::GpuTest {};

// ---- Codes under other rules, for the diagnoses ----

// E4M3 of a magnitude whose mantissa is cut to 3 bits (rounded toward zero), subnormals rounded
// to nearest, saturating as the spec does.
std::uint8_t e4m3_truncated(double a) {
    if (a >= 448.0) return 0x7E;
    if (a < 0x1p-6) return static_cast<std::uint8_t>(std::nearbyint(a * 512.0));
    int e = 0;
    std::frexp(a, &e);
    const int exponent = e - 1;
    const int m = static_cast<int>(std::floor(std::ldexp(a, 3 - exponent)));
    return static_cast<std::uint8_t>(((exponent + 7) << 3) | (m - 8));
}

// The elements with a rule of our own for each x / X (its magnitude) and its sign bit.
template <class Rule>
std::vector<std::uint8_t> elements_by(const std::vector<float>& x,
                                      const std::vector<std::uint8_t>& scales, Rule rule) {
    std::vector<std::uint8_t> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double scaled = std::ldexp(static_cast<double>(x[i]), 127 - scales[i / kMxBlock]);
        out[i] = rule(std::fabs(scaled), std::signbit(x[i]) ? 0x80 : 0x00);
    }
    return out;
}

std::string diagnose_scales(const std::vector<std::uint8_t>& got, const std::vector<float>& x,
                            const std::vector<std::uint8_t>& want) {
    bool plus_one = true, minus_one = true, plus_eight = true;
    for (std::size_t b = 0; b < want.size(); ++b) {
        plus_one = plus_one && got[b] == want[b] + 1;
        minus_one = minus_one && got[b] + 1 == want[b];
        plus_eight = plus_eight && (want[b] == 0 || got[b] == want[b] + 8);
    }
    if (plus_one || minus_one)
        return "every scale byte is one off: E8M0 stores the shared exponent s as s + 127 (its "
               "bias is 127, as float32's)";
    if (plus_eight)
        return "every scale is 2^8 too large: s = floor(log2(absmax)) - 8, 8 being the largest "
               "exponent of E4M3 (448 = 1.75 * 2^8), so that the block's largest value lands in "
               "E4M3's top binade";
    std::vector<std::uint8_t> from_max(want.size());
    for (std::size_t b = 0; b < want.size(); ++b) {
        float m = 0.0f;
        for (int i = 0; i < kMxBlock; ++i) m = std::fmax(m, x[b * kMxBlock + i]);
        from_max[b] = static_cast<std::uint8_t>(ref::mx_shared_exponent(m) + 127);
    }
    if (got == from_max)
        return "the scales are wrong only in blocks whose largest magnitude is negative: the "
               "shared exponent comes from max |x|, not max x";
    return "";
}

std::string diagnose_elements(const std::vector<std::uint8_t>& got, const std::vector<float>& x,
                              const ref::MxBlocks& want) {
    if (got == elements_by(x, want.scales, [](double a, int sign) {
            return static_cast<std::uint8_t>(sign | e4m3_truncated(a));
        }))
        return "the elements are rounded toward zero (the dropped mantissa bits cut off): round "
               "to nearest, ties to even (add 0x7FFFF plus the lowest kept bit, then cut)";
    bool nan_codes = false, sign_lost = false, subnormals_flushed = true, any = false;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (got[i] == want.elements[i]) continue;
        any = true;
        if ((got[i] & 0x7F) == 0x7F) nan_codes = true;
        if (got[i] == (want.elements[i] & 0x7F) && want.elements[i] == 0x80) sign_lost = true;
        if (!(got[i] == (want.elements[i] & 0x80) && (want.elements[i] & 0x78) == 0))
            subnormals_flushed = false;
    }
    if (nan_codes)
        return "some elements are 0x7F or 0xFF, E4M3's NaN: past 448 (after the rounding too) "
               "the spec saturates to 0x7E / 0xFE, +-448";
    if (sign_lost)
        return "negative values that round to zero came out as 0x00: the sign is kept, -0 is 0x80";
    if (any && subnormals_flushed)
        return "the E4M3 subnormals came out as zero: below 2^-6 (times X) the codes are m * 2^-9, "
               "m = 1 .. 7, with exponent field 0";
    return "";
}

std::string diagnose_out(const std::vector<float>& got, const std::vector<float>& want) {
    bool only_nans = true, any = false;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!(got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i])))) {
            any = true;
            if (!std::isnan(want[i])) only_nans = false;
        }
    if (any && only_nans)
        return "out is a number where it should be NaN: the E4M3 codes 0x7F and 0xFF (S.1111.111) "
               "and the E8M0 scale 255 are NaN";
    for (double factor : {2.0, 0.5}) {
        bool all = true;
        for (std::size_t i = 0; i < got.size() && all; ++i)
            all = !(want[i] != 0.0f && std::isfinite(want[i])) || got[i] == want[i] * factor;
        if (all)
            return "out is off by a factor " + std::to_string(factor).substr(0, 3) +
                   " everywhere: X = 2^(scale - 127), E8M0's bias is 127";
    }
    return "";
}

// The accuracy of a block-quantized x: each error in steps of E4M3 at x / X, times X; the clipped
// values (x / X past 448) apart.
void add_accuracy(const std::vector<float>& x, const ref::MxBlocks& q,
                  const std::vector<float>& back, quant::Accuracy& accuracy) {
    for (std::size_t i = 0; i < x.size(); ++i) {
        const double X = ref::e8m0_decode(q.scales[i / kMxBlock]);
        const double scaled = std::fabs(x[i]) / X;
        accuracy.add(back[i] - x[i], ref::e4m3_step(scaled) * X, scaled > 448.0);
    }
}

void check_case(const std::string& what, const std::vector<float>& x, int rows, int cols,
                quant::Accuracy& accuracy) {
    SCOPED_TRACE(what + ", " + std::to_string(rows) + " x " + std::to_string(cols));
    const auto want = ref::quantize_mxfp8(x, rows, cols);
    const auto want_out = ref::dequantize_mxfp8(want.elements, want.scales, rows, cols);
    const std::size_t n = x.size();
    const course::Matrix shape{static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)};
    course::DeviceBuffer<float> d_x("x", x), d_out("out", n);
    course::DeviceBuffer<std::uint8_t> d_elements("elements", n),
        d_scales("scales", want.scales.size());

    mxfp8_quantize(d_x.data(), rows, cols, d_elements.data(), d_scales.data());
    const auto got_scales = d_scales.download();
    const auto got_elements = d_elements.download();
    course::CompareOptions scale_options{
        "scales (E8M0, rows x cols / 32)",
        course::Matrix{static_cast<std::size_t>(rows), static_cast<std::size_t>(cols / kMxBlock)}};
    scale_options.diagnose = [&] { return diagnose_scales(got_scales, x, want.scales); };
    EXPECT_TRUE(course::expect_equal(got_scales, want.scales, scale_options));
    course::CompareOptions element_options{"elements (E4M3 codes)", shape};
    element_options.diagnose = [&] { return diagnose_elements(got_elements, x, want); };
    if (got_scales == want.scales)
        EXPECT_TRUE(course::expect_equal(got_elements, want.elements, element_options));

    course::DeviceBuffer<std::uint8_t> d_want_elements("elements", want.elements),
        d_want_scales("scales", want.scales);
    mxfp8_dequantize(d_want_elements.data(), d_want_scales.data(), rows, cols, d_out.data());
    const auto got_out = d_out.download();
    course::CompareOptions out_options{"out (dequantized)", shape};
    out_options.diagnose = [&] { return diagnose_out(got_out, want_out); };
    EXPECT_TRUE(course::expect_equal(got_out, want_out, out_options));
    add_accuracy(x, want, want_out, accuracy);
}

TEST_F(Mxfp8, RowLengths) {
    auto rng = test_rng();
    quant::Accuracy weights, activations;
    // One block per row; two; three (not a multiple of a warp's four blocks); many.
    for (int cols : {32, 64, 96, 4096, 4128}) {
        const int rows = cols <= 96 ? 37 : 5;
        check_case("blocks of sizes 2^-20 .. 2^20", quant::weights(rows, cols, kMxBlock, rng, 20),
                   rows, cols, weights);
        check_case("activation-like rows (outlier channels)", quant::activations(rows, cols, rng),
                   rows, cols, activations);
    }
    quant::record_accuracy("weights", "dequantized blocks against x, in E4M3 steps times X",
                           weights);
    quant::record_accuracy("activations", "dequantized activation-like rows against x",
                           activations);
}

TEST_F(Mxfp8, SpecialBlocks) {
    quant::Accuracy accuracy;
    std::vector<float> x;
    const auto block = [&](auto value) {
        for (int i = 0; i < kMxBlock; ++i) x.push_back(value(i));
    };
    block([](int) { return 0.0f; });  // zeros: X = 2^-127 (E8M0 0), every element 0
    // absmax 500: X = 1, 500 and 460 clip to 448; the rest spread over E4M3's binades.
    block([](int i) { return i == 0 ? 500.0f : i == 1 ? -460.0f : std::ldexp(1.5f, i % 12 - 3); });
    // absmax 256 (X = 1): exact ties between neighbours (1.0625 between 1 and 1.125, 3 * 2^-10
    // between 2^-9 and 2^-8), E4M3 subnormals (k * 2^-9), values below half of 2^-9 (to zero).
    block([](int i) {
        const float values[8] = {256.0f,  1.0625f,   -1.1875f, 0x3p-10f,
                                 0x5p-9f, -0x1p-11f, 0x1p-10f, 3.0f};
        return values[i % 8];
    });
    // -1e-30 / X rounds to -0 (0x80), and -0 is 0x80 too.
    block([](int i) { return i % 2 ? (i % 4 == 1 ? -1e-30f : -0.0f) : 1.0f; });
    // float32 subnormals: absmax below 2^-126, so s is held at -127.
    block(
        [](int i) { return std::numeric_limits<float>::denorm_min() * static_cast<float>(i + 1); });
    // Near float32's largest: s = 119, X = 2^119.
    block([](int i) { return (i % 3 ? -1.0f : 1.0f) * 3e38f / static_cast<float>(i + 1); });
    // The largest magnitude negative.
    block([](int i) { return i == 7 ? -300.0f : static_cast<float>(i); });
    check_case("special blocks", x, 1, static_cast<int>(x.size()), accuracy);
}

TEST_F(Mxfp8, EveryCodeBack) {
    // Every E4M3 code (both NaNs too) under E8M0 scales 0 (2^-127), 1, 100, 127 (1), 200, 254
    // (2^127) and 255 (NaN), in blocks of 32: 8 blocks of codes per scale.
    const std::vector<std::uint8_t> scale_bytes{0, 1, 100, 127, 200, 254, 255};
    std::vector<std::uint8_t> elements, scales;
    for (std::uint8_t s : scale_bytes)
        for (int code = 0; code < 256; ++code) {
            elements.push_back(static_cast<std::uint8_t>(code));
            if (code % kMxBlock == 0) scales.push_back(s);
        }
    const int cols = 256, rows = static_cast<int>(scale_bytes.size());
    const auto want = ref::dequantize_mxfp8(elements, scales, rows, cols);
    course::DeviceBuffer<std::uint8_t> d_elements("elements", elements), d_scales("scales", scales);
    course::DeviceBuffer<float> d_out("out", want.size());
    mxfp8_dequantize(d_elements.data(), d_scales.data(), rows, cols, d_out.data());
    const auto got = d_out.download();
    course::CompareOptions options{"out (row: a scale byte, column: an E4M3 code)",
                                   course::Matrix{static_cast<std::size_t>(rows), 256}};
    options.diagnose = [&] { return diagnose_out(got, want); };
    EXPECT_TRUE(course::expect_equal(got, want, options));
    // A NaN expected is matched by any NaN, the never-written poison too: those must be written.
    std::size_t unwritten_nans = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (std::isnan(want[i]) && course::is_poison(got[i])) ++unwritten_nans;
    EXPECT_EQ(unwritten_nans, 0u) << "`out`: " << unwritten_nans
                                  << " elements that should be NaN (an E4M3 NaN code or the E8M0 "
                                     "scale 255) were never written";
}

void time_case(int rows, int cols, course::Rng& rng) {
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    // x, out, the copy's destination, the harness's two copies of out (4 bytes an element), the
    // elements and the harness's two copies of them, the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(n * (5 * 4 + 3) + (256u << 20));
    const std::string label = quant::shape_label(rows, cols);
    SCOPED_TRACE(label);
    const auto x = quant::weights(rows, cols, kMxBlock, rng, 20);
    const auto want = ref::quantize_mxfp8(x, rows, cols);
    course::DeviceBuffer<float> d_x("x", x), d_out("out", n), d_copy("copy", n);
    course::DeviceBuffer<std::uint8_t> d_elements("elements", n),
        d_scales("scales", want.scales.size());
    const auto copy_x = [&] { course::baseline::device_copy(d_copy.data(), d_x.data(), 4 * n); };

    const auto quantize_timing = course::time_against(
        [&] { mxfp8_quantize(d_x.data(), rows, cols, d_elements.data(), d_scales.data()); }, copy_x,
        {course::TimedOutput(d_elements), course::TimedOutput(d_scales)},
        {course::TimedInput(d_x)});
    EXPECT_TRUE(course::expect_equal(d_scales.download(), want.scales, {"scales"}));
    EXPECT_TRUE(course::expect_equal(d_elements.download(), want.elements, {"elements"}));
    // Reads x (4 bytes an element), writes an element (1) and a scale per 32; the copy reads and
    // writes 4.
    const double bytes = 5.0 * n + n / kMxBlock;
    course::record_bandwidth(label + " quantize", quantize_timing, bytes, "copy", 8.0 * n);

    const auto dequantize_timing = course::time_against(
        [&] { mxfp8_dequantize(d_elements.data(), d_scales.data(), rows, cols, d_out.data()); },
        copy_x, {course::TimedOutput(d_out)},
        {course::TimedInput(d_elements, std::uint8_t{0x80})});  // signs flipped (E4M3 bit 7)
    EXPECT_TRUE(course::expect_equal(
        d_out.download(), ref::dequantize_mxfp8(want.elements, want.scales, rows, cols), {"out"}));
    course::record_bandwidth(label + " dequantize", dequantize_timing, bytes, "copy", 8.0 * n);
}

TEST_F(Mxfp8, Bandwidth16384x4096) {
    auto rng = test_rng();
    time_case(16384, 4096, rng);
}

TEST_F(Mxfp8, MoreThan2To31Elements) {
    // 2049 rows of 2^20: the last row starts at element 2^31. x is made on the device.
    const int rows = quant::kPastIntRows, cols = quant::kPastIntCols;
    const std::size_t n = quant::kPastIntElements;
    COURSE_LARGE_CASE(n * (4 + 1 + 4) + (64u << 20));
    SCOPED_TRACE(quant::kPastIntLabel);
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> d_x("x", n), d_out("out", n);
    course::DeviceBuffer<std::uint8_t> d_elements("elements", n), d_scales("scales", n / kMxBlock);
    course::fill_uniform(d_x.data(), n, seed, -1.0f, 1.0f);

    course::run_large_case([&] {
        mxfp8_quantize(d_x.data(), rows, cols, d_elements.data(), d_scales.data());
        mxfp8_dequantize(d_elements.data(), d_scales.data(), rows, cols, d_out.data());
    });

    const auto windows = course::rows_past_int_range(rows, cols, rng);
    const auto reference_rows = [&](const course::Window& w) {
        return ref::quantize_mxfp8(quant::hashed_x(w, seed), w.count / cols, cols);
    };
    EXPECT_TRUE(course::expect_windows_close(
        d_elements, windows, [&](const course::Window& w) { return reference_rows(w).elements; },
        course::Tolerance::exact(), {"elements (flat index row * cols + col)"}));
    EXPECT_TRUE(course::expect_windows_close(
        d_out, windows,
        [&](const course::Window& w) {
            const auto r = reference_rows(w);
            return ref::dequantize_mxfp8(r.elements, r.scales, w.count / cols, cols);
        },
        course::Tolerance::exact(), {"out (flat index row * cols + col)"}));
}

}  // namespace
