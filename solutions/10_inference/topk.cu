// 10_inference/topk: the k largest logits of each row and their indices, sorted, by a radix
// select of the threshold instead of a sort of the row.
//
// Teaches: a total order on (value, index) packed into one integer key, so that the k-th
// largest is unique and ties at the threshold are decided by the index; the radix select of
// `sample` over that key, with module 03's privatized histogram (a column per lane), 8 loads in
// flight per thread and the digit found by a warp's scan; an early exit once every key of the
// chosen digit is needed; a compaction of the k survivors into shared memory; a bitonic sort of
// them. The checker compares values and indices with a reference (ties, infinities, signed
// zeros, rows of 2^18) and times you against CUB's segmented radix sort.
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
// Logits each thread loads before it uses any: a pass over the row waits for a round trip to
// memory every kLoads logits, not every one.
constexpr int kLoads = 8;
constexpr int kDigitsPerLane = kBins / kLanes;  // the digit's pick: warp 0, 8 digits a lane

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

// visit(key) for every token of [begin, end) of the row, each thread loading kLoads logits (a
// block's kLoads x 1024 side by side) before it uses any.
template <class Visit>
__device__ void for_each_key(const float* row, int begin, int end, Visit visit) {
    for (int first = begin + static_cast<int>(threadIdx.x); first < end; first += kLoads * kBlock) {
        float logits[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int i = first + u * kBlock;
            logits[u] = i < end ? row[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int i = first + u * kBlock;
            if (i < end) visit(token_key(logits[u], i));
        }
    }
}

// Each digit's total into s.bins, from the histogram's columns: warp w adds up the 32 columns of
// digits w, w + 32, ...
__device__ void add_up_columns(TopkShared& s) {
    const unsigned lane = threadIdx.x % kLanes;
    const int warp = threadIdx.x / kLanes;
    for (int d = warp; d < kBins; d += kWarps) {
        unsigned total = s.counts[d * kLanes + lane];
        for (int offset = 16; offset > 0; offset /= 2)
            total += __shfl_xor_sync(0xffffffffu, total, offset);
        if (lane == 0) s.bins[d] = total;
    }
    __syncthreads();
}

// Counts the key in its digit at `shift` if its digits above it are `prefix`'s. A column per
// lane: the 32 atomics of a warp never share an address, whatever the data (logits crowd into a
// few exponents: few digits in the first round).
__device__ inline void count_key(Key key, Key prefix, int shift, TopkShared& s) {
    const Key chosen = ~Key{0} << (shift + 8);  // the digits above this round's
    if ((key & chosen) == prefix)
        atomicAdd(&s.counts[((key >> shift) & 0xFF) * kLanes + threadIdx.x % kLanes], 1u);
}

// One round of the select over the tokens [begin, end): the histogram, by their digit at
// `shift`, of the keys whose digits above it are `prefix`'s. Each digit's total lands in s.bins.
__device__ void count_digits(const float* row, int begin, int end, Key prefix, int shift,
                             TopkShared& s) {
    for (int i = threadIdx.x; i < kBins * kLanes; i += kBlock) s.counts[i] = 0;
    __syncthreads();
    for_each_key(row, begin, end, [&](Key key) { count_key(key, prefix, shift, s); });
    __syncthreads();
    add_up_columns(s);
}

// The digit at which the count from the top digit down, plus `above` (the keys above the
// prefix's range), reaches k: s.prefix, s.above and s.done for the next round. Warp 0 does it in
// parallel: lane l adds up the digits 255 - 8 l down to 248 - 8 l, a scan of the lanes' sums
// (shuffles) finds the lane whose digits hold the k-th key, and that lane walks its 8 digits.
__device__ void pick_digit(Key prefix, unsigned above, int shift, int k, TopkShared& s) {
    if (threadIdx.x < kLanes) {
        const unsigned need = static_cast<unsigned>(k);
        const int lane = threadIdx.x;
        const int top = kBins - 1 - kDigitsPerLane * lane;
        unsigned own = 0;
        for (int i = 0; i < kDigitsPerLane; ++i) own += s.bins[top - i];
        unsigned inclusive = own;  // the digits from 255 down to this lane's last
        for (int offset = 1; offset < kLanes; offset *= 2) {
            const unsigned before = __shfl_up_sync(0xffffffffu, inclusive, offset);
            if (lane >= offset) inclusive += before;
        }
        unsigned count = above + inclusive - own;   // the keys above this lane's digits
        if (count < need && count + own >= need) {  // one lane: the counts only grow
            int d = top;
            while (count + s.bins[d] < need) count += s.bins[d--];
            s.prefix = prefix | static_cast<Key>(d) << shift;
            s.above = count;
            s.done = count + s.bins[d] == need;
        }
    }
    __syncthreads();
}

// The smallest key of the row's top k: the tokens whose key is >= it are exactly the top k.
// Eight bits a round, the most significant first: a round histograms, by their next digit, the
// keys that match the digits chosen so far, and picks the digit at which the count from the top
// reaches k. When every key of that digit is needed, the lower digits can stay 0: done early.
__device__ Key select_threshold(const float* row, int vocab, int k, TopkShared& s) {
    Key prefix = 0;      // the digits chosen so far, in their places
    unsigned above = 0;  // how many keys lie above the prefix's range
    for (int shift = kKeyBits - 8; shift >= 0; shift -= 8) {
        count_digits(row, 0, vocab, prefix, shift, s);
        pick_digit(prefix, above, shift, k, s);
        prefix = s.prefix;
        above = s.above;
        if (s.done) break;  // the same in every thread
    }
    return prefix;
}

// One step of the bitonic sort of s.candidates[0, size): pair j compares a and a + stride, a with
// its `stride` bit clear; runs of `width` alternate direction (descending where a's `width` bit is
// clear), so that each merge finds two runs of opposite order. The last merge (width = size)
// descends.
__device__ void bitonic_step(int size, int width, int stride, TopkShared& s) {
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

// The first `count` keys of s.candidates (in any order) sorted, largest first. Its first barrier
// also ends the block's writes of the candidates.
__device__ void sort_keys(int count, TopkShared& s) {
    // Bitonic sort, largest first, over a power of two: the places past count hold 0, below every
    // key (the smallest, -inf's, is above 2^46).
    int size = 1;
    while (size < count) size *= 2;
    for (int j = count + threadIdx.x; j < size; j += kBlock) s.candidates[j] = 0;
    __syncthreads();
    for (int width = 2; width <= size; width *= 2)
        for (int stride = width / 2; stride > 0; stride /= 2) bitonic_step(size, width, stride, s);
}

// The k keys of s.candidates (in any order) sorted, largest first, and written out as values and
// indices.
__device__ void sort_and_write(int k, float* values, int* indices, TopkShared& s) {
    sort_keys(k, s);
    for (int j = threadIdx.x; j < k; j += kBlock) {
        values[j] = value_of(s.candidates[j]);
        indices[j] = index_of(s.candidates[j]);
    }
}

__global__ void __launch_bounds__(kBlock)
    topk_kernel(const float* logits, float* values, int* indices, int vocab, int k) {
    __shared__ TopkShared s;
    const float* row = logits + static_cast<std::size_t>(blockIdx.x) * vocab;
    const Key threshold = select_threshold(row, vocab, k, s);

    // The k keys at or above the threshold, in the order the atomics hand out places.
    if (threadIdx.x == 0) s.count = 0;
    __syncthreads();
    for_each_key(row, 0, vocab, [&](Key key) {
        if (key >= threshold) s.candidates[atomicAdd(&s.count, 1u)] = key;
    });
    const std::size_t out = static_cast<std::size_t>(blockIdx.x) * k;
    sort_and_write(k, values + out, indices + out, s);
}

void topk(const float* logits, float* values, int* indices, int rows, int vocab, int k) {
    topk_kernel<<<rows, kBlock>>>(logits, values, indices, vocab, k);
    CUDA_CHECK_LAUNCH();
}
