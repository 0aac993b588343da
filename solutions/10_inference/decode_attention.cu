// 10_inference/decode_attention: one new token's attention over a KV cache, split along the
// cache (flash-decoding).
//
// Teaches: why decoding is memory-bound (every cached key and value is read once for one query:
// about 1 FLOP per byte); how to keep every SM busy when there are few (sequence, head) pairs:
// split each cache into chunks, as many as make one wave of blocks over the SMs, give each chunk
// a block that computes a partial softmax state (maximum, sum, unnormalized output), and let the
// last block of each (sequence, head) to finish merge the states, rescaled to a common maximum
// (a counter per (sequence, head), __threadfence and an atomic, instead of a second kernel);
// 16-byte loads of bf16, several in flight; grouped-query heads. The checker reports your
// bandwidth on the cache's bytes next to a device copy of them.
//
// Run:  grader run 10/decode_attention       Stuck:  grader hint 10/decode_attention
// Contract: decode_attention.h               Notes:  notes/10_inference.md
#include <cfloat>

#include "course/exercise.h"
#include "decode_attention.h"

constexpr int kBlock = 128;
constexpr int kWarps = kBlock / 32;
// Blocks an SM runs at once in a wave: 8 of 128 threads fit every GPU from the T4 on (1024
// threads per SM there), and 8 x 128 lanes x 8 loads of 16 bytes are 128 KB in flight per SM,
// several times what its share of DRAM needs. The kernel's __launch_bounds__ hold the compiler to
// the registers that let kBlocksPerSm blocks share an SM (64 a thread at 8), so that the wave
// fits.
constexpr int kBlocksPerSm = 8;
// Keys whose K and V rows each lane loads before it uses any: 8 loads of 16 bytes in flight, if
// the compiler has the registers to hold them (the kernel's __launch_bounds__ give it 64; with
// fewer it issues some V loads after the dot products: dev/tuning/10_inference.md).
constexpr int kUnroll = 4;
// The fewest keys of a split: one trip of the block's loop over D = 64 (16 keys side by side,
// kUnroll deep), two at D = 128. Shorter chunks would cost a block more in starting and merging
// than in reading. A chunk is a whole number of them: a partial trip costs a whole one.
constexpr int kMinKeysPerSplit = kBlock / (64 / 8) * kUnroll;
// The merge's loads of o in flight per thread: 16-byte loads of kMergeLoads splits before their
// sums (2 trips at 64 splits, D = 128).
constexpr int kMergeLoads = 8;
// The contract's most (sequence, head) pairs: batch 1024 x heads 128.
constexpr int kMaxRows = 1024 * 128;
static_assert(kDecodeMaxSplits <= kBlock, "the merge gives each split's weight a thread");

// Finished splits of each (sequence, head) in the current call. Zero when the program loads; the
// block that finishes a row's last split merges the row and sets its count back to 0, so that
// the next call starts from 0 too.
__device__ unsigned int split_counters[kMaxRows];

// The workspace of one (sequence, head): the splits' outputs o (kDecodeMaxSplits x D floats),
// then their maxima m and their sums l (kDecodeMaxSplits each). o first, so that every split's
// o starts on 16 bytes: the merge reads it as float4.
struct SplitStates {
    float* o;
    float* m;
    float* l;
};
__device__ inline SplitStates split_states(float* workspace, std::size_t row, int D) {
    float* base = workspace + row * kDecodeMaxSplits * (D + 2);
    return {base, base + kDecodeMaxSplits * D, base + kDecodeMaxSplits * (D + 1)};
}

// The block's reduction of one value per thread with `op` (max or sum): a butterfly in each
// warp, then the warps' results through shared memory. Every thread gets the result.
template <class Op>
__device__ float block_reduce(float x, Op op, float* slots) {
    for (int offset = 16; offset > 0; offset /= 2)
        x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
    __syncthreads();  // the slots are free: every thread has read the previous call's
    if (threadIdx.x % 32 == 0) slots[threadIdx.x / 32] = x;
    __syncthreads();
    x = slots[0];
    for (int w = 1; w < kWarps; ++w) x = op(x, slots[w]);
    return x;
}

