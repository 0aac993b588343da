// 10_inference/decode_attention: one new token's attention over a KV cache, split along the
// cache (flash-decoding).
//
// Teaches: why decoding is memory-bound (every cached key and value is read once for one query:
// about 1 FLOP per byte); how to keep every SM busy when there are few (sequence, head) pairs:
// split each cache into chunks, give each chunk a block that computes a partial softmax state
// (maximum, sum, unnormalized output), and merge the states in a second kernel, rescaled to a
// common maximum; 16-byte loads of bf16, several in flight; grouped-query heads. The checker
// reports your bandwidth on the cache's bytes next to a device copy of them.
//
// Run:  grader run 10/decode_attention       Stuck:  grader hint 10/decode_attention
// Contract: decode_attention.h               Notes:  notes/10_inference.md
#include <cfloat>

#include "course/exercise.h"
#include "decode_attention.h"

constexpr int kBlock = 128;
// Keys per split, before the cap on splits: 256 keys of D = 128 are 128 KB of K and V for a
// block, enough to hide the start-up and the merge, and B = 1 at 32K keys still makes 128 splits
// per head (2048 blocks for 16 heads: about two waves on 132 SMs).
constexpr int kKeysPerSplit = 256;
// Keys whose K and V rows each lane loads before it uses any: 8 loads of 16 bytes in flight.
constexpr int kUnroll = 4;

// A split's state in the workspace: o (D floats), then m and l.
__device__ inline float* split_state(float* workspace, std::size_t row, int split, int D) {
    return workspace + (row * kDecodeMaxSplits + split) * (D + 2);
}

// 8 bf16 (one 16-byte load) as floats.
__device__ inline void to_floats(const uint4& packed, float* values) {
    const __nv_bfloat16* halves = reinterpret_cast<const __nv_bfloat16*>(&packed);
#pragma unroll
    for (int i = 0; i < 8; ++i) values[i] = __bfloat162float(halves[i]);
}

// A group of D / 8 lanes holds one key: lane i of the group loads its elements 8 i .. 8 i + 7,
// so a key is one 16-byte load per lane and kBlock / (D / 8) keys are read side by side. Each
// group runs its own online softmax over every kGroups-th key of the split; the groups' states
// are merged through shared memory at the end.
template <int D>
__global__ void __launch_bounds__(kBlock)
    decode_split_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                        const __nv_bfloat16* v_cache, const int* lengths, float* workspace,
                        int heads, int kv_heads, int capacity, float scale, int chunk) {
    constexpr int kLanesPerKey = D / 8;
    constexpr int kGroups = kBlock / kLanesPerKey;
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int kv_head = h / (heads / kv_heads);
    const int begin = split * chunk;
    const int end = min(lengths[b], begin + chunk);  // never a position at or past the length
    const int group = threadIdx.x / kLanesPerKey, lane = threadIdx.x % kLanesPerKey;
    const std::size_t row = static_cast<std::size_t>(b) * heads + h;

    // This lane's 8 query values, the scale folded in once.
    float qv[8];
    to_floats(reinterpret_cast<const uint4*>(q + row * D)[lane], qv);
#pragma unroll
    for (int i = 0; i < 8; ++i) qv[i] *= scale;

    const std::size_t cache = (static_cast<std::size_t>(b) * kv_heads + kv_head) * capacity * D;
    const uint4* keys = reinterpret_cast<const uint4*>(k_cache + cache) + lane;
    const uint4* values = reinterpret_cast<const uint4*>(v_cache + cache) + lane;

    // -FLT_MAX, not -INFINITY: a first tile of masked keys would make exp(-inf - (-inf)) = NaN.
    float m = -FLT_MAX, l = 0.0f, o[8] = {};
    // The loop bound is the block's, not the group's: every lane of a warp takes the same number
    // of trips, so the shuffles below always find all 32 lanes.
    for (int base = begin; base < end; base += kGroups * kUnroll) {
        uint4 k[kUnroll] = {}, v[kUnroll] = {};  // zeros for the keys past the end
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const int j = base + u * kGroups + group;
            if (j < end) {
                k[u] = keys[static_cast<std::size_t>(j) * kLanesPerKey];
                v[u] = values[static_cast<std::size_t>(j) * kLanesPerKey];
            }
        }
        float s[kUnroll];
        float tile_max = -FLT_MAX;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            float kf[8];
            to_floats(k[u], kf);
            s[u] = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) s[u] += qv[i] * kf[i];
                // The group's lanes are kLanesPerKey consecutive lanes of one warp: a butterfly
                // over them leaves the whole dot product in each.
