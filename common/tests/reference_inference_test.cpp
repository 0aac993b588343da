#include "course/reference/inference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace {

namespace ref = course::reference;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- Decode attention ----

TEST(ReferenceDecodeAttention, KnownValues) {
    // Two keys with scores 0 and ln 3: weights 1 : 3, so O = (v0 + 3 v1) / 4, L = ln 4.
    ref::DecodeShape shape{1, 1, 1, 2, 1};
    const std::vector<float> q{1.0f}, K{0.0f, static_cast<float>(std::log(3.0))}, V{4.0f, 8.0f};
    const auto out = ref::decode_attention(q, K, V, {2}, shape, 1.0);
    EXPECT_NEAR(out.O[0], 7.0, 1e-6);  // ln 3 rounded to a float
    EXPECT_NEAR(out.L[0], std::log(4.0), 1e-7);
}

TEST(ReferenceDecodeAttention, PositionsPastTheLengthAreNeverRead) {
    // Capacity 4, length 2: NaN in positions 2 and 3 must not reach O or L.
    ref::DecodeShape shape{1, 1, 1, 4, 2};
    const std::vector<float> q{0.5f, -1.0f};
    const std::vector<float> K{1, 2, 3, 4, kNan, kNan, kNan, kNan};
    const std::vector<float> V{1, -1, 2, -2, kNan, kNan, kNan, kNan};
    const auto out = ref::decode_attention(q, K, V, {2}, shape, 0.7);
    for (double o : out.O) EXPECT_TRUE(std::isfinite(o));
    EXPECT_TRUE(std::isfinite(out.L[0]));
}

TEST(ReferenceDecodeAttention, GroupedQueryHeadsReadTheirGroupsCache) {
    // 4 query heads over 2 key-value heads is 4 heads over the caches [kv0, kv0, kv1, kv1].
    const std::size_t capacity = 5, D = 3;
    ref::DecodeShape gqa{2, 4, 2, capacity, D}, mha{2, 4, 4, capacity, D};
    std::vector<float> q(2 * 4 * D), K(2 * 2 * capacity * D), V(K.size());
    for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(1.0f + i);
    for (std::size_t i = 0; i < K.size(); ++i) K[i] = std::cos(0.3f * i), V[i] = std::sin(0.7f * i);
    std::vector<float> K4, V4;
    for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t h = 0; h < 4; ++h) {
            const std::size_t from = (b * 2 + h / 2) * capacity * D;
            K4.insert(K4.end(), K.begin() + from, K.begin() + from + capacity * D);
            V4.insert(V4.end(), V.begin() + from, V.begin() + from + capacity * D);
        }
    const std::vector<int> lengths{5, 3};
    const auto a = ref::decode_attention(q, K, V, lengths, gqa, 0.5);
    const auto b = ref::decode_attention(q, K4, V4, lengths, mha, 0.5);
    for (std::size_t i = 0; i < a.O.size(); ++i) EXPECT_DOUBLE_EQ(a.O[i], b.O[i]);
    for (std::size_t i = 0; i < a.L.size(); ++i) EXPECT_DOUBLE_EQ(a.L[i], b.L[i]);
}

TEST(ReferenceDecodeAttention, LargeScoresDoNotOverflow) {
    // Scores of 1e4: exp overflows unless the maximum is taken out first.
    ref::DecodeShape shape{1, 1, 1, 2, 1};
    const auto out = ref::decode_attention({1e4f}, {1.0f, 1.0f}, {2.0f, 4.0f}, {2}, shape, 1.0);
    EXPECT_NEAR(out.O[0], 3.0, 1e-12);
    EXPECT_NEAR(out.L[0], 1e4 + std::log(2.0), 1e-9);
}

// ---- Sampling ----

TEST(ReferenceSampling, OrderedKeyOrdersAsTheFloats) {
    std::vector<float> values{-kInf, -3e38f, -2.5f, -1.0f, -1e-38f, -0.0f,
                              0.0f,  1e-38f, 1.0f,  2.5f,  3e38f,   kInf};
    for (std::size_t i = 1; i < values.size(); ++i)
        EXPECT_LT(ref::ordered_key(values[i - 1]), ref::ordered_key(values[i])) << values[i];
}

