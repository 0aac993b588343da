// CPU references for the inference exercises (module 10), in double.
//
// Decode attention: one query per (sequence, head) against the first lengths[b] keys and values
// of the sequence's cache, [batch][kv_heads][capacity][D]; query head h reads key-value head
// h / (heads / kv_heads) (grouped-query attention). O = sum_j softmax(s)_j v_j and the logsumexp
// L = log sum_j exp(s_j), s_j = scale * (q . k_j). Cache positions at or past a sequence's length
// are never read (they may hold NaN).
//
// Sampling: the distribution a token is drawn from, given logits, a temperature, top-k and top-p,
// with the module's threshold semantics (ties at a threshold are all kept):
//   1. top-k (0 < k < vocab): keep the tokens whose logit is >= t_k, the k-th largest logit
//      counted with multiplicity;
//   2. weights e_i = exp((l_i - max l) / temperature) of the tokens kept so far, Z their sum;
//   3. top-p (top_p < 1): t_p is the largest logit value v such that the weights of the kept
//      tokens with l_i >= v add up to at least top_p * Z; keep the tokens with l_i >= t_p;
//   4. p_i = e_i / (sum of the kept e_i) for kept tokens, 0 for the others.
// The draw for a uniform u in [0, 1) is the first token i, in vocabulary order, whose cumulative
// probability p_0 + ... + p_i exceeds u.
//
// Speculative verification (one sequence): draft token t_i, drawn from q_i, is accepted when
// u_i < p_i(t_i) / q_i(t_i); n is the number accepted before the first rejection; then one token
// is drawn (draw() above) from the residual max(0, p_n - q_n) renormalized, or from p_gamma when
// all gamma were accepted (the bonus token).
//
// Top-k: the k largest values of a row, largest first; equal values by index, the smaller
// first; the order of values is that of ordered_key (below: -0 just below +0).
//
// Pairwise cosine distances: d_ij = 1 - x_i . x_j / (|x_i| |x_j|) for i < j, and their mean.
//
// The distribution tests of the sampling exercises: Pearson's chi-square statistic of counts
// against expected probabilities, and its critical value.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace course::reference {

struct DecodeShape {
    std::size_t batch = 1, heads = 1, kv_heads = 1, capacity = 1, D = 64;
    std::size_t queries() const { return batch * heads; }  // rows of q, O, L
    std::size_t cache_elements() const { return batch * kv_heads * capacity * D; }  // of K, V
    std::size_t kv_head_of(std::size_t head) const { return head / (heads / kv_heads); }
};

struct DecodeOutput {
    std::vector<double> O;  // [batch][heads][D]
    std::vector<double> L;  // [batch][heads]
};

// Every (sequence, head) of a decoding step. q is [batch][heads][D]; K and V are caches.
DecodeOutput decode_attention(const std::vector<float>& q, const std::vector<float>& K,
                              const std::vector<float>& V, const std::vector<int>& lengths,
                              const DecodeShape& shape, double scale);

// One query row (b, h) of it, with the cache given by element: key(j, d) and value(j, d) of that
// row's key-value head, for caches too large to hold on the host (made from a hash on the
// device). O gets D values, L one.
template <class Key, class Value>
DecodeOutput decode_attention_row(const float* q, std::size_t length, std::size_t D, double scale,
                                  Key key, Value value) {
    std::vector<double> s(length);
    double max = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < length; ++j) {
        double dot = 0.0;
        for (std::size_t d = 0; d < D; ++d) dot += static_cast<double>(q[d]) * key(j, d);
        s[j] = scale * dot;
        max = std::max(max, s[j]);
    }
    double sum = 0.0;
    std::vector<double> o(D, 0.0);
    for (std::size_t j = 0; j < length; ++j) {
        const double p = std::exp(s[j] - max);
        sum += p;
        for (std::size_t d = 0; d < D; ++d) o[d] += p * value(j, d);
    }
    for (double& v : o) v /= sum;
    return {std::move(o), {max + std::log(sum)}};
}