#pragma unroll
            for (int offset = kLanesPerKey / 2; offset > 0; offset /= 2)
                s[u] += __shfl_xor_sync(0xffffffffu, s[u], offset);
            if (base + u * kGroups + group >= end) s[u] = -INFINITY;  // exp gives 0
            tile_max = fmaxf(tile_max, s[u]);
        }
        // The online softmax: rescale what was summed to the new maximum, then add the tile.
        const float m_new = fmaxf(m, tile_max);
        const float alpha = expf(m - m_new);
        l *= alpha;
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] *= alpha;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
            const float p = expf(s[u] - m_new);
            float vf[8];
            to_floats(v[u], vf);
            l += p;
#pragma unroll
            for (int i = 0; i < 8; ++i) o[i] += p * vf[i];
        }
        m = m_new;
    }

    // The groups' states to one, rescaled to the block's maximum: thread d owns element d.
    __shared__ float group_m[kGroups], group_l[kGroups];
    __shared__ float group_o[kGroups][D];
    if (lane == 0) group_m[group] = m, group_l[group] = l;
#pragma unroll
    for (int i = 0; i < 8; ++i) group_o[group][lane * 8 + i] = o[i];
    __syncthreads();
    if (threadIdx.x < D) {
        float block_m = -FLT_MAX;
        for (int g = 0; g < kGroups; ++g) block_m = fmaxf(block_m, group_m[g]);
        float block_l = 0.0f, block_o = 0.0f;
        for (int g = 0; g < kGroups; ++g) {
            const float w = expf(group_m[g] - block_m);
            block_l += w * group_l[g];
            block_o += w * group_o[g][threadIdx.x];
        }
        float* state = split_state(workspace, row, split, D);
        state[threadIdx.x] = block_o;
        if (threadIdx.x == 0) state[D] = block_m, state[D + 1] = block_l;
    }
}

// out = (sum_s exp(m_s - M) o_s) / (sum_s exp(m_s - M) l_s) with M the largest m_s, and
// lse = M + log of the denominator. An empty split (m = -FLT_MAX, l = 0, o = 0) adds nothing.
// The splits' weights are computed once, in shared memory, by all threads together: then each
// thread's loop over the splits is one coalesced load of o_s[d] per split.
__global__ void decode_merge_kernel(float* workspace, __nv_bfloat16* out, float* lse, int heads,
                                    int D, int splits) {
    __shared__ float weight[kDecodeMaxSplits], sum[kDecodeMaxSplits];
    const std::size_t row = static_cast<std::size_t>(blockIdx.y) * heads + blockIdx.x;
    const int d = threadIdx.x;
    for (int s = d; s < splits; s += blockDim.x) {
        weight[s] = split_state(workspace, row, s, D)[D];  // m_s, for now
        sum[s] = split_state(workspace, row, s, D)[D + 1];
    }
    __syncthreads();
    float M = -FLT_MAX;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, weight[s]);
    __syncthreads();  // every thread has read the maxima before they become weights
    for (int s = d; s < splits; s += blockDim.x) weight[s] = expf(weight[s] - M);
    __syncthreads();
    float l = 0.0f, o = 0.0f;
    for (int s = 0; s < splits; ++s) {
        l += weight[s] * sum[s];
        o += weight[s] * split_state(workspace, row, s, D)[d];
    }
    out[row * D + d] = __float2bfloat16(o / l);
    if (d == 0) lse[row] = M + logf(l);
}

void decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const int* lengths, __nv_bfloat16* out,
                      float* lse, float* workspace, int batch, int heads, int kv_heads,
                      int capacity, int D, float scale) {
    // The lengths are on the device: the split is sized for a full cache, and the splits past a
    // shorter sequence's length find no keys, store an empty state and return.
    const int splits = min(kDecodeMaxSplits, course::ceil_div(capacity, kKeysPerSplit));
    const int chunk = course::ceil_div(capacity, splits);
    const dim3 grid(splits, heads, batch);
    if (D == 64)
        decode_split_kernel<64><<<grid, kBlock>>>(q, k_cache, v_cache, lengths, workspace, heads,
                                                  kv_heads, capacity, scale, chunk);
    else
        decode_split_kernel<128><<<grid, kBlock>>>(q, k_cache, v_cache, lengths, workspace, heads,
                                                   kv_heads, capacity, scale, chunk);
    CUDA_CHECK_LAUNCH();
    decode_merge_kernel<<<dim3(heads, batch), D>>>(workspace, out, lse, heads, D, splits);
    CUDA_CHECK_LAUNCH();
}
