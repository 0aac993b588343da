// Checker of 09_quantization/pack_int4: the packed bytes, the group scales and the unpacked values,
// bit for bit against the CPU reference (common/include/course/reference/quantize.h), on rows of
// one group up to 2^20 values, groups of different sizes (so that a scale from the wrong group, or
// from part of a group, is visibly wrong; some whose largest magnitude is negative), groups of
// zeros and exact halves, and every nibble from -8 to 7 on the way back. A failure names the rule
// it breaks: the nibble order, the sign extension, a scale per row instead of per group, a group
// reduced over half a warp, the rounding. Every case prints the format's accuracy. Then the
// bandwidth of both directions at 16384 x 4096 against a copy, and 2049 rows of 2^20 values.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/quantize.h"
#include "course/testing.h"
#include "pack_int4.h"
#include "quant_checks.h"

namespace {

namespace ref = course::reference;

class PackInt4 : public course::GpuTest {};

std::vector<std::uint8_t> swap_nibbles(std::vector<std::uint8_t> bytes) {
    for (auto& b : bytes) b = static_cast<std::uint8_t>(b << 4 | b >> 4);
    return bytes;
}

// The absmax / 7 of the first `count` values of each group only.
std::vector<float> scales_of_first(const std::vector<float>& x, std::size_t count) {
    std::vector<float> scales(x.size() / kInt4Group);
    for (std::size_t g = 0; g < scales.size(); ++g) {
        float m = 0.0f;
        for (std::size_t i = 0; i < count; ++i) m = std::fmax(m, std::fabs(x[g * kInt4Group + i]));
        scales[g] = m / 7.0f;
    }
    return scales;
}

std::string diagnose_scales(const std::vector<float>& got, const std::vector<float>& x,
                            const std::vector<float>& want, std::size_t cols) {
    const std::size_t groups = cols / kInt4Group;
    bool one_per_row = groups > 1;
    for (std::size_t g = 0; g < got.size() && one_per_row; ++g)
        if (got[g] != got[g / groups * groups]) one_per_row = false;
    if (one_per_row)
        return "every group of a row has the same scale: one scale per group of 128 values, "
               "scales[r * (cols / 128) + g]";
    if (got == scales_of_first(x, kInt4Group / 2))
        return "each scale is the absmax of the group's first 64 values only: the group's "
               "reduction must cover all 32 lanes (shuffle offsets 16, 8, 4, 2, 1)";
    std::vector<float> from_max(want.size());
    for (std::size_t g = 0; g < want.size(); ++g) {
        float m = 0.0f;
        for (std::size_t i = 0; i < kInt4Group; ++i) m = std::fmax(m, x[g * kInt4Group + i]);
        from_max[g] = m / 7.0f;
    }
    if (got == from_max)
        return "the scales are wrong only in groups whose largest magnitude is negative: the "
               "scale is max |x| / 7, the absmax, not max x / 7";
    return "";
}

std::string diagnose_packed(const std::vector<std::uint8_t>& got, const std::vector<float>& x,
                            const ref::Int4Groups& want) {
    if (got == swap_nibbles(want.packed))
        return "the two values of each byte are swapped: column 2j goes in bits 0-3 (the low "
               "nibble), column 2j + 1 in bits 4-7";
    // q by truncation, with the right scales.
    std::vector<std::uint8_t> truncated(got.size());
    for (std::size_t i = 0; i < x.size(); i += 2) {
        int q[2];
        for (int h = 0; h < 2; ++h) {
            const float s = want.scales[(i + h) / kInt4Group];
            q[h] =
                s == 0.0f
                    ? 0
                    : static_cast<int>(std::fmin(std::fmax(std::trunc(x[i + h] / s), -7.0f), 7.0f));
        }
        truncated[i / 2] = static_cast<std::uint8_t>((q[0] & 0xF) | (q[1] & 0xF) << 4);
    }
    if (got == truncated) return "q is x / scale truncated toward zero: round to nearest (rintf)";
    return "";
}

std::string diagnose_unpacked(const std::vector<float>& got, const ref::Int4Groups& in,
                              std::size_t rows, std::size_t cols) {
    // The nibbles read as 0 .. 15.
    std::vector<float> unsigned_nibbles(got.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        const int nibble = (in.packed[i / 2] >> (4 * (i % 2))) & 0xF;
        unsigned_nibbles[i] = static_cast<float>(nibble) * in.scales[i / kInt4Group];
    }
    if (got == unsigned_nibbles)
        return "the nibbles 8 .. 15 came back as 8 .. 15: they are -8 .. -1 (two's complement), "
               "extend the sign";
    if (got ==
        ref::dequantize_int4_groups(swap_nibbles(in.packed), in.scales, rows, cols, kInt4Group))
        return "the two values of each byte are swapped: column 2j is in bits 0-3";
    return "";
}

void check_case(const std::string& what, const std::vector<float>& x, int rows, int cols,
                quant::Accuracy& accuracy) {
    SCOPED_TRACE(what + ", " + std::to_string(rows) + " x " + std::to_string(cols));
    const auto want = ref::quantize_int4_groups(x, rows, cols, kInt4Group);
    const auto want_out =
        ref::dequantize_int4_groups(want.packed, want.scales, rows, cols, kInt4Group);
    const std::size_t n = x.size();
    const course::Matrix shape{static_cast<std::size_t>(rows), static_cast<std::size_t>(cols)};
    course::DeviceBuffer<float> d_x("x", x), d_scales("scales", want.scales.size()),
        d_out("out", n);
    course::DeviceBuffer<std::uint8_t> d_packed("packed", n / 2);

    pack_int4(d_x.data(), rows, cols, d_packed.data(), d_scales.data());
    const auto got_scales = d_scales.download();
    const auto got_packed = d_packed.download();
    course::CompareOptions scale_options{
        "scales (rows x cols / 128)", course::Matrix{static_cast<std::size_t>(rows),
                                                     static_cast<std::size_t>(cols / kInt4Group)}};
    scale_options.diagnose = [&] { return diagnose_scales(got_scales, x, want.scales, cols); };
    EXPECT_TRUE(course::expect_equal(got_scales, want.scales, scale_options));
    course::CompareOptions packed_options{
        "packed (rows x cols / 2 bytes)",
        course::Matrix{static_cast<std::size_t>(rows), static_cast<std::size_t>(cols / 2)}};
    packed_options.diagnose = [&] { return diagnose_packed(got_packed, x, want); };
    if (got_scales == want.scales)
        EXPECT_TRUE(course::expect_equal(got_packed, want.packed, packed_options));

    course::DeviceBuffer<std::uint8_t> d_want_packed("packed", want.packed);
    course::DeviceBuffer<float> d_want_scales("scales", want.scales);
    unpack_int4(d_want_packed.data(), d_want_scales.data(), rows, cols, d_out.data());
    const auto got_out = d_out.download();
    course::CompareOptions out_options{"out (unpacked)", shape};
    out_options.diagnose = [&] { return diagnose_unpacked(got_out, want, rows, cols); };
    EXPECT_TRUE(course::expect_equal(got_out, want_out, out_options));

    for (std::size_t i = 0; i < n; ++i)
        accuracy.add(want_out[i] - x[i], want.scales[i / kInt4Group]);
}

TEST_F(PackInt4, RowLengths) {
    auto rng = test_rng();
    quant::Accuracy weights, activations;
    // One group per row; two; 24 (GPT-2's 3072); 33 (not a multiple of the 8 groups of a block).
    for (int cols : {128, 256, 3072, 4224}) {
        const int rows = cols <= 256 ? 37 : 5;
        check_case("weight-like rows, a size per group",
                   quant::weights(rows, cols, kInt4Group, rng), rows, cols, weights);
        check_case("activation-like rows (outlier channels)", quant::activations(rows, cols, rng),
                   rows, cols, activations);
    }
    quant::record_accuracy("weights", "unpacked weight-like groups against x", weights);
    quant::record_accuracy("activations", "unpacked activation-like rows against x", activations);
}

TEST_F(PackInt4, LongestRows) {
    COURSE_SKIP_ON_EMULATOR("rows of 2^20");
    auto rng = test_rng();
    quant::Accuracy accuracy;
    check_case("rows of 2^20 (the contract's longest)", quant::weights(2, 1 << 20, kInt4Group, rng),
               2, 1 << 20, accuracy);
}

TEST_F(PackInt4, ZerosHalvesAndEveryNibble) {
    quant::Accuracy accuracy;
    // Group 0: zeros. Group 1: absmax 7 * 0.25, so the scale is 0.25 exactly, and x / scale runs
    // over -7 .. 7 in halves: ties to even, and every q from -7 to 7. Group 2: the same negated.
    std::vector<float> x(3 * kInt4Group, 0.0f);
    for (int i = 0; i < kInt4Group; ++i) {
        const float half_steps = static_cast<float>(i % 29 - 14) * 0.5f;  // -7 .. 7
        x[kInt4Group + i] = half_steps * 0.25f;
        x[2 * kInt4Group + i] = -half_steps * 0.25f;
    }
    check_case("a group of zeros, groups of exact halves", x, 1, 3 * kInt4Group, accuracy);

    // The way back alone, on bytes holding every pair of nibbles (-8 included) and scales of
    // different signs of exponent.
    std::vector<std::uint8_t> bytes(2 * kInt4Group);
    for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i);
    const std::vector<float> scales{0.5f, 3.0f, 1e-3f, 1e3f};
    const auto want = ref::dequantize_int4_groups(bytes, scales, 1, 4 * kInt4Group, kInt4Group);
    course::DeviceBuffer<std::uint8_t> d_bytes("packed", bytes);
    course::DeviceBuffer<float> d_scales("scales", scales), d_out("out", want.size());
    unpack_int4(d_bytes.data(), d_scales.data(), 1, 4 * kInt4Group, d_out.data());
    const auto got = d_out.download();
    course::CompareOptions options{"out (every byte 0x00 .. 0xFF unpacked)"};
    options.diagnose = [&] {
        return diagnose_unpacked(got, ref::Int4Groups{bytes, scales}, 1, 4 * kInt4Group);
    };
    EXPECT_TRUE(course::expect_equal(got, want, options));
}

