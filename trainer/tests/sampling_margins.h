// How far a draw of the sampling rule (sampling.h) lies from drawing another token: the tests
// compare two computations of the rule (in double and in fixed point, on the host and on the GPU,
// from the logits of generation with and without the KV cache) only where neither's rounding nor
// the difference of their logits can move a boundary across the uniform.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "sampling.h"

namespace trainer::testing {

struct SamplingMargins {
    double draw;       // |u - c| for the nearest cumulative probability c of the kept tokens
    double top_p;      // |top_p - m| for the nearest share m of the kept mass at a distinct value
    double top_k_gap;  // the logit gap between the top_k-th largest value and its neighbours
    double top_p_gap;  // the logit gap across top-p's cut: its last kept value and the next below
};

inline SamplingMargins sampling_margins(const float* logits, int V, const SamplingParams& params,
                                        float u) {
    constexpr double kFar = std::numeric_limits<double>::infinity();
    SamplingMargins m{kFar, kFar, kFar, kFar};
    const std::vector<double> p = sampling_distribution(logits, V, params);
    double cumulative = 0.0;
    for (int i = 0; i < V; ++i) {
        if (p[i] == 0.0) continue;
        cumulative += p[i];
        m.draw = std::min(m.draw, std::fabs(cumulative - u));
    }
    std::vector<float> sorted(logits, logits + V);
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    float threshold = -std::numeric_limits<float>::infinity();
    if (params.top_k > 0 && params.top_k < V) {
        threshold = sorted[params.top_k - 1];
        // Ties past the k-th split apart when the logits move at all; else the nearest other value.
        const bool ties_past_k = sorted[params.top_k] == threshold;
        m.top_k_gap = ties_past_k ? 0.0 : threshold - sorted[params.top_k];
        for (int j = params.top_k - 2; j >= 0 && !ties_past_k; --j)
            if (sorted[j] != threshold) {
                m.top_k_gap = std::min<double>(m.top_k_gap, sorted[j] - threshold);
                break;
            }
    }
    if (params.top_p < 1.0f) {
        std::vector<double> masses;  // the kept tokens' weights, from the largest logit down
        for (float x : sorted)
            if (x >= threshold)
                masses.push_back(
                    std::exp(static_cast<double>((x - sorted[0]) / params.temperature)));
        double total = 0.0;
        for (double w : masses) total += w;
        double held = 0.0;
        for (std::size_t j = 0; j < masses.size(); ++j) {
            held += masses[j];
            if (j + 1 == masses.size() || sorted[j + 1] != sorted[j]) {
                m.top_p = std::min(m.top_p, std::fabs(held / total - params.top_p));
                // The first value whose share reaches top_p is the last kept: a value below it
                // that the other logits place above it is kept instead.
                if (m.top_p_gap == kFar && held / total >= params.top_p && j + 1 < masses.size())
                    m.top_p_gap = static_cast<double>(sorted[j]) - sorted[j + 1];
            }
        }
    }
    return m;
}

// How far two computations of the rule on the same logits may place a boundary apart: the
// weights' exp, to 2 units in the last place on the GPU (1 on the host) of a float, ~2.4e-7 of
// each, and the fixed point's truncation to 2^-40 of the largest weight.
constexpr double kSamplingRounding = 1e-6;

// Whether a computation of the rule from logits that differ from these by at most `delta` each,
// rounding its probabilities by `rounding`, could draw another token: each probability and kept
// share moves by a factor of at most e^(2 delta / temperature), and a top-k threshold with another
// value within 2 delta (or ties past the k-th, which any difference splits) may keep other tokens,
// as may a top-p cut whose last kept value and the next below lie within 2 delta: the two can
// trade places, and the kept set then holds another token, whose mass sits elsewhere in the
// vocabulary's order of the draw.
inline bool could_draw_otherwise(const SamplingMargins& m, double delta, float temperature,
                                 double rounding) {
    const double moved = std::expm1(2.0 * delta / temperature) + rounding;
    return m.draw < moved || m.top_p < moved ||
           (delta > 0.0 && (m.top_k_gap <= 2.0 * delta || m.top_p_gap <= 2.0 * delta));
}

}  // namespace trainer::testing
