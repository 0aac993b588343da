// CPU references for module 06's normalizations and loss (LayerNorm forward and backward,
// RMSNorm, cross-entropy), accumulated in double. Matrices are rows x cols, row-major.
#pragma once

#include <cstddef>
#include <vector>

namespace course::reference {

struct LayerNormForward {
    std::vector<double> y;     // rows x cols: (x - mean) * rstd * gamma + beta
    std::vector<double> mean;  // rows
    std::vector<double> rstd;  // rows: 1 / sqrt(var + eps), var the biased (divide by cols) variance
};

LayerNormForward layernorm(const std::vector<float>& x, const std::vector<float>& gamma,
                           const std::vector<float>& beta, std::size_t rows, std::size_t cols,
                           double eps);

struct LayerNormGradients {
    std::vector<double> dx;      // rows x cols
    std::vector<double> dgamma;  // cols: sum over rows of dy * xhat
    std::vector<double> dbeta;   // cols: sum over rows of dy
};

// The gradients of a LayerNorm given dy = dL/dy and the statistics its forward saved (mean and
// rstd per row, as float32: the values a GPU backward receives). With xhat = (x - mean) * rstd and
// g = dy * gamma: dx = rstd * (g - mean_c(g) - xhat * mean_c(g * xhat)).
LayerNormGradients layernorm_backward(const std::vector<float>& x, const std::vector<float>& dy,
                                      const std::vector<float>& gamma,
                                      const std::vector<float>& mean,
                                      const std::vector<float>& rstd, std::size_t rows,
                                      std::size_t cols);

// RMSNorm (Llama): y = x / sqrt(mean(x^2) + eps) * weight, per row.
std::vector<double> rmsnorm(const std::vector<float>& x, const std::vector<float>& weight,
                            std::size_t rows, std::size_t cols, double eps);

struct CrossEntropy {
    std::vector<double> losses;   // rows: logsumexp(row) - row[target]
    std::vector<double> dlogits;  // rows x cols: (softmax(row) - onehot(target)) / rows
};

// Softmax cross-entropy of each row of logits against its target class (0 <= target < cols).
// Logits may be -inf (masked classes, which get probability 0); each row needs one finite logit.
// dlogits is the gradient of the mean of the losses over the rows.
CrossEntropy cross_entropy(const std::vector<float>& logits, const std::vector<int>& targets,
                           std::size_t rows, std::size_t cols);

}  // namespace course::reference