void time_case(int rows, int cols, course::Rng& rng) {
    const std::size_t n = static_cast<std::size_t>(rows) * cols;
    // x, out, the copy's destination and the harness's two copies of out (4 bytes an element),
    // packed and the harness's two copies of it (1/2 each), the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(n * (5 * 4) + 3 * n / 2 + (256u << 20));
    const std::string label = quant::shape_label(rows, cols);
    SCOPED_TRACE(label);
    const auto x = quant::weights(rows, cols, kInt4Group, rng);
    const auto want = ref::quantize_int4_groups(x, rows, cols, kInt4Group);
    course::DeviceBuffer<float> d_x("x", x), d_scales("scales", want.scales.size()),
        d_out("out", n), d_copy("copy", n);
    course::DeviceBuffer<std::uint8_t> d_packed("packed", n / 2);
    const auto copy_x = [&] { course::baseline::device_copy(d_copy.data(), d_x.data(), 4 * n); };
    const double scale_bytes = 4.0 * want.scales.size();

    const auto pack_timing = course::time_against(
        [&] { pack_int4(d_x.data(), rows, cols, d_packed.data(), d_scales.data()); }, copy_x,
        {course::TimedOutput(d_packed), course::TimedOutput(d_scales)}, {course::TimedInput(d_x)});
    EXPECT_TRUE(course::expect_equal(d_scales.download(), want.scales, {"scales"}));
    EXPECT_TRUE(course::expect_equal(d_packed.download(), want.packed, {"packed"}));
    // Reads x (4 bytes an element), writes half a byte an element and a scale per 128; the copy
    // reads and writes 4.
    course::record_bandwidth(label + " pack", pack_timing, 4.5 * n + scale_bytes, "copy", 8.0 * n);

    const auto unpack_timing = course::time_against(
        [&] { unpack_int4(d_packed.data(), d_scales.data(), rows, cols, d_out.data()); }, copy_x,
        {course::TimedOutput(d_out)},
        {course::TimedInput(d_scales)});  // the scales' signs flipped: every value negated
    EXPECT_TRUE(course::expect_equal(
        d_out.download(),
        ref::dequantize_int4_groups(want.packed, want.scales, rows, cols, kInt4Group), {"out"}));
    course::record_bandwidth(label + " unpack", unpack_timing, 4.5 * n + scale_bytes, "copy",
                             8.0 * n);
}