// out = (sum_s exp(m_s - M) o_s) / (sum_s exp(m_s - M) l_s) with M the largest m_s, and
// lse = M + log of the denominator. An empty split (m = -FLT_MAX, l = 0, o = 0) adds nothing.
// Run by the block that finished the row's last split. It is the last thing the kernel waits
// for, so its loads go in parallel: thread t takes split t's weight, then each thread adds up a
// float4 column of o over every kSplitGroups-th split, and shared memory adds up the groups.
template <int D>
__device__ void merge_splits(const SplitStates& states, int splits, __nv_bfloat16* out, float* lse,
                             std::size_t row, float* weight, float* partial, float* slots) {
    constexpr int kColumns = D / 4;                  // float4 columns of an output
    constexpr int kSplitGroups = kBlock / kColumns;  // 4 at D = 128, 8 at D = 64
    const int t = threadIdx.x;
    // m_s and l_s both loaded before the first barrier: one round trip for the two.
    const float m_s = t < splits ? states.m[t] : -FLT_MAX;
    const float l_s = t < splits ? states.l[t] : 0.0f;
    const float M = block_reduce(
        m_s, [](float a, float b) { return fmaxf(a, b); }, slots);
    const float w = t < splits ? expf(m_s - M) : 0.0f;
    weight[t] = w;
    // block_reduce's barriers also make every weight visible before the loop below.
    const float L = block_reduce(
        w * l_s, [](float a, float b) { return a + b; }, slots);
    const int column = t % kColumns, group = t / kColumns;
    float4 sum = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll kMergeLoads
    for (int s = group; s < splits; s += kSplitGroups) {
        const float4 o = reinterpret_cast<const float4*>(states.o + s * D)[column];
        sum.x += weight[s] * o.x;
        sum.y += weight[s] * o.y;
        sum.z += weight[s] * o.z;
        sum.w += weight[s] * o.w;
    }
    reinterpret_cast<float4*>(partial)[group * kColumns + column] = sum;
    __syncthreads();
    if (t < D) {
        float o = 0.0f;
        for (int g = 0; g < kSplitGroups; ++g) o += partial[g * D + t];
        out[row * D + t] = __float2bfloat16(o / L);
    }
    if (t == 0) lse[row] = M + logf(L);
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
// are merged through shared memory at the end, and the block's state goes to the workspace; the
// last block of the (sequence, head) to get there merges the splits.
template <int D>
__global__ void __launch_bounds__(kBlock, kBlocksPerSm)
    decode_split_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                        const __nv_bfloat16* v_cache, const int* lengths, __nv_bfloat16* out,
                        float* lse, float* workspace, int heads, int kv_heads, int capacity,
                        float scale, int chunk) {
    constexpr int kLanesPerKey = D / 8;
    constexpr int kGroups = kBlock / kLanesPerKey;
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int kv_head = h / (heads / kv_heads);
    const int begin = split * chunk;
    const int end = min(lengths[b], begin + chunk);  // never a position at or past the length
    const int group = threadIdx.x / kLanesPerKey, lane = threadIdx.x % kLanesPerKey;
    const std::size_t row = static_cast<std::size_t>(b) * heads + h;
    const SplitStates states = split_states(workspace, row, D);

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
    __shared__ __align__(16) float group_o[kGroups][D];  // later the merge's partial sums
    static_assert(kBlock / (D / 4) <= kGroups, "the merge's partial sums fit in group_o");
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
        states.o[split * D + threadIdx.x] = block_o;
        if (threadIdx.x == 0) states.m[split] = block_m, states.l[split] = block_l;
    }

    // Count this split as done. The count is an atomic on global memory, and a block that sees
    // it may not see this block's state yet: each thread's __threadfence() puts its stores of
    // the state before the count, for every SM. The block that counts last knows that every
    // split of the row is stored; it merges them and sets the count back to 0 for the next call.
    __shared__ bool last;
    __threadfence();
    __syncthreads();  // every thread's state is stored and fenced before thread 0 counts it
    if (threadIdx.x == 0) {
        const unsigned int done = atomicAdd(&split_counters[row], 1u);
        last = done == gridDim.x - 1;
        if (last) split_counters[row] = 0;
        __threadfence();  // the count before the merge's loads: they see what the count saw
    }
    __syncthreads();
    if (!last) return;
    __shared__ float weight[kBlock], slots[kWarps];
    merge_splits<D>(states, gridDim.x, out, lse, row, weight, &group_o[0][0], slots);
}

// A wave: the blocks that all SMs run at once. The SM count, asked once.
int blocks_per_wave() {
    static const int blocks = [] {
        int device = 0, sms = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        return sms * kBlocksPerSm;
    }();
    return blocks;
}

void decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const int* lengths, __nv_bfloat16* out,
                      float* lse, float* workspace, int batch, int heads, int kv_heads,
                      int capacity, int D, float scale) {
    // One wave of blocks: batch x heads x splits <= blocks_per_wave(), so that every block runs
    // from the start and they all end together (no second, partly empty wave), and the last
    // block of each row merges as few states as keep the SMs busy: 66 splits at batch 1 x 16
    // heads on 132 SMs (64 of 512 keys once the chunk is whole trips), 4 at batch 16. Rows that
    // fill a wave by themselves take a block each.
    // The lengths are on the device: the split is sized for a full cache, and the splits past a
    // shorter sequence's length find no keys, store an empty state and count.
    const int wanted = max(1, blocks_per_wave() / (batch * heads));
    const int most = min(kDecodeMaxSplits, max(1, capacity / kMinKeysPerSplit));
    const int keys = course::ceil_div(capacity, min(wanted, most));
    const int chunk = course::ceil_div(keys, kMinKeysPerSplit) * kMinKeysPerSplit;  // whole trips
    const int splits = course::ceil_div(capacity, chunk);  // the rounding up may leave fewer
    const dim3 grid(splits, heads, batch);
    if (D == 64)
        decode_split_kernel<64><<<grid, kBlock>>>(q, k_cache, v_cache, lengths, out, lse, workspace,
                                                  heads, kv_heads, capacity, scale, chunk);
    else
        decode_split_kernel<128><<<grid, kBlock>>>(q, k_cache, v_cache, lengths, out, lse,
                                                   workspace, heads, kv_heads, capacity, scale,
                                                   chunk);
    CUDA_CHECK_LAUNCH();
}
