#include "course/reference/norms.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

namespace {

using course::reference::cross_entropy;
using course::reference::layernorm;
using course::reference::layernorm_backward;
using course::reference::rmsnorm;

TEST(ReferenceNorms, LayerNormOfKnownRow) {
    // mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25 (eps 0 keeps it exact).
    const auto out = layernorm({1, 2, 3, 4}, {1, 2, 1, 1}, {0, 0, 0, 1}, 1, 4, 0.0);
    const double rstd = 1.0 / std::sqrt(1.25);
    EXPECT_DOUBLE_EQ(out.mean[0], 2.5);
    EXPECT_DOUBLE_EQ(out.rstd[0], rstd);
    EXPECT_DOUBLE_EQ(out.y[0], -1.5 * rstd);
    EXPECT_DOUBLE_EQ(out.y[1], -0.5 * rstd * 2);
    EXPECT_DOUBLE_EQ(out.y[2], 0.5 * rstd);
    EXPECT_DOUBLE_EQ(out.y[3], 1.5 * rstd + 1);
}

TEST(ReferenceNorms, LayerNormOfConstantRowIsBeta) {
    const auto out = layernorm({3, 3, 3}, {2, 2, 2}, {0.5f, -1, 0}, 1, 3, 1e-5);
    EXPECT_EQ(out.y, (std::vector<double>{0.5, -1, 0}));
    EXPECT_DOUBLE_EQ(out.rstd[0], 1.0 / std::sqrt(1e-5));
}

// Central differences of a scalar function of one float input. Inputs and the step are on a
// 2^-12 grid, so the perturbed values are exact floats.
double numeric_derivative(std::vector<float>& values, std::size_t i,
                          const std::function<double()>& f) {
    const float h = 0x1.0p-12f, saved = values[i];
    values[i] = saved + h;
    const double up = f();
    values[i] = saved - h;
    const double down = f();
    values[i] = saved;
    return (up - down) / (2.0 * h);
}

std::vector<float> grid_values(std::size_t count, int seed) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i)
        v[i] = static_cast<float>(static_cast<int>((i * 37 + seed * 11) % 29) - 14) / 8.0f;
    return v;
}

TEST(ReferenceNorms, LayerNormBackwardMatchesFiniteDifferences) {
    const std::size_t rows = 3, cols = 5;
    const double eps = 1e-5;
    auto x = grid_values(rows * cols, 1), gamma = grid_values(cols, 2), beta = grid_values(cols, 3);
    const auto dy = grid_values(rows * cols, 4);
    // L = sum(dy * y): its gradients are what layernorm_backward computes.
    const std::function<double()> loss = [&] {
        const auto y = layernorm(x, gamma, beta, rows, cols, eps).y;
        double sum = 0.0;
        for (std::size_t i = 0; i < y.size(); ++i) sum += dy[i] * y[i];
        return sum;
    };
    const auto forward = layernorm(x, gamma, beta, rows, cols, eps);
    const std::vector<float> mean(forward.mean.begin(), forward.mean.end());
    const std::vector<float> rstd(forward.rstd.begin(), forward.rstd.end());
    const auto grads = layernorm_backward(x, dy, gamma, mean, rstd, rows, cols);
    // The backward uses float32 statistics: a relative difference of ~1e-7 is theirs.
    for (std::size_t i = 0; i < x.size(); ++i)
        EXPECT_NEAR(grads.dx[i], numeric_derivative(x, i, loss), 1e-5) << "dx[" << i << "]";
    for (std::size_t c = 0; c < cols; ++c) {
        EXPECT_NEAR(grads.dgamma[c], numeric_derivative(gamma, c, loss), 1e-5) << "dgamma[" << c << "]";
        EXPECT_NEAR(grads.dbeta[c], numeric_derivative(beta, c, loss), 1e-5) << "dbeta[" << c << "]";
    }
}

TEST(ReferenceNorms, RmsNormOfKnownRow) {
    // mean of squares (9 + 16) / 2 = 12.5
    const auto y = rmsnorm({3, 4}, {1, 2}, 1, 2, 0.0);
    EXPECT_DOUBLE_EQ(y[0], 3 / std::sqrt(12.5));
    EXPECT_DOUBLE_EQ(y[1], 8 / std::sqrt(12.5));
}

TEST(ReferenceNorms, CrossEntropyOfKnownRows) {
    const float inf = INFINITY;
    // Row 0: two equal logits, p = 1/2 each. Row 1: the other class is masked, p = 1, loss 0.
    const auto out = cross_entropy({0, 0, 0, -inf}, {0, 0}, 2, 2);
    EXPECT_DOUBLE_EQ(out.losses[0], std::log(2.0));
    EXPECT_DOUBLE_EQ(out.losses[1], 0.0);
    // (p - onehot) / rows, rows = 2
    EXPECT_EQ(out.dlogits, (std::vector<double>{-0.25, 0.25, 0, 0}));
}

TEST(ReferenceNorms, CrossEntropyGradientMatchesFiniteDifferences) {
    const std::size_t rows = 3, cols = 6;
    auto logits = grid_values(rows * cols, 5);
    const std::vector<int> targets{0, 5, 2};
    const std::function<double()> mean_loss = [&] {
        double sum = 0.0;
        for (double l : cross_entropy(logits, targets, rows, cols).losses) sum += l;
        return sum / rows;
    };
    const auto out = cross_entropy(logits, targets, rows, cols);
    for (std::size_t i = 0; i < logits.size(); ++i)
        EXPECT_NEAR(out.dlogits[i], numeric_derivative(logits, i, mean_loss), 1e-7)
            << "dlogits[" << i << "]";
}

}  // namespace
