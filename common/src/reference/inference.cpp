#include "course/reference/inference.h"

#include <cstring>
#include <stdexcept>

namespace course::reference {

DecodeOutput decode_attention(const std::vector<float>& q, const std::vector<float>& K,
                              const std::vector<float>& V, const std::vector<int>& lengths,
                              const DecodeShape& shape, double scale) {
    if (shape.kv_heads == 0 || shape.heads % shape.kv_heads != 0)
        throw std::invalid_argument("decode_attention: heads must be a multiple of kv_heads");
    const std::size_t D = shape.D;
    DecodeOutput out{std::vector<double>(shape.queries() * D),
                     std::vector<double>(shape.queries())};
    for (std::size_t b = 0; b < shape.batch; ++b)
        for (std::size_t h = 0; h < shape.heads; ++h) {
            const std::size_t row = b * shape.heads + h;
            const std::size_t cache =
                (b * shape.kv_heads + shape.kv_head_of(h)) * shape.capacity * D;
            const auto length = static_cast<std::size_t>(lengths[b]);
            if (length < 1 || length > shape.capacity)
                throw std::invalid_argument("decode_attention: a length outside [1, capacity]");
            const auto one = decode_attention_row(
                q.data() + row * D, length, D, scale,
                [&](std::size_t j, std::size_t d) { return K[cache + j * D + d]; },
                [&](std::size_t j, std::size_t d) { return V[cache + j * D + d]; });
            std::copy(one.O.begin(), one.O.end(), out.O.begin() + row * D);
            out.L[row] = one.L[0];
        }
    return out;
}

unsigned ordered_key(float value) {
    unsigned bits;
    std::memcpy(&bits, &value, 4);
    // Negative floats order backwards as integers: flip all their bits; positive ones only need
    // to land above every negative one: set the sign bit.
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

namespace {

// The distinct logit values of the tokens kept by top-k, largest first, each with its tokens'
// total weight exp((l - max) / temperature); and the top-k threshold.
struct KeptByK {
    float threshold;                               // t_k: the tokens with l >= t_k are kept
    double max;                                    // the largest logit
    std::vector<std::pair<float, double>> values;  // (value, weight of all its tokens)
    double total = 0.0;                            // Z
};

KeptByK kept_by_top_k(const float* logits, std::size_t vocab, const SamplingParams& params) {
    if (vocab == 0) throw std::invalid_argument("sampling: an empty row");
    if (!(params.temperature > 0.0f)) throw std::invalid_argument("sampling: temperature <= 0");
    std::vector<float> sorted(logits, logits + vocab);
    std::sort(sorted.begin(), sorted.end(), [](float a, float b) { return a > b; });
    if (!std::isfinite(sorted[0])) throw std::invalid_argument("sampling: no finite logit");
    KeptByK kept;
    kept.max = sorted[0];
    const bool top_k = params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab;
    kept.threshold = top_k ? sorted[params.top_k - 1] : sorted.back();
    for (std::size_t i = 0; i < vocab && sorted[i] >= kept.threshold; ++i) {
        const double weight = std::exp((static_cast<double>(sorted[i]) - kept.max) /
                                       static_cast<double>(params.temperature));
        if (kept.values.empty() || kept.values.back().first != sorted[i])
            kept.values.push_back({sorted[i], 0.0});
        kept.values.back().second += weight;
        kept.total += weight;
    }
    return kept;
}

}  // namespace

std::vector<double> sampling_distribution(const float* logits, std::size_t vocab,
                                          const SamplingParams& params) {
    const KeptByK kept = kept_by_top_k(logits, vocab, params);
    float threshold = kept.threshold;
    if (params.top_p < 1.0f) {
        // The largest value whose tokens and those above it hold top_p of the mass: walk the
        // distinct values from the largest down.
        double mass = 0.0;
        for (const auto& [value, weight] : kept.values) {
            mass += weight;
            threshold = value;
            if (mass >= static_cast<double>(params.top_p) * kept.total) break;
        }
    }
    std::vector<double> p(vocab, 0.0);
    double sum = 0.0;
    for (std::size_t i = 0; i < vocab; ++i)
        if (logits[i] >= threshold) {
            p[i] = std::exp((static_cast<double>(logits[i]) - kept.max) /
                            static_cast<double>(params.temperature));
            sum += p[i];
        }
    for (double& v : p) v /= sum;
    return p;
}

int draw(const std::vector<double>& distribution, double u) {
    double cumulative = 0.0;
    int last = -1;
    for (std::size_t i = 0; i < distribution.size(); ++i) {
        if (distribution[i] <= 0.0) continue;
        cumulative += distribution[i];
        last = static_cast<int>(i);
        if (cumulative > u) return last;
    }
    return last;
}

double draw_margin(const std::vector<double>& distribution, double u) {
    double cumulative = 0.0, margin = u;  // the boundary at 0
    for (double p : distribution) {
        if (p <= 0.0) continue;
        cumulative += p;
        margin = std::min(margin, std::fabs(cumulative - u));
    }
    return margin;
}

double top_p_margin(const float* logits, std::size_t vocab, const SamplingParams& params) {
    if (params.top_p >= 1.0f) return std::numeric_limits<double>::infinity();
    const KeptByK kept = kept_by_top_k(logits, vocab, params);
    double mass = 0.0, margin = std::numeric_limits<double>::infinity();
    for (const auto& value : kept.values) {
        mass += value.second;
        margin = std::min(margin, std::fabs(mass / kept.total - params.top_p));
    }
    return margin;
}

std::size_t speculative_accepted(const float* p, const float* q, const int* drafts,
                                 const float* uniforms, std::size_t gamma, std::size_t vocab) {
    for (std::size_t i = 0; i < gamma; ++i) {
        const int t = drafts[i];
        if (t < 0 || static_cast<std::size_t>(t) >= vocab)
            throw std::invalid_argument("speculative_verify: a draft token outside [0, vocab)");
        const double target = p[i * vocab + t], draft = q[i * vocab + t];
        if (!(draft > 0.0))
            throw std::invalid_argument("speculative_verify: a draft token of probability 0");
        if (!(uniforms[i] < target / draft)) return i;
    }
    return gamma;
}

Verification speculative_verify(const float* p, const float* q, const int* drafts,
                                const float* uniforms, double residual_uniform, std::size_t gamma,
                                std::size_t vocab) {
    const std::size_t n = speculative_accepted(p, q, drafts, uniforms, gamma, vocab);
    Verification out{static_cast<int>(n), std::vector<int>(gamma + 1, -1)};
    std::copy(drafts, drafts + n, out.tokens.begin());
    const auto r = residual_distribution(p + n * vocab, n < gamma ? q + n * vocab : nullptr, vocab);
    out.tokens[n] = draw(r, residual_uniform);
    return out;
}

std::vector<double> residual_weights(const float* p, const float* q, std::size_t vocab) {
    std::vector<double> r(vocab);
    for (std::size_t i = 0; i < vocab; ++i)
        r[i] = std::max(0.0, static_cast<double>(p[i]) - (q ? static_cast<double>(q[i]) : 0.0));
    return r;
}

std::vector<double> residual_distribution(const float* p, const float* q, std::size_t vocab) {
    std::vector<double> r = residual_weights(p, q, vocab);
    double mass = 0.0;
    for (double v : r) mass += v;
    if (!(mass > 0.0)) throw std::invalid_argument("speculative_verify: a residual of mass 0");
    for (double& v : r) v /= mass;
    return r;
}

std::vector<int> topk_indices(const float* row, std::size_t vocab, std::size_t k) {
    if (k > vocab) throw std::invalid_argument("topk: k > vocab");
    std::vector<int> order(vocab);
    for (std::size_t i = 0; i < vocab; ++i) order[i] = static_cast<int>(i);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
        const unsigned ka = ordered_key(row[a]), kb = ordered_key(row[b]);
        return ka != kb ? ka > kb : a < b;
    });
    order.resize(k);
    return order;
}

