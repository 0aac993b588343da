#include "course/reference/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "course/random.h"

namespace {

using course::reference::attention_backward;
using course::reference::attention_forward;
using course::reference::AttentionShape;

// Values on a grid of 2^-12 in [-1, 1]: adding the finite-difference step 2^-10 to one of them is
// exact in float, so the derivative sees exactly the step it divides by.
std::vector<float> grid_values(std::size_t n, course::Rng& rng) {
    std::vector<float> values(n);
    for (float& v : values) v = std::ldexp(static_cast<float>(rng.uniform_int(-4096, 4096)), -12);
    return values;
}

// The formulas written out directly: exp(s) / sum exp(s), without the maximum.
TEST(ReferenceAttention, ForwardIsSoftmaxOfScoresTimesV) {
    auto rng = course::rng_for("attention.forward");
    const AttentionShape shape{2, 3, 5, 4};
    const auto Q = grid_values(shape.elements(), rng), K = grid_values(shape.elements(), rng),
               V = grid_values(shape.elements(), rng);
    const double scale = 0.5;
    for (bool causal : {false, true}) {
        const auto out = attention_forward(Q, K, V, shape, scale, causal);
        for (std::size_t row = 0; row < shape.rows(); ++row) {
            const std::size_t head = row / shape.T, i = row % shape.T;
            const std::size_t visible = causal ? i + 1 : shape.T;
            std::vector<double> exps(visible);
            double sum_exp = 0.0;
            for (std::size_t j = 0; j < visible; ++j) {
                double s = 0.0;
                for (std::size_t d = 0; d < shape.D; ++d)
                    s += double(Q[row * shape.D + d]) * K[(head * shape.T + j) * shape.D + d];
                exps[j] = std::exp(scale * s);  // no overflow: |s| <= 4
                sum_exp += exps[j];
            }
            EXPECT_NEAR(out.L[row], std::log(sum_exp), 1e-12);
            for (std::size_t d = 0; d < shape.D; ++d) {
                double o = 0.0;
                for (std::size_t j = 0; j < visible; ++j)
                    o += exps[j] / sum_exp * V[(head * shape.T + j) * shape.D + d];
                EXPECT_NEAR(out.O[row * shape.D + d], o, 1e-12);
            }
        }
    }
}

TEST(ReferenceAttention, CausalFirstRowIsFirstValueAndLargeLogitsStayFinite) {
    const AttentionShape shape{1, 1, 3, 2};
    const std::vector<float> Q{100, 100, 100, 100, 100, 100}, K{100, 0, 0, 100, 100, 100},
        V{1, 2, 3, 4, 5, 6};
    const auto out = attention_forward(Q, K, V, shape, 1.0, true);
    EXPECT_DOUBLE_EQ(out.O[0], 1.0);
    EXPECT_DOUBLE_EQ(out.O[1], 2.0);
    EXPECT_DOUBLE_EQ(out.L[0], 1e4);  // exp(1e4) overflows; the maximum is taken out first
    // Row 2: scores 1e4, 1e4, 2e4: key 2 takes everything.
    EXPECT_NEAR(out.O[4], 5.0, 1e-12);
    EXPECT_NEAR(out.L[2], 2e4, 1e-9);
}

// loss = sum of O * dO, so d loss / d X is the backward's dX; checked by central differences.
TEST(ReferenceAttention, BackwardMatchesFiniteDifferences) {
    auto rng = course::rng_for("attention.backward");
    const AttentionShape shape{1, 2, 6, 4};
    const auto Q = grid_values(shape.elements(), rng), K = grid_values(shape.elements(), rng),
               V = grid_values(shape.elements(), rng), dO = grid_values(shape.elements(), rng);
    const double scale = 0.7, step = std::ldexp(1.0, -10);
    for (bool causal : {false, true}) {
        SCOPED_TRACE(causal ? "causal" : "not causal");
        const auto grads = attention_backward(Q, K, V, dO, shape, scale, causal);
        const auto loss = [&](const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v) {
            const auto O = attention_forward(q, k, v, shape, scale, causal).O;
            double sum = 0.0;
            for (std::size_t e = 0; e < O.size(); ++e) sum += O[e] * dO[e];
            return sum;
        };
        const std::vector<const std::vector<double>*> analytic{&grads.dQ, &grads.dK, &grads.dV};
        for (int which = 0; which < 3; ++which) {
            for (std::size_t e = 0; e < shape.elements(); ++e) {
                std::vector<float> inputs[3] = {Q, K, V};
                inputs[which][e] += static_cast<float>(step);
                const double up = loss(inputs[0], inputs[1], inputs[2]);
                inputs[which][e] -= static_cast<float>(2 * step);
                const double down = loss(inputs[0], inputs[1], inputs[2]);
                EXPECT_NEAR((*analytic[which])[e], (up - down) / (2 * step), 2e-6)
                    << "d"
                    << "QKV"[which] << "[" << e << "]";
            }
        }
    }
}

}  // namespace
