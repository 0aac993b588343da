// 10_inference/topk: the k largest logits of each row and their indices, sorted, by a radix
// select of the threshold instead of a sort of the row.
//
// Teaches: a total order on (value, index) packed into one integer key, so that the k-th
// largest is unique and ties at the threshold are decided by the index; the radix select of
// `sample` over that key, with module 03's privatized histogram (a column per lane); an early
// exit once every key of the chosen digit is needed; a compaction of the k survivors into shared
// memory; a bitonic sort of them. The checker compares values and indices with a reference (ties,
// infinities, signed zeros, rows of 2^18) and times you against CUB's segmented radix sort.
//
// Run:  grader run 10/topk                   Stuck:  grader hint 10/topk
// Contract: topk.h                           Notes:  notes/10_inference.md, section 3
#include "course/exercise.h"
#include "topk.h"

constexpr int kBlock = 1024;
constexpr int kWarps = kBlock / 32;
constexpr int kLanes = 32;
constexpr int kBins = 256;      // one radix digit: 8 bits of the key
constexpr int kMaxK = 2048;     // topk.h's limit
constexpr int kIndexBits = 24;  // below the value's 32 bits: room for 2^24 > 2^18 indices
constexpr int kKeyBits = 32 + kIndexBits;
constexpr unsigned kIndexMask = (1u << kIndexBits) - 1;

using Key = unsigned long long;

// An unsigned integer that orders as the float does (-0 just below +0).
__device__ inline unsigned ordered_key(float value) {
    const unsigned bits = __float_as_uint(value);
    return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}
// Back from the ordered key to the float.
__device__ inline float value_of(Key key) {
    const unsigned bits = static_cast<unsigned>(key >> kIndexBits);
    return __uint_as_float((bits & 0x80000000u) ? bits & 0x7FFFFFFFu : ~bits);
}
__device__ inline int index_of(Key key) {
    return static_cast<int>(kIndexMask - static_cast<unsigned>(key & kIndexMask));
}
// Token i's key: the value's order first, then the index, the smaller index the larger key. No
// two tokens share a key, so the k-th largest key cuts the row at exactly k tokens, ties at the
// k-th value included as the contract orders them.
__device__ inline Key token_key(float value, int index) {
    return static_cast<Key>(ordered_key(value)) << kIndexBits | (kIndexMask - index);
}

struct TopkShared {
    union {
        unsigned counts[kBins * kLanes];  // the select's histogram, a column per lane (module 03)
        Key candidates[kMaxK];            // then the top k keys, sorted in place
    };
    unsigned bins[kBins];  // the histogram's totals
    Key prefix;
    unsigned above;
    bool done;
    unsigned count;
};

// The smallest key of the row's top k: the tokens whose key is >= it are exactly the top k.
// Eight bits a round, the most significant first: a round histograms, by their next digit, the
// keys that match the digits chosen so far, and picks the digit at which the count from the top
// reaches k. When every key of that digit is needed, the lower digits can stay 0: done early.
__device__ Key select_threshold(const float* row, int vocab, int k, TopkShared& s) {
    const unsigned lane = threadIdx.x % kLanes;
    const int warp = threadIdx.x / kLanes;
    Key prefix = 0;      // the digits chosen so far, in their places
    unsigned above = 0;  // how many keys lie above the prefix's range
    for (int shift = kKeyBits - 8; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < kBins * kLanes; i += kBlock) s.counts[i] = 0;
        __syncthreads();
        const Key chosen = ~Key{0} << (shift + 8);  // the digits above this round's
        for (int i = threadIdx.x; i < vocab; i += kBlock) {
            const Key key = token_key(row[i], i);
            // A column per lane: the 32 atomics of a warp never share an address, whatever the
            // data (logits crowd into a few exponents: few digits in the first round).
            if ((key & chosen) == prefix)
                atomicAdd(&s.counts[((key >> shift) & 0xFF) * kLanes + lane], 1u);
        }
        __syncthreads();
        // Each digit's total: warp w adds up the 32 columns of digits w, w + 32, ...
        for (int d = warp; d < kBins; d += kWarps) {
            unsigned total = s.counts[d * kLanes + lane];
            for (int offset = 16; offset > 0; offset /= 2)
                total += __shfl_xor_sync(0xffffffffu, total, offset);
            if (lane == 0) s.bins[d] = total;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int d = kBins - 1;
            while (d > 0 && above + s.bins[d] < static_cast<unsigned>(k)) above += s.bins[d--];
            s.prefix = prefix | static_cast<Key>(d) << shift;
            s.above = above;
            s.done = above + s.bins[d] == static_cast<unsigned>(k);
        }
        __syncthreads();
        prefix = s.prefix;
        above = s.above;
        if (s.done) break;  // the same in every thread
    }
    return prefix;
}

__global__ void __launch_bounds__(kBlock)
    topk_kernel(const float* logits, float* values, int* indices, int vocab, int k) {
    __shared__ TopkShared s;
    const float* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;
    const Key threshold = select_threshold(row, vocab, k, s);

    // The k keys at or above the threshold, in the order the atomics hand out places.
    if (threadIdx.x == 0) s.count = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kBlock) {
        const Key key = token_key(row[i], i);
        if (key >= threshold) s.candidates[atomicAdd(&s.count, 1u)] = key;
    }
    // Bitonic sort, largest first, over a power of two: the places past k hold 0, below every
    // key (the smallest, -inf's, is above 2^46).
    int size = 1;
    while (size < k) size *= 2;
    for (int j = k + threadIdx.x; j < size; j += kBlock) s.candidates[j] = 0;
    __syncthreads();
    for (int width = 2; width <= size; width *= 2) {
        for (int stride = width / 2; stride > 0; stride /= 2) {
            // Pair j compares a and a + stride, a with its `stride` bit clear; runs of `width`
            // alternate direction (descending where a's `width` bit is clear), so that each
            // merge finds two runs of opposite order. The last merge (width = size) descends.
            for (int j = threadIdx.x; j < size / 2; j += kBlock) {
                const int a = 2 * j - (j & (stride - 1));
                const int b = a + stride;
                const Key x = s.candidates[a], y = s.candidates[b];
                if ((x < y) == ((a & width) == 0)) {
                    s.candidates[a] = y;
                    s.candidates[b] = x;
                }
            }
            __syncthreads();
        }
    }
    const std::size_t out = static_cast<std::size_t>(blockIdx.x) * k;
    for (int j = threadIdx.x; j < k; j += kBlock) {
        values[out + j] = value_of(s.candidates[j]);
        indices[out + j] = index_of(s.candidates[j]);
    }
}

void topk(const float* logits, float* values, int* indices, int rows, int vocab, int k) {
    topk_kernel<<<rows, kBlock>>>(logits, values, indices, vocab, k);
    CUDA_CHECK_LAUNCH();
}