TEST(ReferenceSampling, PlainSoftmaxWithTemperature) {
    const float logits[] = {0.0f, static_cast<float>(std::log(3.0))};
    const auto p = ref::sampling_distribution(logits, 2, {1.0f, 0, 1.0f});
    EXPECT_NEAR(p[0], 0.25, 1e-7);
    EXPECT_NEAR(p[1], 0.75, 1e-7);
    // Temperature 0.5 squares the ratio: 1 : 9.
    const auto sharp = ref::sampling_distribution(logits, 2, {0.5f, 0, 1.0f});
    EXPECT_NEAR(sharp[0], 0.1, 1e-7);
}

TEST(ReferenceSampling, TopKKeepsEveryTieAtTheThreshold) {
    // k = 2: the 2nd largest logit is 3, held by tokens 1 and 3: both kept, with token 0's 5.
    const float logits[] = {5.0f, 3.0f, 1.0f, 3.0f, 2.0f};
    const auto p = ref::sampling_distribution(logits, 5, {1.0f, 2, 1.0f});
    EXPECT_GT(p[0], 0.0);
    EXPECT_GT(p[1], 0.0);
    EXPECT_GT(p[3], 0.0);
    EXPECT_DOUBLE_EQ(p[1], p[3]);
    EXPECT_EQ(p[2], 0.0);
    EXPECT_EQ(p[4], 0.0);
    EXPECT_NEAR(p[0] + p[1] + p[3], 1.0, 1e-12);
}

TEST(ReferenceSampling, TopPKeepsTheTokenThatCrossesP) {
    // Probabilities 0.5, 0.3, 0.2 (logits ln 5, ln 3, ln 2): top_p 0.6 needs 0.5 + 0.3, so the
    // second token, the one whose mass crosses 0.6, is kept; top_p 0.5 needs the first only.
    const float logits[] = {static_cast<float>(std::log(2.0)), static_cast<float>(std::log(5.0)),
                            static_cast<float>(std::log(3.0))};
    const auto p = ref::sampling_distribution(logits, 3, {1.0f, 0, 0.6f});
    EXPECT_EQ(p[0], 0.0);
    EXPECT_NEAR(p[1], 0.5 / 0.8, 1e-7);
    EXPECT_NEAR(p[2], 0.3 / 0.8, 1e-7);
    const auto first = ref::sampling_distribution(logits, 3, {1.0f, 0, 0.5f});
    EXPECT_NEAR(first[1], 1.0, 1e-7);
    EXPECT_EQ(first[2], 0.0);
    // The cumulative masses are 0.5, 0.8 and 1: the nearest to 0.6 is 0.5.
    EXPECT_NEAR(ref::top_p_margin(logits, 3, {1.0f, 0, 0.6f}), 0.1, 1e-7);
}

TEST(ReferenceSampling, TopPAfterTopKUsesTheKeptMass) {
    // Four equal-ish tokens and k = 2: top_p 0.6 of the two kept is both of them (each holds
    // 0.5 of the kept mass), though two tokens hold only 0.5 of the whole row.
    const float logits[] = {1.0f, 1.0f, 0.0f, 0.0f};
    const auto p = ref::sampling_distribution(logits, 4, {1.0f, 2, 0.6f});
    EXPECT_NEAR(p[0], 0.5, 1e-12);
    EXPECT_NEAR(p[1], 0.5, 1e-12);
}

TEST(ReferenceSampling, MinusInfinityIsNeverKeptWithWeight) {
    const float logits[] = {-kInf, 0.0f, -kInf};
    const auto p = ref::sampling_distribution(logits, 3, {1.0f, 3, 1.0f});
    EXPECT_EQ(p[0], 0.0);
    EXPECT_EQ(p[1], 1.0);
    EXPECT_EQ(ref::draw(p, 0.999), 1);
}

TEST(ReferenceSampling, DrawWalksTheVocabularyInOrder) {
    const std::vector<double> p{0.0, 0.25, 0.0, 0.5, 0.25};
    EXPECT_EQ(ref::draw(p, 0.0), 1);
    EXPECT_EQ(ref::draw(p, 0.2499), 1);
    EXPECT_EQ(ref::draw(p, 0.25), 3);  // "exceeds": the boundary belongs to the next token
    EXPECT_EQ(ref::draw(p, 0.7499), 3);
    EXPECT_EQ(ref::draw(p, 0.9999), 4);
    EXPECT_NEAR(ref::draw_margin(p, 0.3), 0.05, 1e-12);
    EXPECT_NEAR(ref::draw_margin(p, 0.01), 0.01, 1e-12);
}

