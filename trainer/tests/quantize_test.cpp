// The trainer's fake quantization (quantize.h) pinned to module 09's formats with hand-worked
// values: INT8's scale per row and INT4's per group of 128, the float division, rounding half to
// even (not truncation, not half away from zero), the clamp at +-127 and +-7 (never -128 or -8),
// a group boundary exactly at column 128; and, on a model, only the four linear weights change,
// each within half a step of its row's or group's grid; and, where module 09's CPU references are
// in common/, the same weights as theirs, bit for bit. Runs anywhere (no GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpt.h"
#include "quantize.h"

// Module 09's CPU references of its formats (common/, with the module): a copy of the course
// without module 09 skips the test against them.
#if __has_include("course/reference/quantize.h")
#include "course/reference/quantize.h"
#define TRAINER_HAVE_QUANTIZE_REFERENCES 1
#endif

namespace trainer {
namespace {

TEST(Quantize, FormatsByName) {
    QuantFormat format = QuantFormat::w4a16;
    ASSERT_TRUE(parse_quant_format("w8a16", &format));
    EXPECT_EQ(format, QuantFormat::w8a16);
    ASSERT_TRUE(parse_quant_format("w4a16", &format));
    EXPECT_EQ(format, QuantFormat::w4a16);
    EXPECT_FALSE(parse_quant_format("int8", &format));
}

// absmax 254: scale 2, so 5, 7, -3, 1 are 2.5, 3.5, -1.5, 0.5 steps: half to even gives 2, 4, -2,
// 0 (truncation: 2, 3, -1, 0; half away from zero: 3, 4, -2, 1).
TEST(Quantize, Int8RoundsHalfToEvenWithARowsScale) {
    std::vector<float> w = {254.0f, 5.0f, 7.0f, -3.0f, 1.0f, -63.0f};
    fake_quantize_matrix(w.data(), 1, w.size(), QuantFormat::w8a16);
    EXPECT_EQ(w, (std::vector<float>{254.0f, 4.0f, 8.0f, -4.0f, 0.0f, -64.0f}));
}

// Each row has its own scale, absmax / 127 by a float division: the second row's values are
// q * (0.143f / 127.0f) exactly. 0.143f is one of the values whose quotient by 127 is not its
// product by 1 / 127 (one ulp apart): a scale computed the other way fails here.
TEST(Quantize, Int8ScalePerRowIsAbsmaxOver127) {
    const float scale = 0.143f / 127.0f;
    ASSERT_NE(scale, 0.143f * (1.0f / 127.0f));
    std::vector<float> w = {127.0f, 2.0f, -0.143f, 0.06f};
    fake_quantize_matrix(w.data(), 2, 2, QuantFormat::w8a16);
    EXPECT_EQ(w[0], 127.0f);
    EXPECT_EQ(w[1], 2.0f);
    EXPECT_EQ(w[2], -127.0f * scale);
    EXPECT_EQ(w[3], std::nearbyint(0.06f / scale) * scale);
}

// The grid is symmetric: the clamp is at -127 (-7 for INT4), so a row whose absmax is negative
// quantizes to -127, never -128, and a value past the scale's range stops at the limit.
TEST(Quantize, TheClampIsSymmetric) {
    EXPECT_EQ(quantize_value(1000.0f, 1.0f, 127), 127);
    EXPECT_EQ(quantize_value(-1000.0f, 1.0f, 127), -127);
    EXPECT_EQ(quantize_value(-128.0f, 1.0f, 127), -127);
    EXPECT_EQ(quantize_value(-8.0f, 1.0f, 7), -7);
    EXPECT_EQ(quantize_value(7.5f, 1.0f, 7), 7);
    std::vector<float> w = {-254.0f, 100.0f};
    fake_quantize_matrix(w.data(), 1, 2, QuantFormat::w8a16);
    EXPECT_EQ(w, (std::vector<float>{-254.0f, 100.0f}));
}

TEST(Quantize, AZeroRowStaysZero) {
    for (QuantFormat format : {QuantFormat::w8a16, QuantFormat::w4a16}) {
        std::vector<float> w(128, 0.0f);
        fake_quantize_matrix(w.data(), 1, w.size(), format);
        for (float x : w) EXPECT_EQ(x, 0.0f) << quant_format_name(format);
    }
}

// Row 0: group 0 (columns 0-127) has absmax 7 (scale 1), group 1 absmax 70 (scale 10). Column 127
// (3.5 steps: 4) is group 0's last and column 128 group 1's first: a boundary off by one scales
// one of them by the other group's scale. Row 1: a scale per group, not per row (group 0 keeps
// its ones at 1/7 steps of 1 / 7; group 1's scale 2 takes them to 0).
TEST(Quantize, Int4GroupsOf128AlongK) {
    std::vector<float> w(2 * 256, 1.0f);
    float* row0 = w.data();
    std::fill(row0, row0 + 256, 0.0f);
    row0[0] = 7.0f;
    row0[127] = 3.5f;
    row0[128] = 70.0f;
    row0[129] = 15.0f;  // 1.5 steps: 2
    row0[255] = 25.0f;  // 2.5 steps: 2
    w[256 + 200] = -14.0f;
    fake_quantize_matrix(w.data(), 2, 256, QuantFormat::w4a16);
    EXPECT_EQ(row0[0], 7.0f);
    EXPECT_EQ(row0[127], 4.0f);
    EXPECT_EQ(row0[128], 70.0f);
    EXPECT_EQ(row0[129], 20.0f);
    EXPECT_EQ(row0[255], 20.0f);
    const float* row1 = w.data() + 256;
    EXPECT_EQ(row1[0], 7.0f * (1.0f / 7.0f));
    EXPECT_EQ(row1[127], 7.0f * (1.0f / 7.0f));
    EXPECT_EQ(row1[128], 0.0f);  // 0.5 steps of 2: 0
    EXPECT_EQ(row1[200], -14.0f);
}

TEST(Quantize, Int4NeedsKAMultipleOf128) {
    std::vector<float> w(64, 1.0f);
    try {
        fake_quantize_matrix(w.data(), 1, 64, QuantFormat::w4a16);
        FAIL() << "K = 64 was taken";
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("K = 64 is not a multiple of 128"), std::string::npos)
            << e.what();
    }
    GptConfig tiny;
    ASSERT_TRUE(gpt_preset("tiny", 256, &tiny));
    EXPECT_NE(quant_format_refusal(tiny, QuantFormat::w4a16), "");
    EXPECT_EQ(quant_format_refusal(tiny, QuantFormat::w8a16), "");
    GptConfig small;
    ASSERT_TRUE(gpt_preset("small", 256, &small));
    EXPECT_EQ(quant_format_refusal(small, QuantFormat::w4a16), "");
}

// A model of C = 128, every parameter random: the four linear weights of every layer are on their
// format's grid, each value within half a step of where it was, with the scales recomputed here
// from each weight's own shape ([N, K]; groups along K); every other tensor is untouched, bit for
// bit.
TEST(Quantize, OnlyTheLinearWeightsChangeEachWithinHalfAStep) {
    const GptConfig config{2, 128, 2, 16, 200, padded_vocab(200)};
    const ParamLayout layout = param_layout(config);
    std::vector<float> params(layout.total);
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (float& p : params) p = normal(random);
    const std::size_t C = 128;
    struct Shape {
        ParamTensor tensor;
        std::size_t rows, cols;
    };
    const Shape shapes[] = {{kQkvWeight, 3 * C, C},
                            {kAttnProjWeight, C, C},
                            {kFcWeight, 4 * C, C},
                            {kFcProjWeight, C, 4 * C}};
    for (QuantFormat format : {QuantFormat::w8a16, QuantFormat::w4a16}) {
        SCOPED_TRACE(quant_format_name(format));
        const std::vector<float> out = fake_quantize_params(config, params, format);
        ASSERT_EQ(out.size(), params.size());
        std::vector<bool> quantized(kParamTensors, false);
        const int limit = format == QuantFormat::w8a16 ? 127 : 7;
        for (const Shape& s : shapes) {
            quantized[s.tensor] = true;
            const std::size_t block = format == QuantFormat::w8a16 ? s.cols : kInt4Group;
            const std::size_t begin = layout.offset[s.tensor];
            ASSERT_EQ(layout.size[s.tensor], config.layers * s.rows * s.cols);
            std::size_t changed = 0;
            for (std::size_t first = begin; first < begin + layout.size[s.tensor]; first += block) {
                float absmax = 0.0f;
                for (std::size_t i = first; i < first + block; ++i)
                    absmax = std::max(absmax, std::fabs(params[i]));
                const float scale = absmax / static_cast<float>(limit);
                for (std::size_t i = first; i < first + block; ++i) {
                    const float q = out[i] / scale;
                    ASSERT_NEAR(q, std::nearbyint(q), 1e-3) << param_name(s.tensor) << " at " << i;
                    ASSERT_LE(std::fabs(q), limit + 1e-3) << param_name(s.tensor) << " at " << i;
                    ASSERT_LE(std::fabs(out[i] - params[i]), 0.5f * scale * (1.0f + 1e-5f))
                        << param_name(s.tensor) << " at " << i;
                    changed += out[i] != params[i];
                }
            }
            EXPECT_GT(changed, layout.size[s.tensor] / 2) << param_name(s.tensor);
        }
        for (int t = 0; t < kParamTensors; ++t)
            if (!quantized[t])
                EXPECT_EQ(
                    std::memcmp(out.data() + layout.offset[t], params.data() + layout.offset[t],
                                layout.size[t] * sizeof(float)),
                    0)
                    << param_name(t);
    }
}

// GPT-2 124M's linear weights (12 layers of 12 C^2, C = 768): 16 bits each; a byte each and a
// float per row (9 C rows a layer); half a byte each and a float per 128.
TEST(Quantize, Gpt2LinearWeightsMemory) {
    GptConfig config;
    ASSERT_TRUE(gpt_preset("gpt2-124m", 50257, &config));
    EXPECT_EQ(linear_weight_bytes_16bit(config), 169869312u);
    EXPECT_EQ(linear_weight_bytes(config, QuantFormat::w8a16), 85266432u);
    EXPECT_EQ(linear_weight_bytes(config, QuantFormat::w4a16), 45121536u);
}

// The same dequantized weights as module 09's references (quantize_int8_rows and
// quantize_int4_groups, then their dequantization), bit for bit: random matrices of several
// widths and magnitudes, one with a row of zeros.
TEST(Quantize, MatchesModule09sReferences) {
#ifndef TRAINER_HAVE_QUANTIZE_REFERENCES
    GTEST_SKIP() << "module 09's CPU references (course/reference/quantize.h) are not in common/: "
                    "this copy of the course has no module 09";
#else
    namespace reference = course::reference;
    std::mt19937 random(3);
    for (int trial = 0; trial < 12; ++trial) {
        const std::size_t rows = 17 + trial, cols = kInt4Group * (1 + trial % 4);
        const float magnitude = trial % 3 == 0 ? 10.0f : trial % 3 == 1 ? 0.02f : 1e-3f;
        std::normal_distribution<float> normal(0.0f, magnitude);
        std::vector<float> w(rows * cols);
        for (float& x : w) x = normal(random);
        if (trial == 5) std::fill(w.begin(), w.begin() + cols, 0.0f);
        SCOPED_TRACE("trial " + std::to_string(trial));

        std::vector<float> ours = w;
        fake_quantize_matrix(ours.data(), rows, cols, QuantFormat::w8a16);
        const reference::Int8Rows int8 = reference::quantize_int8_rows(w, rows, cols);
        EXPECT_EQ(ours, reference::dequantize_int8_rows(int8.q, int8.scales, rows, cols));

        ours = w;
        fake_quantize_matrix(ours.data(), rows, cols, QuantFormat::w4a16);
        const reference::Int4Groups int4 =
            reference::quantize_int4_groups(w, rows, cols, kInt4Group);
        EXPECT_EQ(ours, reference::dequantize_int4_groups(int4.packed, int4.scales, rows, cols,
                                                          kInt4Group));
    }
#endif
}

}  // namespace
}  // namespace trainer
