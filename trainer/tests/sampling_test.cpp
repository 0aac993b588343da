// The sampling rule of generation (sampling.h) without a GPU: the rule in double on hand-worked
// rows (ties kept at the top-k threshold, the token that crosses top_p kept, the draw in vocabulary
// order, temperature, -inf never drawn), the uniforms, and the GPU sampler's fixed-point arithmetic
// run on the host (its twin) drawing what the double rule draws on many rows, bf16-rounded logits
// with their ties among them, wherever the draw is not within rounding of a boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "sampling.h"
#include "sampling_margins.h"

namespace trainer {
namespace {

TEST(Sampling, UniformsAre24BitFloatsBelowOneFromTheSeedsGenerator) {
    UniformStream uniforms(1337);
    std::mt19937_64 random(1337);
    for (int i = 0; i < 10000; ++i) {
        const float u = uniforms.next();
        ASSERT_EQ(u, static_cast<float>(random() >> 40) / 16777216.0f) << "draw " << i;
        ASSERT_GE(u, 0.0f);
        ASSERT_LT(u, 1.0f);
        ASSERT_EQ(u * 16777216.0f, std::floor(u * 16777216.0f)) << "u should be exact in 24 bits";
    }
}

std::vector<double> distribution(const std::vector<float>& logits, SamplingParams params) {
    return sampling_distribution(logits.data(), static_cast<int>(logits.size()), params);
}

TEST(Sampling, TopKKeepsEveryTokenThatTiesWithTheKthLargest) {
    // The 2nd largest counted with multiplicity is 3: the three 3s are kept, equally likely.
    const std::vector<double> p = distribution({1, 3, 3, 2, 3, 0}, {1.0f, 2, 1.0f});
    const std::vector<double> want = {0, 1.0 / 3, 1.0 / 3, 0, 1.0 / 3, 0};
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(p[i], want[i], 1e-12) << i;
}

TEST(Sampling, TopPKeepsTheTokenWhoseMassCrossesIt) {
    // Probabilities 0.5, 0.2, 0.3 (temperature 1): top_p 0.6 keeps 0.5 and the 0.3 that carries
    // the sum past 0.6; the 0.2 goes.
    const std::vector<float> logits = {std::log(0.5f), std::log(0.2f), std::log(0.3f)};
    const std::vector<double> p = distribution(logits, {1.0f, 0, 0.6f});
    EXPECT_NEAR(p[0], 0.625, 1e-6);
    EXPECT_EQ(p[1], 0.0);
    EXPECT_NEAR(p[2], 0.375, 1e-6);
    // top_p at the sum of the first exactly: the crossing token is the 0.5 alone.
    EXPECT_NEAR(distribution(logits, {1.0f, 0, 0.5f})[0], 1.0, 1e-6);
}

TEST(Sampling, TopPCountsTiedValuesTogether) {
    // Two tokens of 0.3 tie: the top-p threshold is a value, so both stay or both go.
    const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.3f)};
    const std::vector<double> p = distribution(logits, {1.0f, 0, 0.5f});
    EXPECT_NEAR(p[1], 0.3, 1e-6);
    EXPECT_NEAR(p[2], 0.3, 1e-6);
}

TEST(Sampling, DrawsInVocabularyOrder) {
    // p = 0.25, 0.75: u below 0.25 draws token 0, above it token 1 (a draw in the order of
    // probability would give the likelier token 1 for small u).
    const std::vector<float> logits = {0.0f, std::log(3.0f)};
    EXPECT_EQ(sample_token(logits.data(), 2, {}, 0.2f), 0);
    EXPECT_EQ(sample_token(logits.data(), 2, {}, 0.3f), 1);
    EXPECT_EQ(sample_token(logits.data(), 2, {}, 0.0f), 0);
}

TEST(Sampling, TemperatureDividesTheLogits) {
    const std::vector<float> logits = {0.0f, 1.0f};
    for (float temperature : {0.5f, 1.0f, 2.0f}) {
        const std::vector<double> p = distribution(logits, {temperature, 0, 1.0f});
        EXPECT_NEAR(p[1] / p[0], std::exp(1.0 / temperature), 1e-9)
            << "temperature " << temperature;
    }
}

