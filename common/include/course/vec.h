// Vectors of a row for the tuned row kernels (the fast references of module 06): a Vec is what
// one thread moves in one access, a float4 (16 bytes) where every row starts 16-byte aligned, else
// a float. The readable solutions write these loops out themselves; the fast ones share them here.
//
//   float4 batch[3];
//   course::load_batch<kBlock>(batch, x_row, first, slice_end);  // 3 loads in flight per thread
//   __stcs(y_row + k, out);     // CUDA's streaming store (evict first) takes a float or a float4
#pragma once

namespace course {

// Floats in one Vec: 4 for a float4, 1 for a float.
template <class Vec>
constexpr int kFloatsPerVec = sizeof(Vec) / sizeof(float);

// Where a load's line should stay: kKeep, as an ordinary load; kLastUse for a value read for the
// last time (a row too long to stage, read again), __ldcs: evict first from L1 and L2, so that L2
// keeps the lines other rows still have to read.
enum class Cache { kKeep, kLastUse };

template <Cache kHint, class Vec>
__device__ Vec load(const Vec* p) {
    if constexpr (kHint == Cache::kLastUse) {
        return __ldcs(p);
    } else {
        return *p;
    }
}

// v[j] = p[first + j * kStride] for every j whose index is below `end`: kCount independent loads,
// all issued before any of them is used, so that a thread has kCount loads in flight (with
// kStride the block size, each j is one coalesced stretch of the block). The loop is unrolled, so
// `v` stays in registers; slots past `end` are left as they were.
template <int kStride, Cache kHint = Cache::kKeep, int kCount, class Vec>
__device__ void load_batch(Vec (&v)[kCount], const Vec* p, int first, int end) {
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
        const int k = first + j * kStride;
        if (k < end) v[j] = load<kHint>(p + k);
    }
}

}  // namespace course
