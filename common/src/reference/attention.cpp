#include "course/reference/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace course::reference {

namespace {

double dot(const float* a, const float* b, std::size_t n) {
    double sum = 0.0;
    for (std::size_t k = 0; k < n; ++k) sum += static_cast<double>(a[k]) * b[k];
    return sum;
}

// Keys visible to query i: 0..i when causal, all T otherwise.
std::size_t visible_keys(std::size_t i, std::size_t T, bool causal) { return causal ? i + 1 : T; }

// P_i (the probabilities of query row `row`, `visible` of them) and L_i, of one head whose
// Q, K start at q, k.
double probabilities(const float* q_row, const float* k, std::size_t D, std::size_t visible,
                     double scale, std::vector<double>& p) {
    p.resize(visible);
    double max = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < visible; ++j) {
        p[j] = scale * dot(q_row, k + j * D, D);
        max = std::max(max, p[j]);
    }
    double sum = 0.0;
    for (std::size_t j = 0; j < visible; ++j) sum += std::exp(p[j] - max);
    const double L = max + std::log(sum);
    for (std::size_t j = 0; j < visible; ++j) p[j] = std::exp(p[j] - L);
    return L;
}

}  // namespace

AttentionOutput attention_forward_row(const std::vector<float>& Q, const std::vector<float>& K,
                                      const std::vector<float>& V, const AttentionShape& shape,
                                      double scale, bool causal, std::size_t row) {
    const std::size_t T = shape.T, D = shape.D, head = row / T, i = row % T;
    const float* k = K.data() + head * T * D;
    const float* v = V.data() + head * T * D;
    std::vector<double> p;
    const double L = probabilities(Q.data() + row * D, k, D, visible_keys(i, T, causal), scale, p);
    AttentionOutput out{std::vector<double>(D, 0.0), {L}};
    for (std::size_t j = 0; j < p.size(); ++j)
        for (std::size_t d = 0; d < D; ++d) out.O[d] += p[j] * v[j * D + d];
    return out;
}

AttentionOutput attention_forward(const std::vector<float>& Q, const std::vector<float>& K,
                                  const std::vector<float>& V, const AttentionShape& shape,
                                  double scale, bool causal) {
    AttentionOutput out;
    out.O.reserve(shape.elements());
    out.L.reserve(shape.rows());
    for (std::size_t row = 0; row < shape.rows(); ++row) {
        const auto one = attention_forward_row(Q, K, V, shape, scale, causal, row);
        out.O.insert(out.O.end(), one.O.begin(), one.O.end());
        out.L.push_back(one.L[0]);
    }
    return out;
}

AttentionGradients attention_backward(const std::vector<float>& Q, const std::vector<float>& K,
                                      const std::vector<float>& V, const std::vector<float>& dO,
                                      const AttentionShape& shape, double scale, bool causal,
                                      const std::vector<float>* O) {
    const std::size_t T = shape.T, D = shape.D;
    AttentionGradients g{std::vector<double>(shape.elements(), 0.0),
                         std::vector<double>(shape.elements(), 0.0),
                         std::vector<double>(shape.elements(), 0.0)};
    const auto forward = attention_forward(Q, K, V, shape, scale, causal);
    std::vector<double> p;
    for (std::size_t head = 0; head < shape.heads_total(); ++head) {
        const std::size_t base = head * T * D;
        for (std::size_t i = 0; i < T; ++i) {
            const std::size_t qi = base + i * D;
            probabilities(Q.data() + qi, K.data() + base, D, visible_keys(i, T, causal), scale, p);
            double Di = 0.0;  // D_i = dO_i . O_i
            for (std::size_t d = 0; d < D; ++d)
                Di += static_cast<double>(dO[qi + d]) * (O ? (*O)[qi + d] : forward.O[qi + d]);
            for (std::size_t j = 0; j < p.size(); ++j) {
                const std::size_t kj = base + j * D;
                const double dP = dot(dO.data() + qi, V.data() + kj, D);
                const double dS = p[j] * (dP - Di);
                for (std::size_t d = 0; d < D; ++d) {
                    g.dV[kj + d] += p[j] * dO[qi + d];
                    g.dQ[qi + d] += scale * dS * K[kj + d];
                    g.dK[kj + d] += scale * dS * Q[qi + d];
                }
            }
        }
    }
    return g;
}

}  // namespace course::reference