struct SamplingParams {
    float temperature = 1.0f;  // > 0
    int top_k = 0;             // 0: off
    float top_p = 1.0f;        // 1: off
};

// The probability of every token of one row of logits (0 for the tokens not kept).
std::vector<double> sampling_distribution(const float* logits, std::size_t vocab,
                                          const SamplingParams& params);

// The token drawn for uniform u from a distribution (sampling_distribution's): the first i whose
// cumulative probability exceeds u; the last token of positive probability if rounding leaves
// the sum below u.
int draw(const std::vector<double>& distribution, double u);

// How far u lies from the nearest cumulative boundary of the distribution (the u's at which the
// draw changes): a GPU that sums in another order or precision may draw the neighbouring token
// when u is closer than its rounding.
double draw_margin(const std::vector<double>& distribution, double u);

// How far top_p lies from the nearest cumulative mass at which the top-p threshold changes (the
// kept mass of each distinct logit value, after top-k, over Z): the same ambiguity for the
// threshold. Infinity when top_p is 1 (off).
double top_p_margin(const float* logits, std::size_t vocab, const SamplingParams& params);

// ---- Speculative decoding ----

// The result of verifying one sequence: `accepted` draft tokens kept (0 .. gamma) and the
// tokens emitted, gamma + 1 of them: the accepted drafts, the drawn token, then -1.
struct Verification {
    int accepted = 0;
    std::vector<int> tokens;
};

// p: gamma + 1 rows of `vocab` probabilities (the target's), q: gamma rows (the draft's),
// drafts: gamma tokens, uniforms: gamma, residual_uniform: the draw's.
Verification speculative_verify(const float* p, const float* q, const int* drafts,
                                const float* uniforms, double residual_uniform, std::size_t gamma,
                                std::size_t vocab);

// The number of draft tokens accepted before the first rejection (0 .. gamma).
std::size_t speculative_accepted(const float* p, const float* q, const int* drafts,
                                 const float* uniforms, std::size_t gamma, std::size_t vocab);

// max(0, p_i - q_i) for every token, not renormalized; with q == nullptr (the bonus token), p.
std::vector<double> residual_weights(const float* p, const float* q, std::size_t vocab);

// The same renormalized to sum 1 (throws when its mass is 0): what the draw after a rejection
// is drawn from.
std::vector<double> residual_distribution(const float* p, const float* q, std::size_t vocab);

// ---- Top-k ----

// The indices of the k largest values of a row, in the order above (k <= vocab).
std::vector<int> topk_indices(const float* row, std::size_t vocab, std::size_t k);

// ---- Pairwise cosine distances ----

// 1 - x . y / (|x| |y|) of two vectors of D elements, in double.
double cosine_distance(const float* x, const float* y, std::size_t D);

// The mean of d_ij over every pair i < j of the N rows of X ([N][D]), in O(N D): with unit
// vectors u_i = x_i / |x_i|, sum_{i<j} cos_ij = (|sum_i u_i|^2 - N) / 2.
double mean_cosine_distance(const std::vector<float>& X, std::size_t N, std::size_t D);

// ---- Distribution tests ----

// Pearson's statistic of `counts` (how often each token came out of `draws` draws) against the
// probabilities `p`; tokens with expected count below 5 pooled into one bin (the chi-square
// approximation needs it), tokens of probability 0 left out (the caller checks that none came
// out). `critical` is the 1 - 1e-6 quantile for `bins` - 1 degrees of freedom: a correct sampler
// exceeds it once in a million runs.
struct ChiSquare {
    double statistic = 0.0;
    int bins = 0;
    double critical = 0.0;
};
ChiSquare chi_square(const std::vector<std::size_t>& counts, const std::vector<double>& p,
                     std::size_t draws);

// The 1 - 1e-6 quantile of the chi-square distribution with `df` degrees of freedom
// (Wilson-Hilferty).
double chi_square_critical(double df);

// The logits' ordered key: an unsigned integer that orders as the floats do (-0 just below +0),
// the digits of the radix selects of the module's sampling and top-k.
unsigned ordered_key(float value);

}  // namespace course::reference
