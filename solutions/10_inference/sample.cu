// 10_inference/sample: temperature, top-k and top-p sampling of a token from each row of logits,
// with thresholds found by radix select instead of a sort.
//
// Teaches: what a sampler computes (a softmax with a temperature, restricted to the top k tokens
// and to the nucleus holding top_p of the probability); why no sort is needed: both cuts are a
// threshold on the logits, found by a radix select over their bits (a histogram of 256 digits a
// round), with counts for top-k and probability mass for top-p; a histogram that does not
// serialize when most keys share a digit (copies of each bin, 32-bit atomics); few passes over
// the row (the maximum fused with the first round, the rounds that every candidate shares
// skipped, an early exit); sums that do not depend on the order of the additions (integers in
// fixed point), so that a sample is the same on every run; the draw in two levels, the mass of
// each chunk of the row, then a scan of the one chunk that holds it. The checker compares your
// tokens with a reference on fixed draws and tests their distribution over 65536 draws
// (chi-square).
//
// Run:  grader run 10/sample                 Stuck:  grader hint 10/sample
// Contract: sample.h                         Notes:  notes/10_inference.md
#include <cfloat>

#include "course/exercise.h"
#include "sample.h"

// One block per row, as many threads as a block takes: a pass over the row is bound by the time
// its loads take, and 1024 threads with kLoads loads each keep 32 KB in flight per SM.
constexpr int kBlock = 1024;
constexpr int kWarps = kBlock / 32;
constexpr int kLoads = 8;
constexpr int kBins = 256;    // one radix digit: 8 bits of the key
constexpr int kColumns = 16;  // copies of each bin: lane l adds to copy l % 16
// The draw's chunks are as long as the block: the walk of one chunk is one block scan.
constexpr int kChunk = kBlock;
constexpr int kMaxChunks = (1 << 18) / kChunk;  // sample.h: vocab <= 2^18
// Probabilities as integers, p * 2^40: a float p <= 1 times a power of two is exact, so every
// p above 2^-16 keeps all its bits, and a vocabulary of 2^18 sums to at most 2^58. Integer sums
// give the same bits in any order: shared-memory atomics and reductions stay deterministic, and
// the thresholds and the draw see exactly the same masses.
constexpr float kFixedPoint = 0x1.0p40f;

using Mass = unsigned long long;

struct SampleShared {
    union {
        Mass columns[kBins * kColumns];  // a round's histogram: bin d's copies at d * kColumns
        Mass chunks[kMaxChunks];         // then the draw's kept mass per chunk
    };
    Mass partials[kWarps];  // the warps' totals of a block scan
    float max_partials[kWarps];
    unsigned prefix;  // a round's pick, for every thread
    Mass above;
    bool done;
    int chunk;  // the chunk that holds the draw, and the kept mass before it
    Mass before;
};

