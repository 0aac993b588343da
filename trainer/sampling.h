// Sampling the next token from a row of logits: the rule, the random numbers, and the rule
// computed two ways: in double on the host (sample_token: generation without a KV cache samples
// with it), and in the fixed-point arithmetic of the reference's GPU sampler (ops_generation.cu),
// whose pieces are here so that the sampler and its host twin (sample_token_fixed_point, for the
// CPU tests) share them.
//
// The rule, module 10's `sample` contract's (ties at a threshold are all kept):
//  1. top-k, where 0 < top_k < V: keep the tokens whose logit is >= t_k, the top_k-th largest
//     logit counted with multiplicity (more than top_k tokens where others tie with it);
//  2. the weights e_i = exp((l_i - max l) / temperature) of the tokens kept, Z their sum;
//  3. top-p, where top_p < 1: t_p is the largest logit v of a kept token such that the kept tokens
//     with l_i >= v hold at least top_p * Z; keep those (the token whose weight carries the sum
//     past top_p * Z is kept);
//  4. p_i = e_i / (the sum of the kept e_i); the token drawn for a uniform u in [0, 1) is the
//     first kept token, in vocabulary order, whose cumulative probability exceeds u.
// Two computations of the rule draw the same token for the same u unless u (or top_p) lies within
// their rounding of a boundary of the cumulative probabilities: sampling_distribution gives the
// boundaries, and the tests keep their draws away from them.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "course/host_device.h"

namespace trainer {

struct SamplingParams {
    float temperature = 1.0f;  // > 0
    int top_k = 0;             // 0 (or V and more): every token
    float top_p = 1.0f;        // in (0, 1]; 1: every token
};

// The uniform numbers of a generation, one per sequence and token: the seed's std::mt19937_64,
// each draw's top 24 bits over 2^24, so a float in [0, 1) that is exact (the host's rule and the
// GPU read the same number), never 1. Generation draws them in order, the sequences of a step
// one after another: the same seed gives the same numbers with the KV cache or without.
class UniformStream {
  public:
    explicit UniformStream(std::uint64_t seed) : random_(seed) {}
    float next() { return static_cast<float>(random_() >> 40) * 0x1p-24f; }

  private:
    std::mt19937_64 random_;
};

// The probability the rule gives each of the V tokens (0 for those it does not keep), in double.
std::vector<double> sampling_distribution(const float* logits, int V, const SamplingParams& params);

// The token the rule draws for u, from sampling_distribution: the first kept token whose
// cumulative probability exceeds u (the last kept one where rounding leaves the sum below u).
int sample_token(const float* logits, int V, const SamplingParams& params, float u);

// The same rule in the reference GPU sampler's arithmetic, sequentially (the sampler's host twin):
// masses in fixed point, both thresholds by a radix select over the logits' keys, the draw an
// integer comparison. V up to 2^23.
int sample_token_fixed_point(const float* logits, int V, const SamplingParams& params, float u);

// ---- The pieces the GPU sampler and its host twin share ----
namespace sampling {

// A token's weight e_i in fixed point, e_i * 2^40 truncated: sums of them are exact integers, the
// same in any order (the GPU adds them with atomics), and 2^23 tokens sum below 2^63.
using Mass = unsigned long long;
constexpr float kFixedPoint = 0x1p40f;
constexpr int kMaxVocab = 1 << 23;

// A radix select runs over 32-bit keys 8 bits at a time, the most significant digit first.
constexpr int kDigitBits = 8;
constexpr int kBins = 1 << kDigitBits;
constexpr int kFirstShift = 32 - kDigitBits;

// An unsigned integer that orders as the float does (-0 just below +0): the select's key.
COURSE_HOST_DEVICE inline unsigned ordered_key(float value) {
    unsigned bits;
    memcpy(&bits, &value, sizeof bits);  // the float's bits (a register move on the GPU)
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// e_i of a logit, given the row's largest and the temperature; -inf weighs 0.
COURSE_HOST_DEVICE inline Mass mass(float logit, float largest, float temperature) {
    return static_cast<Mass>(expf((logit - largest) / temperature) * kFixedPoint);
}

// The digits above this round's (the bits of the prefix chosen so far).
COURSE_HOST_DEVICE inline unsigned digits_above(int shift) {
    return shift == kFirstShift ? 0u : ~0u << (shift + kDigitBits);
}

// One round of a select: the digit, walking down from the top, at which the weight of the keys
// above (`above`, updated) and in the digit's bin reaches `need`.
COURSE_HOST_DEVICE inline unsigned choose_digit(const Mass* bins, Mass need, Mass* above) {
    int digit = kBins - 1;
    while (digit > 0 && *above + bins[digit] < need) *above += bins[digit--];
    return static_cast<unsigned>(digit);
}

// The kept mass that top_p asks for (at least 1, so the select ends on a token).
COURSE_HOST_DEVICE inline Mass top_p_need(float top_p, Mass total) {
    const Mass need = static_cast<Mass>(ceil(static_cast<double>(top_p) * total));
    return need > 0 ? need : 1;
}

// The draw in fixed point: the first kept token whose inclusive prefix of kept masses exceeds it.
COURSE_HOST_DEVICE inline Mass draw_target(float u, Mass total) {
    return static_cast<Mass>(static_cast<double>(u) * total);
}

}  // namespace sampling
}  // namespace trainer