double cosine_distance(const float* x, const float* y, std::size_t D) {
    double dot = 0.0, xx = 0.0, yy = 0.0;
    for (std::size_t k = 0; k < D; ++k) {
        dot += static_cast<double>(x[k]) * y[k];
        xx += static_cast<double>(x[k]) * x[k];
        yy += static_cast<double>(y[k]) * y[k];
    }
    if (xx == 0.0 || yy == 0.0) throw std::invalid_argument("cosine_distance: a zero vector");
    return 1.0 - dot / std::sqrt(xx * yy);
}

double mean_cosine_distance(const std::vector<float>& X, std::size_t N, std::size_t D) {
    if (N < 2 || X.size() != N * D) throw std::invalid_argument("mean_cosine_distance: shape");
    std::vector<double> sum(D, 0.0);
    for (std::size_t i = 0; i < N; ++i) {
        const float* x = &X[i * D];
        double norm = 0.0;
        for (std::size_t k = 0; k < D; ++k) norm += static_cast<double>(x[k]) * x[k];
        if (norm == 0.0) throw std::invalid_argument("mean_cosine_distance: a zero row");
        norm = std::sqrt(norm);
        for (std::size_t k = 0; k < D; ++k) sum[k] += x[k] / norm;
    }
    double square = 0.0;
    for (double v : sum) square += v * v;
    const double pairs = 0.5 * static_cast<double>(N) * static_cast<double>(N - 1);
    return 1.0 - 0.5 * (square - static_cast<double>(N)) / pairs;
}

double chi_square_critical(double df) {
    // The cube root of chi-square / df is nearly normal with mean 1 - 2 / (9 df) and variance
    // 2 / (9 df); z = 4.753 leaves 1e-6 of the normal above it.
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + 4.753 * std::sqrt(a), 3.0);
}

ChiSquare chi_square(const std::vector<std::size_t>& counts, const std::vector<double>& p,
                     std::size_t draws) {
    if (counts.size() != p.size()) throw std::invalid_argument("chi_square: sizes differ");
    ChiSquare result;
    double pooled_expected = 0.0, pooled_observed = 0.0;
    const auto add = [&](double observed, double expected) {
        result.statistic += (observed - expected) * (observed - expected) / expected;
        ++result.bins;
    };
    for (std::size_t i = 0; i < p.size(); ++i) {
        const double expected = p[i] * static_cast<double>(draws);
        if (expected == 0.0) continue;
        if (expected < 5.0) {
            pooled_expected += expected;
            pooled_observed += static_cast<double>(counts[i]);
            continue;
        }
        add(static_cast<double>(counts[i]), expected);
    }
    if (pooled_expected > 0.0) add(pooled_observed, pooled_expected);
    result.critical = result.bins >= 2 ? chi_square_critical(result.bins - 1) : 0.0;
    return result;
}

}  // namespace course::reference
