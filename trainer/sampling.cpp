// trainer/sampling: the sampling rule on the host, in double (what generation without a KV cache
// draws with) and in the GPU sampler's fixed-point arithmetic (its host twin, for the tests).
//
// Teaches: that top-k and top-p are thresholds on the logits, not sorts: the double version finds
// them by selection and by summing the weights of the distinct values from the top; the
// fixed-point version by a radix select over the logits' bits, as the GPU does.
//
// Interface: sampling.h. Tests: tests/sampling_test.cpp (CPU), tests/generation_test.cu (GPU).
#include "sampling.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

namespace trainer {

std::vector<double> sampling_distribution(const float* logits, int V,
                                          const SamplingParams& params) {
    const float largest = *std::max_element(logits, logits + V);
    // 1. top-k: the top_k-th largest logit, counted with multiplicity, and everything up to it.
    float threshold = -std::numeric_limits<float>::infinity();
    if (params.top_k > 0 && params.top_k < V) {
        std::vector<float> values(logits, logits + V);
        std::nth_element(values.begin(), values.begin() + (params.top_k - 1), values.end(),
                         std::greater<float>());
        threshold = values[params.top_k - 1];
    }
    // 2. the weights of the kept tokens: exp of (l_i - max) / temperature as the GPU computes it,
    // in float (the difference of two logits rounds), exp itself in double.
    std::vector<double> p(V, 0.0);
    double total = 0.0;
    for (int i = 0; i < V; ++i)
        if (logits[i] >= threshold)
            total += p[i] =
                std::exp(static_cast<double>((logits[i] - largest) / params.temperature));
    // 3. top-p: the distinct kept values from the top, until their tokens hold top_p of the mass.
    if (params.top_p < 1.0f) {
        std::vector<int> order;
        for (int i = 0; i < V; ++i)
            if (p[i] > 0.0) order.push_back(i);
        std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
        const double need = static_cast<double>(params.top_p) * total;
        double held = 0.0;
        for (std::size_t j = 0; j < order.size(); ++j) {
            held += p[order[j]];
            const bool value_ends =
                j + 1 == order.size() || logits[order[j + 1]] != logits[order[j]];
            if (value_ends && held >= need) {
                threshold = logits[order[j]];
                break;
            }
        }
        for (int i = 0; i < V; ++i)
            if (logits[i] < threshold) p[i] = 0.0;
    }
    // 4. normalized over what is kept.
    double kept = 0.0;
    for (double w : p) kept += w;
    for (double& w : p) w /= kept;
    return p;
}

int sample_token(const float* logits, int V, const SamplingParams& params, float u) {
    const std::vector<double> p = sampling_distribution(logits, V, params);
    double cumulative = 0.0;
    int last = 0;
    for (int i = 0; i < V; ++i) {
        if (p[i] == 0.0) continue;
        cumulative += p[i];
        last = i;
        if (cumulative > u) return i;
    }
    return last;
}

namespace {

using sampling::Mass;

// The largest key v such that the weights of the row's tokens with key >= v add up to `need` or
// more (0 < need <= the row's total weight): four rounds of the select, each a histogram of the
// keys that match the digits chosen so far, by their next digit.
template <typename Weight>
unsigned select_threshold(const float* row, int V, Mass need, Weight weight) {
    unsigned prefix = 0;
    Mass above = 0;
    for (int shift = sampling::kFirstShift; shift >= 0; shift -= sampling::kDigitBits) {
        Mass bins[sampling::kBins] = {};
        const unsigned chosen = sampling::digits_above(shift);
        for (int i = 0; i < V; ++i) {
            const unsigned key = sampling::ordered_key(row[i]);
            if ((key & chosen) == prefix)
                bins[(key >> shift) & (sampling::kBins - 1)] += weight(row[i], key);
        }
        prefix |= sampling::choose_digit(bins, need, &above) << shift;
    }
    return prefix;
}

}  // namespace

int sample_token_fixed_point(const float* logits, int V, const SamplingParams& params, float u) {
    if (V > sampling::kMaxVocab)
        throw std::invalid_argument("sampling: a vocabulary of " + std::to_string(V) +
                                    " is more than the fixed-point sums hold (2^23)");
    const float largest = *std::max_element(logits, logits + V);
    unsigned threshold = 0;  // below every key: keeps every token
    if (params.top_k > 0 && params.top_k < V)
        threshold = select_threshold(logits, V, static_cast<Mass>(params.top_k),
                                     [](float, unsigned) { return Mass{1}; });
    const auto kept_mass = [&](float logit, unsigned key) -> Mass {
        return key >= threshold ? sampling::mass(logit, largest, params.temperature) : 0;
    };
    const auto total_kept = [&] {
        Mass total = 0;
        for (int i = 0; i < V; ++i) total += kept_mass(logits[i], sampling::ordered_key(logits[i]));
        return total;
    };
    if (params.top_p < 1.0f)
        threshold = select_threshold(logits, V, sampling::top_p_need(params.top_p, total_kept()),
                                     kept_mass);
    const Mass target = sampling::draw_target(u, total_kept());
    Mass prefix = 0;
    for (int i = 0; i < V; ++i) {
        prefix += kept_mass(logits[i], sampling::ordered_key(logits[i]));
        if (prefix > target) return i;
    }
    throw std::logic_error("sampling: the draw found no token (the target is below the total)");
}

}  // namespace trainer
