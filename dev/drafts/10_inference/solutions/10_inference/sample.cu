// 10_inference/sample: temperature, top-k and top-p sampling of a token from each row of logits,
// with thresholds found by radix select instead of a sort.
//
// Teaches: what a sampler computes (a softmax with a temperature, restricted to the top k tokens
// and to the nucleus holding top_p of the probability); why no sort is needed: both cuts are a
// threshold on the logits, found by a radix select over their bits (a histogram of 256 digits,
// four rounds), with counts for top-k and probability mass for top-p; sums that do not depend on
// the order of the additions (integers in fixed point), so that a sample is the same on every
// run; the draw itself, a block-wide scan in vocabulary order. The checker compares your tokens
// with a reference on fixed draws and tests their distribution over 65536 draws (chi-square).
//
// Run:  grader run 10/sample                 Stuck:  grader hint 10/sample
// Contract: sample.h                         Notes:  notes/10_inference.md
#include <cfloat>

#include "course/exercise.h"
#include "sample.h"

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;
constexpr int kBins = 256;  // one radix digit: 8 bits of the key
// Probabilities as integers, p * 2^40: a float p <= 1 times a power of two is exact, so every
// p above 2^-16 keeps all its bits, and a vocabulary of 2^18 sums to at most 2^58. Integer sums
// give the same bits in any order: shared-memory atomics and reductions stay deterministic, and
// the thresholds and the draw see exactly the same masses.
constexpr float kFixedPoint = 0x1.0p40f;

using Mass = unsigned long long;

// An unsigned integer that orders as the float does: the radix select's key.
__device__ inline unsigned ordered_key(float value) {
    const unsigned bits = __float_as_uint(value);
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// The sum (or maximum) of one value per thread, the result in every thread.
__device__ inline Mass block_sum(Mass value, Mass* partials) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
    __syncthreads();
    Mass total = 0;
    for (int w = 0; w < kWarps; ++w) total += partials[w];
    __syncthreads();  // partials is reused by the next call
    return total;
}
__device__ inline float block_max(float value, float* partials) {
    for (int offset = 16; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
    __syncthreads();
    float result = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) result = fmaxf(result, partials[w]);
    __syncthreads();
    return result;
}

// The shared memory of the selects.
struct SelectShared {
    Mass bins[kBins];
    unsigned prefix;
    Mass above;
};

// The largest key v such that the weights of the row's tokens with key >= v add up to at least
// `need` (0 < need <= the row's total weight). Four rounds of 8 bits, the most significant
// first: each histograms, by their next digit, the keys that match the digits chosen so far,
// and picks the digit at which the weight counted down from the top reaches `need`. weight(i,
// key) is 1 for top-k (a count), the token's mass for top-p.
template <class Weight>
__device__ unsigned select_threshold(const float* row, int vocab, Mass need, Weight weight,
                                     SelectShared& shared) {
    unsigned prefix = 0;  // the digits chosen so far, in their places
    Mass above = 0;       // the weight of the keys above the prefix's range
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < kBins; d += kBlock) shared.bins[d] = 0;
        __syncthreads();
        const unsigned chosen = shift == 24 ? 0u : ~0u << (shift + 8);  // the digits above
        for (int i = threadIdx.x; i < vocab; i += kBlock) {
            const unsigned key = ordered_key(row[i]);
            if ((key & chosen) != prefix) continue;
            const Mass w = weight(i, key);
            if (w != 0) atomicAdd(&shared.bins[(key >> shift) & 0xFF], w);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            // 256 digits walked by one thread: a few hundred cycles per round, next to the
            // thousands a round's pass over the row takes.
            int d = kBins - 1;
            while (d > 0 && above + shared.bins[d] < need) above += shared.bins[d--];
            shared.prefix = prefix | static_cast<unsigned>(d) << shift;
            shared.above = above;
        }
        __syncthreads();
        prefix = shared.prefix;
        above = shared.above;
    }
    return prefix;
}

__global__ void sample_kernel(const float* logits, const float* uniforms, int* tokens, int vocab,
                              float temperature, int top_k, float top_p) {
    __shared__ SelectShared select;
    __shared__ Mass mass_partials[kWarps];
    __shared__ float max_partials[kWarps];
    const float* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;

    float largest = -FLT_MAX;
    for (int i = threadIdx.x; i < vocab; i += kBlock) largest = fmaxf(largest, row[i]);
    largest = block_max(largest, max_partials);
    // A token's mass: e_i = exp((l_i - max) / temperature) in fixed point; -inf gives 0.
    const auto mass = [&](int i) {
        return static_cast<Mass>(expf((row[i] - largest) / temperature) * kFixedPoint);
    };

    // top-k: the top_k-th largest key, counting tokens.
    unsigned threshold = 0;  // below every float's key: keeps everything
    if (top_k > 0 && top_k < vocab)
        threshold = select_threshold(
            row, vocab, static_cast<Mass>(top_k), [](int, unsigned) { return Mass{1}; }, select);
    const auto kept_mass = [&](int i, unsigned key) { return key >= threshold ? mass(i) : 0; };

    // top-p: the largest key whose kept tokens, with those above it, hold top_p of the mass.
    if (top_p < 1.0f) {
        Mass total = 0;
        for (int i = threadIdx.x; i < vocab; i += kBlock)
            total += kept_mass(i, ordered_key(row[i]));
        total = block_sum(total, mass_partials);
        const Mass need = static_cast<Mass>(ceil(static_cast<double>(top_p) * total));
        threshold = select_threshold(row, vocab, need > 0 ? need : 1, kept_mass, select);
    }

    // The draw: target = u * (the kept mass); the token is the first whose inclusive prefix of
    // kept masses, in vocabulary order, exceeds it. One tile of kBlock tokens at a time, a
    // block-wide scan per tile, until the tile that holds the crossing.
    Mass total = 0;
    for (int i = threadIdx.x; i < vocab; i += kBlock) total += kept_mass(i, ordered_key(row[i]));
    total = block_sum(total, mass_partials);
    const Mass target = static_cast<Mass>(static_cast<double>(uniforms[blockIdx.x]) * total);
    Mass before = 0;  // the kept mass of the tiles already walked
    for (int tile = 0; tile < vocab; tile += kBlock) {
        const int i = tile + threadIdx.x;
        const Mass own = i < vocab ? kept_mass(i, ordered_key(row[i])) : 0;
        // Inclusive scan: within the warp by shuffles, then the totals of the warps before.
        Mass inclusive = own;
        for (int offset = 1; offset < 32; offset *= 2) {
            const Mass other = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (threadIdx.x % 32 >= offset) inclusive += other;
        }
        if (threadIdx.x % 32 == 31) mass_partials[threadIdx.x / 32] = inclusive;
        __syncthreads();
        Mass tile_total = 0;
        for (int w = 0; w < kWarps; ++w) {
            if (w < static_cast<int>(threadIdx.x / 32)) inclusive += mass_partials[w];
            tile_total += mass_partials[w];
        }
        __syncthreads();
        inclusive += before;
        if (inclusive > target && inclusive - own <= target) tokens[blockIdx.x] = i;
        before += tile_total;
        if (before > target) return;  // the same in every thread: the block leaves together
    }
}

void sample(const float* logits, const float* uniforms, int* tokens, int rows, int vocab,
            float temperature, int top_k, float top_p) {
    sample_kernel<<<rows, kBlock>>>(logits, uniforms, tokens, vocab, temperature, top_k, top_p);
    CUDA_CHECK_LAUNCH();
}