// An unsigned integer that orders as the float does: the radix select's key.
__device__ inline unsigned ordered_key(float value) {
    const unsigned bits = __float_as_uint(value);
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// Visits every logit of the row, visit(logit), each thread issuing kLoads loads before it uses
// any of them (one block per SM waits on its loads: one at a time would be 4 KB in flight).
template <class Visit>
__device__ void for_each_token(const float* row, int vocab, Visit visit) {
    for (int first = threadIdx.x; first < vocab; first += kLoads * kBlock) {
        float logits[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int i = first + u * kBlock;
            logits[u] = i < vocab ? row[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u)
            if (first + u * kBlock < vocab) visit(logits[u]);
    }
}

__device__ inline Mass warp_scan(Mass value) {  // inclusive, in lane order
    for (int offset = 1; offset < 32; offset *= 2) {
        const Mass other = __shfl_up_sync(0xffffffffu, value, offset);
        if (threadIdx.x % 32 >= offset) value += other;
    }
    return value;
}

// The inclusive prefix sum of one value per thread, in thread order, and the block's total.
struct Scan {
    Mass inclusive;
    Mass total;
};
__device__ Scan block_scan(Mass value, Mass* partials) {
    const int warp = threadIdx.x / 32;
    Scan scan{warp_scan(value), 0};
    if (threadIdx.x % 32 == 31) partials[warp] = scan.inclusive;
    __syncthreads();
    for (int w = 0; w < kWarps; ++w) {
        if (w < warp) scan.inclusive += partials[w];
        scan.total += partials[w];
    }
    __syncthreads();  // partials is reused by the next call
    return scan;
}

__device__ float block_max(float value, float* partials) {
    for (int offset = 16; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    if (threadIdx.x % 32 == 0) partials[threadIdx.x / 32] = value;
    __syncthreads();
    float result = -FLT_MAX;
    for (int w = 0; w < kWarps; ++w) result = fmaxf(result, partials[w]);
    return result;  // partials is not reused
}

// A radix select in progress: the threshold is the largest key v such that the weights of the
// candidate keys >= v add up to at least `need`, found 8 bits a round, the most significant
// first. Each round histograms, by their next digit, the keys that match the digits chosen so
// far, and picks the digit at which the weight counted down from the top reaches `need`.
struct Select {
    unsigned prefix;  // the digits chosen so far, in their places, the others 0
    int shift;        // the lowest bit of the next digit (24, 16, 8, 0); -1 once the key is found
    Mass above;       // the weight of the candidates above the prefix's range
    Mass need;        // 0: top_p of the first round's total (the nucleus, below)
    float top_p;
};

__device__ inline unsigned digits_above(int shift) { return shift >= 24 ? 0u : ~0u << (shift + 8); }

__device__ void clear_histogram(SampleShared& s) {
    for (int j = threadIdx.x; j < kBins * kColumns; j += kBlock) s.columns[j] = 0;
    __syncthreads();
}

// Whether a key matches the digits chosen so far: it counts in this round's histogram.
__device__ inline bool in_round(const Select& select, unsigned key) {
    return (key & digits_above(select.shift)) == select.prefix;
}

// Adds a key's weight to its bin in this round's histogram. A 64-bit atomicAdd on shared memory
// compiles to a compare-and-swap loop, which retries while other threads hit the same word, and
// most keys share their first digits (sign and exponent): instead, the lanes of a warp add to
// kColumns copies of the bin, and each add is two native 32-bit atomics, the carry out of the low
// word (its old value + ours wrapped) going into the high word. The bin's total is exact whatever
// the order.
__device__ inline void add_weight(SampleShared& s, const Select& select, unsigned key, Mass w) {
    if (w == 0) return;
    const int digit = (key >> select.shift) & 0xFF;
    auto* words =
        reinterpret_cast<unsigned*>(&s.columns[digit * kColumns + threadIdx.x % kColumns]);
    const unsigned low = static_cast<unsigned>(w);
    const unsigned old = atomicAdd(&words[0], low);  // little-endian: the low word first
    const unsigned high = static_cast<unsigned>(w >> 32) + (old + low < old ? 1u : 0u);
    if (high != 0) atomicAdd(&words[1], high);
}

// After a round's adds: each digit's total over its copies, digit 255 - t in thread t (0 in the
// threads past 255), so that a block scan counts from the top digit down.
__device__ Mass digit_total(SampleShared& s) {
    __syncthreads();  // every add of the round is in
    const int digit = kBins - 1 - static_cast<int>(threadIdx.x);
    Mass bin = 0;
    if (digit >= 0)
        for (int c = 0; c < kColumns; ++c)  // rotated: a warp's threads read different banks
            bin += s.columns[digit * kColumns + (c + digit) % kColumns];
    return bin;
}

// The end of a round: the digit where the weight counted from the top digit down reaches
// `need`, from each thread's digit_total. When that digit's whole weight is needed, every
// candidate in it is in: the lower digits can stay 0 and the select ends early.
__device__ void pick_digit(Select& select, Mass bin, SampleShared& s) {
    const int digit = kBins - 1 - static_cast<int>(threadIdx.x);
    const Scan from_top = block_scan(bin, s.partials);  // the weight of the digits >= digit
    if (select.need == 0) {
        // The nucleus: its first round holds every candidate, so the round's total is Z.
        const Mass z = from_top.total;
        const Mass need = static_cast<Mass>(ceil(static_cast<double>(select.top_p) * z));
        select.need = need < 1 ? 1 : need > z ? z : need;
    }
    const Mass reached = select.above + from_top.inclusive;
    if (digit >= 0 && reached >= select.need && reached - bin < select.need) {
        s.prefix = select.prefix | static_cast<unsigned>(digit) << select.shift;
        s.above = reached - bin;
        s.done = reached == select.need || select.shift == 0;
    }
    __syncthreads();
    select.prefix = s.prefix;
    select.above = s.above;
    select.shift = s.done ? -1 : select.shift - 8;
}

// The select's remaining rounds, each a pass over the row; weight(logit, key) is the token's
// weight (1 for top-k, its kept mass for top-p). Returns the threshold key.
template <class Weight>
__device__ unsigned select_threshold(const float* row, int vocab, Select select, Weight weight,
                                     SampleShared& s) {
    while (select.shift >= 0) {
        clear_histogram(s);
        for_each_token(row, vocab, [&](float logit) {
            const unsigned key = ordered_key(logit);
            if (in_round(select, key)) add_weight(s, select, key, weight(logit, key));
        });
        pick_digit(select, digit_total(s), s);
    }
    return select.prefix;
}

// The kept mass of chunk c, tokens c * kChunk .. + kChunk - 1, summed by one warp (every lane
// gets it); kept_mass(logit) is a token's mass, 0 where a cut drops it.
template <class KeptMass>
__device__ Mass chunk_mass(const float* row, int vocab, int c, KeptMass kept_mass) {
    Mass sum = 0;
#pragma unroll 8
    for (int j = threadIdx.x % 32; j < kChunk; j += 32) {
        const int i = c * kChunk + j;
        if (i < vocab) sum += kept_mass(row[i]);
    }
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    return sum;
}

// The draw, from the kept mass of chunk t in thread t (0 past the last chunk): target = u * (the
// kept mass); the token is the first whose inclusive prefix of kept masses, in vocabulary order,
// exceeds it. A block scan over the chunks finds the chunk that holds the target, a block scan
// over that chunk's tokens, one per thread, the token.
template <class KeptMass>
__device__ void draw_token(const float* row, int vocab, Mass chunk, KeptMass kept_mass,
                           float uniform, int* token, SampleShared& s) {
    const Scan through_chunk = block_scan(chunk, s.partials);
    const Mass target = static_cast<Mass>(static_cast<double>(uniform) * through_chunk.total);
    if (through_chunk.inclusive > target && through_chunk.inclusive - chunk <= target) {
        s.chunk = threadIdx.x;
        s.before = through_chunk.inclusive - chunk;
    }
    __syncthreads();
    const int i = s.chunk * kChunk + threadIdx.x;
    const Mass own = i < vocab ? kept_mass(row[i]) : 0;
    Mass inclusive = block_scan(own, s.partials).inclusive;
    inclusive += s.before;  // the chunks before this one
    if (inclusive > target && inclusive - own <= target) *token = i;
}

__global__ void __launch_bounds__(kBlock)
    sample_kernel(const float* logits, const float* uniforms, int* tokens, int vocab,
                  float temperature, int top_k, float top_p) {
    __shared__ SampleShared s;
    const float* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;

    // Pass 1, the only one from DRAM: the row's maximum and the top-k select's first round, a
    // count of the keys by their top digit (it needs no maximum).
    const bool cut_k = top_k > 0 && top_k < vocab;
    Select k_select{0, 24, 0, static_cast<Mass>(top_k), 0.0f};
    clear_histogram(s);
    float largest = -FLT_MAX;
    for_each_token(row, vocab, [&](float logit) {
        largest = fmaxf(largest, logit);
        if (cut_k) add_weight(s, k_select, ordered_key(logit), 1);  // every key is in round 1
    });
    largest = block_max(largest, s.max_partials);
    // A token's mass: e_i = exp((l_i - max) / temperature) in fixed point; -inf gives 0.
    const auto mass = [&](float logit) {
        return static_cast<Mass>(expf((logit - largest) / temperature) * kFixedPoint);
    };

    // top-k: the top_k-th largest key, counting tokens.
    unsigned threshold = 0;  // below every float's key: keeps everything
    if (cut_k) {
        pick_digit(k_select, digit_total(s), s);
        threshold = select_threshold(
            row, vocab, k_select, [](float, unsigned) { return Mass{1}; }, s);
    }

    // top-p: the largest key whose kept tokens, with those above it, hold top_p of the mass.
    // Its candidates, the kept tokens, lie between the top-k threshold and the maximum's key:
    // the digits those two share, every candidate shares, and the select starts at the first
    // digit where they differ (with top-k 50 of 128256, the last one or two).
    const unsigned top = ordered_key(largest);
    if (top_p < 1.0f && top != threshold) {
        int shift = 24;
        while ((top ^ threshold) >> shift == 0) shift -= 8;
        const Select p_select{top & digits_above(shift), shift, 0, 0, top_p};
        const unsigned nucleus = select_threshold(
            row, vocab, p_select,
            [&](float logit, unsigned key) { return key >= threshold ? mass(logit) : 0; }, s);
        // An early exit may leave the nucleus's lower digits 0, below top-k's cut.
        if (nucleus > threshold) threshold = nucleus;
    }

    // The draw: the kept mass of each chunk of kChunk tokens, a warp per chunk, then the token.
    const auto kept_mass = [&](float logit) {
        return ordered_key(logit) >= threshold ? mass(logit) : 0;
    };
    const int chunks = (vocab + kChunk - 1) / kChunk;
    for (int c = threadIdx.x / 32; c < chunks; c += kWarps) {
        const Mass sum = chunk_mass(row, vocab, c, kept_mass);
        if (threadIdx.x % 32 == 0) s.chunks[c] = sum;
    }
    __syncthreads();
    draw_token(row, vocab, threadIdx.x < chunks ? s.chunks[threadIdx.x] : 0, kept_mass,
               uniforms[blockIdx.x], tokens + blockIdx.x, s);
}

void sample(const float* logits, const float* uniforms, int* tokens, int rows, int vocab,
            float temperature, int top_k, float top_p) {
    sample_kernel<<<rows, kBlock>>>(logits, uniforms, tokens, vocab, temperature, top_k, top_p);
    CUDA_CHECK_LAUNCH();
}