// ---- Speculative decoding ----

TEST(ReferenceSpeculative, AcceptsWhileTheUniformIsBelowTheRatio) {
    // gamma 2, vocab 3. Position 0: t = 1, p/q = 0.3/0.6 = 0.5: u = 0.4 accepts. Position 1:
    // t = 2, p/q = 0.1/0.6: u = 0.3 rejects; the residual max(0, p_1 - q_1) is
    // (0.4, 0.1, 0)/0.5 = (0.8, 0.2, 0): u = 0.9 draws token 1.
    const float p[] = {0.5f, 0.3f, 0.2f, 0.5f, 0.4f, 0.1f, 1.0f, 0.0f, 0.0f};
    const float q[] = {0.2f, 0.6f, 0.2f, 0.1f, 0.3f, 0.6f};
    const int drafts[] = {1, 2};
    const float uniforms[] = {0.4f, 0.3f};
    const auto out = ref::speculative_verify(p, q, drafts, uniforms, 0.9, 2, 3);
    EXPECT_EQ(out.accepted, 1);
    EXPECT_EQ(out.tokens, (std::vector<int>{1, 1, -1}));
    // u = 0.7 < 0.8: token 0 from the residual.
    EXPECT_EQ(ref::speculative_verify(p, q, drafts, uniforms, 0.7, 2, 3).tokens[1], 0);
}

TEST(ReferenceSpeculative, StopsAtTheFirstRejection) {
    // Position 0 rejects (p/q = 0.1/0.9); position 1 would accept: it is never tested, and the
    // residual of position 0, (0.8, 0)/0.8, draws token 0.
    const float p[] = {0.9f, 0.1f, 0.5f, 0.5f, 0.5f, 0.5f};
    const float q[] = {0.1f, 0.9f, 0.5f, 0.5f};
    const int drafts[] = {1, 0};
    const float uniforms[] = {0.5f, 0.0f};
    const auto out = ref::speculative_verify(p, q, drafts, uniforms, 0.99, 2, 2);
    EXPECT_EQ(out.accepted, 0);
    EXPECT_EQ(out.tokens, (std::vector<int>{0, -1, -1}));
}

TEST(ReferenceSpeculative, AllAcceptedDrawsTheBonusTokenFromTheLastTargetRow) {
    // p == q accepts everything (the ratio is 1, every uniform is below it); the bonus token
    // comes from p_gamma = (0.25, 0.75).
    const float p[] = {0.5f, 0.5f, 0.25f, 0.75f};
    const float q[] = {0.5f, 0.5f};
    const int drafts[] = {1};
    const float uniforms[] = {0.9999f};
    const auto out = ref::speculative_verify(p, q, drafts, uniforms, 0.3, 1, 2);
    EXPECT_EQ(out.accepted, 1);
    EXPECT_EQ(out.tokens, (std::vector<int>{1, 1}));
}

TEST(ReferenceSpeculative, TheResidualIsRenormalized) {
    const float p[] = {0.6f, 0.3f, 0.1f}, q[] = {0.2f, 0.2f, 0.6f};
    const auto w = ref::residual_weights(p, q, 3);
    EXPECT_NEAR(w[0], 0.4, 1e-7);
    EXPECT_NEAR(w[1], 0.1, 1e-7);
    EXPECT_EQ(w[2], 0.0);
    const auto r = ref::residual_distribution(p, q, 3);
    EXPECT_NEAR(r[0], 0.8, 1e-6);
    EXPECT_NEAR(r[1], 0.2, 1e-6);
    EXPECT_THROW(ref::residual_distribution(p, p, 3), std::invalid_argument);
}

TEST(ReferenceSpeculative, OutputFollowsTheTargetDistribution) {
    // Summed over the draft's tokens and the uniforms, the first token comes out with
    // probability min(p, q) + (1 - beta) r = p exactly: integrate over a grid of uniforms.
    const float p[] = {0.5f, 0.2f, 0.3f, 1.0f, 0.0f, 0.0f}, q[] = {0.1f, 0.6f, 0.3f};
    std::vector<double> got(3, 0.0);
    const int grid = 2000;
    for (int t = 0; t < 3; ++t)
        for (int a = 0; a < grid; ++a)
            for (int c = 0; c < 20; ++c) {
                const float u = (a + 0.5f) / grid;
                const auto out = ref::speculative_verify(p, q, &t, &u, (c + 0.5) / 20, 1, 3);
                got[out.tokens[0]] += q[t] / (grid * 20.0);
            }
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-3) << i;
}