TEST_F(PackInt4, Bandwidth16384x4096) {
    auto rng = test_rng();
    time_case(16384, 4096, rng);
}

TEST_F(PackInt4, MoreThan2To31Elements) {
    // 2049 rows of 2^20: group 2^24 (the first of the last row) starts at element 2^31, where a
    // float offset group * 128 held in an int overflows. x is made on the device.
    const int rows = quant::kPastIntRows, cols = quant::kPastIntCols;
    const std::size_t n = quant::kPastIntElements;
    COURSE_LARGE_CASE(n * (4 + 4) + n / 2 + (64u << 20));
    SCOPED_TRACE(quant::kPastIntLabel);
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    const std::size_t groups = n / kInt4Group;
    course::DeviceBuffer<float> d_x("x", n), d_scales("scales", groups), d_out("out", n);
    course::DeviceBuffer<std::uint8_t> d_packed("packed", n / 2);
    course::fill_uniform(d_x.data(), n, seed, -1.0f, 1.0f);

    course::run_large_case([&] {
        pack_int4(d_x.data(), rows, cols, d_packed.data(), d_scales.data());
        unpack_int4(d_packed.data(), d_scales.data(), rows, cols, d_out.data());
    });

    const auto windows = course::rows_past_int_range(rows, cols, rng);
    const auto reference_rows = [&](const course::Window& w) {
        return ref::quantize_int4_groups(quant::hashed_x(w, seed), w.count / cols, cols,
                                         kInt4Group);
    };
    std::vector<course::Window> byte_windows;
    for (const auto& w : windows) byte_windows.push_back({w.first / 2, w.count / 2});
    EXPECT_TRUE(
        course::expect_windows_close(d_packed, byte_windows,
                                     [&](const course::Window& w) {
                                         return reference_rows({2 * w.first, 2 * w.count}).packed;
                                     },
                                     course::Tolerance::exact(), {"packed (flat byte index)"}));
    EXPECT_TRUE(course::expect_windows_close(
        d_out, windows,
        [&](const course::Window& w) {
            const auto r = reference_rows(w);
            return ref::dequantize_int4_groups(r.packed, r.scales, w.count / cols, cols,
                                               kInt4Group);
        },
        course::Tolerance::exact(), {"out (flat index row * cols + col)"}));
}

}  // namespace
