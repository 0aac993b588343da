// The KV cache of generation (Gpt::prefill and Gpt::decode, gpt.h) and the arithmetic of
// attention over it, shared by the reference's kernels (ops_generation.cu), the model (gpt.cu) and
// the CPU tests (tests/kv_cache_test.cpp).
//
// Layout, per layer: keys and values each [sequences][NH][capacity][HS] in the activations' type
// (module 10's decode_attention contract's [batch][kv_heads][capacity][D], every head its own);
// position p of sequence b holds the key (value) of its token at p.
//
// Decode attention reads a (sequence, head)'s cache once for one query: with few sequences there
// are too few (sequence, head) pairs to fill the GPU (batch 1 of GPT-2: 12), so the cache is cut
// along its positions (flash-decoding): `splits` chunks of `chunk` positions, a block each, which
// keeps the softmax state of its keys (PartialSoftmax, and beside it o, the sum of exp(s - m) v),
// and a second kernel merges the states of a (sequence, head), each rescaled to their common
// maximum (merge_weight).
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>

#include "course/host_device.h"
#include "ops.h"

namespace trainer::kv {

// Element d of head h at position p of sequence b, in one layer's cache.
COURSE_HOST_DEVICE inline std::size_t offset(int b, int h, int p, int d, int NH, int capacity,
                                             int HS) {
    return ((static_cast<std::size_t>(b) * NH + h) * capacity + p) * HS + d;
}

// Elements of one layer's keys (or values) for `sequences` sequences.
inline std::size_t layer_elements(int sequences, int NH, int capacity, int HS) {
    return offset(sequences, 0, 0, 0, NH, capacity, HS);
}

// Where the state of one split of query row `row` (= b * NH + h) sits in decode attention's
// workspace: o (HS floats), then m and l; kDecodeMaxSplits states per row (ops.h).
COURSE_HOST_DEVICE inline std::size_t state_offset(std::size_t row, int split, int HS) {
    return (row * kDecodeMaxSplits + split) * (HS + 2);
}

// The fewest positions of a split: what a block of 128 threads reads in one pass over bf16 heads
// of 64 (16 keys side by side, 4 deep). Shorter chunks would cost a block more in starting and
// merging than in reading.
constexpr int kMinSplitKeys = 64;

struct Split {
    int splits;  // chunks per (sequence, head), each a block
    int chunk;   // positions per chunk; splits * chunk >= capacity > (splits - 1) * chunk
};

// How decode attention cuts `rows` (sequence, head) caches of `capacity` positions on a GPU of
// `sms` SMs: enough chunks for two blocks per SM where the rows are few (batch 1), never more than
// the workspace holds (kDecodeMaxSplits) or shorter than kMinSplitKeys. The lengths of the
// sequences are on the GPU (module 10's contract): the cut is the capacity's, and a chunk past a
// sequence's length finds no keys.
inline Split split_for(int capacity, int rows, int sms) {
    const int wanted = (2 * sms + rows - 1) / rows;
    const int most = std::min(kDecodeMaxSplits, std::max(1, capacity / kMinSplitKeys));
    const int splits = std::clamp(wanted, 1, std::max(most, 1));
    const int chunk = (capacity + splits - 1) / splits;
    return {(capacity + chunk - 1) / chunk, chunk};
}

// The running softmax of a stretch of keys (module 07's online softmax): m, the largest score
// seen; l, the sum of exp(s - m) over the keys seen. The sum o of exp(s - m) v is kept beside it by
// the caller, which multiplies it by what rescale returns.
struct PartialSoftmax {
    // -FLT_MAX, not -inf: a state that saw no key then rescales by exp(-FLT_MAX - m_new) = 0,
    // where -inf would give exp(-inf + inf) = NaN when the new maximum is -inf too.
    float m = -FLT_MAX;
    float l = 0.0f;
    // Moves the state to the maximum m_new (>= m); the factor for o.
    COURSE_HOST_DEVICE float rescale(float m_new) {
        const float alpha = expf(m - m_new);
        l *= alpha;
        m = m_new;
        return alpha;
    }
};

// The factor of a state of maximum m (its l and its o) in a merge whose maximum is M >= m. An
// empty state (m = -FLT_MAX, l = 0, o = 0) adds nothing.
COURSE_HOST_DEVICE inline float merge_weight(float m, float M) { return expf(m - M); }

}  // namespace trainer::kv
