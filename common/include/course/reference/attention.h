// CPU references for attention (module 07), in double: the forward pass with its per-row
// logsumexp, and the backward pass (the gradients of a scalar loss with respect to Q, K and V,
// given dO, its gradient with respect to O).
//
// Layout: Q, K, V, O and the gradients are [batch][heads][T][D], row-major, D contiguous; L is
// [batch][heads][T]. For each head (b, h), with s_ij = scale * (q_i . k_j) and, when causal, only
// keys j <= i visible:
//   L_i = log sum_j exp(s_ij)            (computed as m_i + log sum_j exp(s_ij - m_i), m_i = max_j
//   s_ij) P_ij = exp(s_ij - L_i),  O_i = sum_j P_ij v_j
// and backward, with D_i = dO_i . O_i:
//   dV_j = sum_i P_ij dO_i,  dP_ij = dO_i . v_j,  dS_ij = P_ij (dP_ij - D_i),
//   dQ_i = scale * sum_j dS_ij k_j,  dK_j = scale * sum_i dS_ij q_i.
// Each is a handful of loops, the formulas written out; their test (reference_attention_test.cpp)
// checks the forward against a naive softmax and the backward against finite differences.
#pragma once

#include <cstddef>
#include <vector>

namespace course::reference {

struct AttentionShape {
    std::size_t batch = 1, heads = 1, T = 1, D = 1;
    std::size_t heads_total() const { return batch * heads; }
    std::size_t elements() const { return batch * heads * T * D; }  // of Q, K, V, O
    std::size_t rows() const { return batch * heads * T; }          // of L
};

struct AttentionOutput {
    std::vector<double> O;  // [B][H][T][D]
    std::vector<double> L;  // [B][H][T]
};

// The forward pass of every head.
AttentionOutput attention_forward(const std::vector<float>& Q, const std::vector<float>& K,
                                  const std::vector<float>& V, const AttentionShape& shape,
                                  double scale, bool causal);

// One query row: O_i (D values) and L_i for row `row` of L (head row / T, position row % T), for
// outputs too large to compute whole on the CPU.
AttentionOutput attention_forward_row(const std::vector<float>& Q, const std::vector<float>& K,
                                      const std::vector<float>& V, const AttentionShape& shape,
                                      double scale, bool causal, std::size_t row);

struct AttentionGradients {
    std::vector<double> dQ, dK, dV;  // [B][H][T][D] each
};

// The backward pass, P recomputed in double from Q and K. D_i = dO_i . O_i from `O` where it is
// given (the rounded O that the code under test receives, so that both see the same D), else
// from the exact forward.
AttentionGradients attention_backward(const std::vector<float>& Q, const std::vector<float>& K,
                                      const std::vector<float>& V, const std::vector<float>& dO,
                                      const AttentionShape& shape, double scale, bool causal,
                                      const std::vector<float>* O = nullptr);

}  // namespace course::reference
