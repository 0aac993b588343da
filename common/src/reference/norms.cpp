#include "course/reference/norms.h"

#include <algorithm>
#include <cmath>

namespace course::reference {

LayerNormForward layernorm(const std::vector<float>& x, const std::vector<float>& gamma,
                           const std::vector<float>& beta, std::size_t rows, std::size_t cols,
                           double eps) {
    LayerNormForward out{std::vector<double>(rows * cols), std::vector<double>(rows),
                         std::vector<double>(rows)};
    for (std::size_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * cols;
        // Two passes in double: the mean, then the squared deviations from it (no cancellation).
        double sum = 0.0;
        for (std::size_t c = 0; c < cols; ++c) sum += row[c];
        const double mean = sum / static_cast<double>(cols);
        double squares = 0.0;
        for (std::size_t c = 0; c < cols; ++c) squares += (row[c] - mean) * (row[c] - mean);
        const double rstd = 1.0 / std::sqrt(squares / static_cast<double>(cols) + eps);
        out.mean[r] = mean;
        out.rstd[r] = rstd;
        for (std::size_t c = 0; c < cols; ++c)
            out.y[r * cols + c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
    }
    return out;
}

LayerNormGradients layernorm_backward(const std::vector<float>& x, const std::vector<float>& dy,
                                      const std::vector<float>& gamma,
                                      const std::vector<float>& mean,
                                      const std::vector<float>& rstd, std::size_t rows,
                                      std::size_t cols) {
    LayerNormGradients out{std::vector<double>(rows * cols), std::vector<double>(cols, 0.0),
                           std::vector<double>(cols, 0.0)};
    std::vector<double> xhat(cols);
    for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t first = r * cols;
        double sum_g = 0.0, sum_g_xhat = 0.0;
        for (std::size_t c = 0; c < cols; ++c) {
            xhat[c] = (x[first + c] - static_cast<double>(mean[r])) * rstd[r];
            const double g = static_cast<double>(dy[first + c]) * gamma[c];
            sum_g += g;
            sum_g_xhat += g * xhat[c];
            out.dgamma[c] += static_cast<double>(dy[first + c]) * xhat[c];
            out.dbeta[c] += dy[first + c];
        }
        const double mean_g = sum_g / static_cast<double>(cols);
        const double mean_g_xhat = sum_g_xhat / static_cast<double>(cols);
        for (std::size_t c = 0; c < cols; ++c) {
            const double g = static_cast<double>(dy[first + c]) * gamma[c];
            out.dx[first + c] = rstd[r] * (g - mean_g - xhat[c] * mean_g_xhat);
        }
    }
    return out;
}

std::vector<double> rmsnorm(const std::vector<float>& x, const std::vector<float>& weight,
                            std::size_t rows, std::size_t cols, double eps) {
    std::vector<double> y(rows * cols);
    for (std::size_t r = 0; r < rows; ++r) {
        const float* row = x.data() + r * cols;
        double squares = 0.0;
        for (std::size_t c = 0; c < cols; ++c) squares += static_cast<double>(row[c]) * row[c];
        const double scale = 1.0 / std::sqrt(squares / static_cast<double>(cols) + eps);
        for (std::size_t c = 0; c < cols; ++c) y[r * cols + c] = row[c] * scale * weight[c];
    }
    return y;
}

CrossEntropy cross_entropy(const std::vector<float>& logits, const std::vector<int>& targets,
                           std::size_t rows, std::size_t cols) {
    CrossEntropy out{std::vector<double>(rows), std::vector<double>(rows * cols)};
    for (std::size_t r = 0; r < rows; ++r) {
        const float* row = logits.data() + r * cols;
        const double max = *std::max_element(row, row + cols);
        double sum = 0.0;  // exp(-inf - max) is 0: masked classes drop out
        for (std::size_t c = 0; c < cols; ++c) sum += std::exp(row[c] - max);
        const double logsumexp = max + std::log(sum);
        const auto target = static_cast<std::size_t>(targets[r]);
        out.losses[r] = logsumexp - row[target];
        for (std::size_t c = 0; c < cols; ++c) {
            const double p = std::exp(row[c] - logsumexp);
            out.dlogits[r * cols + c] = (p - (c == target ? 1.0 : 0.0)) / static_cast<double>(rows);
        }
    }
    return out;
}

}  // namespace course::reference