TEST(Sampling, MinusInfinityIsNeverDrawn) {
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> logits = {-inf, 0.0f, -inf, 0.0f, -inf};
    for (float u : {0.0f, 0.49f, 0.51f, 0.999f}) {
        const int host = sample_token(logits.data(), 5, {}, u);
        const int twin = sample_token_fixed_point(logits.data(), 5, {}, u);
        EXPECT_TRUE(host == 1 || host == 3) << u;
        EXPECT_EQ(twin, host) << u;
    }
}

// A float rounded to bf16 (to nearest, ties to even): what the trainer's bf16 logits hold.
float bf16_rounded(float x) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &bits, sizeof x);
    return x;
}

// The twin against the rule on rows of a vocabulary of `V`: logits of a spread like a model's
// (normal, every other row rounded to bf16, so with ties), every setting of temperature, top-k and
// top-p below, `draws` uniforms each. A draw within their rounding of a boundary is left out; most
// are not.
void expect_twin_draws_as_the_rule(int V, int rows, int draws, std::uint64_t seed) {
    std::mt19937_64 random(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    const float temperatures[] = {0.7f, 1.0f, 1.5f};
    const int top_ks[] = {0, 1, 40, V - 1, V};
    const float top_ps[] = {1.0f, 0.95f, 0.5f, 0.05f};
    int compared = 0, left_out = 0;
    for (int row = 0; row < rows; ++row) {
        std::vector<float> logits(V);
        for (float& x : logits) x = row % 2 ? bf16_rounded(normal(random)) : normal(random);
        for (float temperature : temperatures)
            for (int top_k : top_ks)
                for (float top_p : top_ps)
                    for (int draw = 0; draw < draws; ++draw) {
                        const SamplingParams params{temperature, top_k, top_p};
                        const float u = uniform(random);
                        const testing::SamplingMargins margins =
                            testing::sampling_margins(logits.data(), V, params, u);
                        if (testing::could_draw_otherwise(margins, 0.0, temperature,
                                                          testing::kSamplingRounding)) {
                            ++left_out;
                            continue;
                        }
                        ++compared;
                        ASSERT_EQ(sample_token_fixed_point(logits.data(), V, params, u),
                                  sample_token(logits.data(), V, params, u))
                            << "row " << row << " of V " << V << ", temperature " << temperature
                            << ", top_k " << top_k << ", top_p " << top_p << ", u " << u;
                    }
    }
    EXPECT_GT(compared, 20 * left_out) << "too many draws near a boundary to say much";
    std::printf("V %d: %d draws compared, %d near a boundary\n", V, compared, left_out);
}

TEST(Sampling, FixedPointTwinDrawsAsTheRuleOnASmallVocabulary) {
    expect_twin_draws_as_the_rule(67, 40, 3, 3);
}

TEST(Sampling, FixedPointTwinDrawsAsTheRuleOnGpt2sVocabulary) {
    expect_twin_draws_as_the_rule(50257, 2, 1, 5);
}

TEST(Sampling, FixedPointTwinOnAllTiedLogits) {
    const std::vector<float> logits(100, 1.5f);
    for (int top_k : {0, 1, 10}) {
        const SamplingParams params{1.0f, top_k, 0.3f};
        // 100 equal tokens: top-k and top-p keep all of them (ties), each 1/100.
        EXPECT_EQ(sample_token_fixed_point(logits.data(), 100, params, 0.505f), 50) << top_k;
        EXPECT_EQ(sample_token(logits.data(), 100, params, 0.505f), 50) << top_k;
    }
}

TEST(Sampling, FixedPointTwinRefusesAVocabularyItsSumsCannotHold) {
    const std::vector<float> logits((1 << 23) + 1, 0.0f);
    EXPECT_THROW(sample_token_fixed_point(logits.data(), static_cast<int>(logits.size()), {}, 0.5f),
                 std::invalid_argument);
}

}  // namespace
}  // namespace trainer