// ---- Top-k ----

TEST(ReferenceTopK, LargestFirstTiesBySmallerIndex) {
    // k = 4: 9 (index 4), then the three 5s at 1, 3 and 6 compete for three places; the 2 is out.
    const float row[] = {2.0f, 5.0f, 1.0f, 5.0f, 9.0f, -3.0f, 5.0f};
    EXPECT_EQ(ref::topk_indices(row, 7, 4), (std::vector<int>{4, 1, 3, 6}));
    // k = 3: the tie at the threshold keeps the smallest indices, 1 and 3, not 6.
    EXPECT_EQ(ref::topk_indices(row, 7, 3), (std::vector<int>{4, 1, 3}));
    EXPECT_EQ(ref::topk_indices(row, 7, 7), (std::vector<int>{4, 1, 3, 6, 0, 2, 5}));
}

TEST(ReferenceTopK, InfinitiesAndSignedZeros) {
    // +inf first, -inf last; -0 just below +0 (the order of the floats' keys).
    const float row[] = {-0.0f, -kInf, 0.0f, kInf, -1.0f};
    EXPECT_EQ(ref::topk_indices(row, 5, 5), (std::vector<int>{3, 2, 0, 4, 1}));
    EXPECT_THROW(ref::topk_indices(row, 5, 6), std::invalid_argument);
}

// ---- Pairwise cosine distances ----

TEST(ReferencePairwiseCosine, KnownDistances) {
    const float x[] = {1.0f, 0.0f}, y[] = {0.0f, 3.0f}, z[] = {-2.0f, 0.0f}, w[] = {5.0f, 5.0f};
    EXPECT_NEAR(ref::cosine_distance(x, y, 2), 1.0, 1e-15);  // orthogonal
    EXPECT_NEAR(ref::cosine_distance(x, z, 2), 2.0, 1e-15);  // opposite, whatever the norms
    EXPECT_NEAR(ref::cosine_distance(x, x, 2), 0.0, 1e-15);
    EXPECT_NEAR(ref::cosine_distance(x, w, 2), 1.0 - std::sqrt(0.5), 1e-15);
}

TEST(ReferencePairwiseCosine, MeanEqualsTheAverageOverPairs) {
    const std::size_t N = 7, D = 5;
    std::vector<float> X(N * D);
    for (std::size_t i = 0; i < X.size(); ++i) X[i] = std::sin(0.7f * i + 1.0f) * (1 + i % 3);
    double sum = 0.0;
    for (std::size_t i = 0; i < N; ++i)
        for (std::size_t j = i + 1; j < N; ++j)
            sum += ref::cosine_distance(&X[i * D], &X[j * D], D);
    EXPECT_NEAR(ref::mean_cosine_distance(X, N, D), sum / (N * (N - 1) / 2), 1e-12);
}

// ---- Distribution tests ----

TEST(ReferenceChiSquare, CriticalValuesAreTheOneInAMillionQuantiles) {
    // Exact quantiles (numerical inversion of the incomplete gamma function): 46.86 at 10
    // degrees of freedom, 97.65 at 40, 182.13 at 100. Wilson-Hilferty errs high, a little.
    EXPECT_GE(ref::chi_square_critical(10), 46.86);
    EXPECT_LE(ref::chi_square_critical(10), 48.5);
    EXPECT_NEAR(ref::chi_square_critical(40), 97.65, 1.0);
    EXPECT_NEAR(ref::chi_square_critical(100), 182.13, 0.5);
}

TEST(ReferenceChiSquare, StatisticPoolsTheRareTokens) {
    // 100 draws over p = (0.5, 0.46, 0.02, 0.02, 0): the last but one two expect 2 each and
    // are pooled (expected 4, observed 6); the last has probability 0 and no bin.
    const std::vector<double> p{0.5, 0.46, 0.02, 0.02, 0.0};
    const auto result = ref::chi_square({44, 50, 5, 1, 0}, p, 100);
    EXPECT_EQ(result.bins, 3);
    EXPECT_NEAR(result.statistic, 36.0 / 50 + 16.0 / 46 + 4.0 / 4, 1e-12);
    EXPECT_NEAR(result.critical, ref::chi_square_critical(2), 1e-12);
}

}  // namespace
