// trainer/ops_generation: the reference's ops of generation with a KV cache: a new token's
// embedding at its position, each layer's keys and values written into the cache, attention of one
// new token per sequence over it, and sampling the next token on the GPU.
//
// Teaches: what decoding is made of once the cache holds every earlier token's keys and values.
// Attention for one query reads its head's whole cache once, about one FLOP per byte, so it is
// bound by memory; a batch of one sequence has too few (sequence, head) pairs to fill the GPU, so
// each cache is cut along its positions (flash-decoding, kv_cache.h): a block per chunk keeps the
// online softmax of its keys (a group of lanes per key, one 16-byte load each, several keys in
// flight), and a second kernel merges the chunks' states, each rescaled to their common maximum.
// The cut is the capacity's and the lengths are read on the GPU, as the position of the embedding
// and of the cache's writes: nothing a kernel is launched with changes from one token to the next,
// so one CUDA graph of a decoding step replays every step (gpt.cu).
// Sampling needs no sort: top-k and top-p are thresholds on the logits, found by a radix select
// over their bits (counts for top-k, masses for top-p), with masses in fixed point so that every
// sum is exact whatever its order, and the draw is a block-wide scan in vocabulary order: the same
// rule as the host's (sampling.h), whose fixed-point twin runs the same arithmetic.
//
// Run:  build/trainer/bin/train_gpt --generate --resume out/model.ckpt --generate-batch 4
//       build/trainer/bin/train_gpt --generate-bench 1024 -m gpt2-124m     (trainer/README.md)
// Interface: ops.h (decode_embedding, kv_cache_write, decode_attention, sample),
//            ops_generation.h
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "course/activation.h"
#include "course/check.h"
#include "course/launch.h"
#include "kernel_common.h"
#include "kv_cache.h"
#include "ops_generation.h"
#include "sampling.h"

namespace trainer {
namespace {

using course::from_float;
using course::to_float;
using sampling::Mass;

// ---- A new token's embedding ----

// A thread per element: the token's row of wte plus the row of wpe at its position, the
// arithmetic of the reference's embedding_forward (ops_reference.cu), so that a decoding step
// embeds its token to the same bits as a forward pass does.
template <typename Act>
__global__ void decode_embedding_kernel(Act* out, const int* tokens, const Act* wte, const Act* wpe,
                                        const int* lengths, int B, int C) {
    const long long n = static_cast<long long>(B) * C;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const int b = static_cast<int>(i / C), c = static_cast<int>(i % C);
        const long long position = lengths[b] - 1;
        out[i] = from_float<Act>(to_float(wte[static_cast<long long>(tokens[b]) * C + c]) +
                                 to_float(wpe[position * C + c]));
    }
}

// ---- The cache written ----

// Each thread moves W values of a head's row (W divides the head size): the key from qkv's k
// part, the value from its v part, to position lengths[b] - T + t of the sequence's cache.
template <typename Act, int W>
__global__ void kv_cache_write_kernel(Act* k_cache, Act* v_cache, const Act* qkv,
                                      const int* lengths, int T, int C, int NH, int capacity,
                                      long long packs) {
    using Vec = Pack<Act, W>;
    const int HS = C / NH;
    for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < packs;
         p += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long i = p * W;  // in the [B, T, C] keys
        const long long bt = i / C;
        const int c = static_cast<int>(i % C);
        const int t = static_cast<int>(bt % T), b = static_cast<int>(bt / T);
        const int position = lengths[b] - T + t;
        if (position < 0 || position >= capacity) continue;  // never another sequence's cache
        const std::size_t to = kv::offset(b, c / HS, position, c % HS, NH, capacity, HS);
        const Act* row = qkv + bt * 3 * C;
        *reinterpret_cast<Vec*>(k_cache + to) = *reinterpret_cast<const Vec*>(row + C + c);
        *reinterpret_cast<Vec*>(v_cache + to) = *reinterpret_cast<const Vec*>(row + 2 * C + c);
    }
}

// ---- Decode attention: split along the cache, then merged ----

constexpr int kDecodeBlock = 128;
// Keys a group loads before it uses any: with K and V, 2 x 4 loads of 16 bytes in flight per lane.
constexpr int kDecodeUnroll = 4;

// The lanes that read one key: a key of HS values is HS / kWide<Act> loads of 16 bytes, a lane
// each, and the lanes of a key must sit in one warp, a power of two of them.
template <typename Act>
int decode_lanes(int HS) {
    const int lanes = HS / kWide<Act>;
    if (HS % kWide<Act> != 0 || lanes > kWarp || (lanes & (lanes - 1)) != 0)
        throw std::invalid_argument(
            "generation with the KV cache takes heads of " + std::to_string(kWide<Act>) + ", " +
            std::to_string(2 * kWide<Act>) + ", 4, ... up to " + std::to_string(kWarp) + " times " +
            std::to_string(kWide<Act>) + " elements in " + kDtypeName<Act> + "; this model's are " +
            std::to_string(HS) + ": --no-kv-cache generates without it");
    return lanes;
}

// A block per (chunk, head, sequence). Its kDecodeBlock / lanes groups each take every groups-th
// key of the chunk, kDecodeUnroll at a time, with an online softmax of their own, merged through
// shared memory at the end into the chunk's state in the workspace (kv::state_offset).
template <typename Act>
__global__ void __launch_bounds__(kDecodeBlock)
    decode_split_kernel(float* workspace, const Act* qkv, const Act* k_cache, const Act* v_cache,
                        const int* lengths, int C, int NH, int capacity, int chunk, int lanes,
                        float scale) {
    constexpr int W = kWide<Act>;
    using Vec = Pack<Act, W>;
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int HS = lanes * W, groups = kDecodeBlock / lanes;
    const int group = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    const int begin = split * chunk;
    const int end = min(lengths[b], begin + chunk);  // never a position at or past the length
    const std::size_t row = static_cast<std::size_t>(b) * NH + h;

    // This lane's W values of the query, the scale folded in once.
    float q[W];
    const Vec qs =
        reinterpret_cast<const Vec*>(qkv + static_cast<std::size_t>(b) * 3 * C + h * HS)[lane];
#pragma unroll
    for (int k = 0; k < W; ++k) q[k] = to_float(qs.value[k]) * scale;
    const Vec* keys =
        reinterpret_cast<const Vec*>(k_cache + kv::offset(b, h, 0, 0, NH, capacity, HS)) + lane;
    const Vec* values =
        reinterpret_cast<const Vec*>(v_cache + kv::offset(b, h, 0, 0, NH, capacity, HS)) + lane;
    Vec zero;  // what a key past the end holds here: finite, so that 0 * it stays 0
#pragma unroll
    for (int k = 0; k < W; ++k) zero.value[k] = from_float<Act>(0.0f);

    kv::PartialSoftmax state;
    float o[W] = {};
    // The bound is the block's, not the group's: every lane of a warp takes the same trips, so the
    // shuffles below always find all 32 lanes.
    for (int base = begin; base < end; base += groups * kDecodeUnroll) {
        Vec key[kDecodeUnroll], value[kDecodeUnroll];
#pragma unroll
        for (int u = 0; u < kDecodeUnroll; ++u) {
            const int j = base + u * groups + group;
            key[u] = j < end ? keys[static_cast<std::size_t>(j) * lanes] : zero;
            value[u] = j < end ? values[static_cast<std::size_t>(j) * lanes] : zero;
        }
        float s[kDecodeUnroll];
        float tile_max = -FLT_MAX;
#pragma unroll
        for (int u = 0; u < kDecodeUnroll; ++u) {
            s[u] = 0.0f;
#pragma unroll
            for (int k = 0; k < W; ++k) s[u] += q[k] * to_float(key[u].value[k]);
            // A key's lanes are consecutive lanes of one warp: the butterfly over them leaves the
            // whole dot product in each.
            for (int offset = lanes / 2; offset > 0; offset /= 2)
                s[u] += __shfl_xor_sync(kFullMask, s[u], offset);
            if (base + u * groups + group >= end) s[u] = -INFINITY;  // weighs exp(-inf) = 0
            tile_max = fmaxf(tile_max, s[u]);
        }
        const float alpha = state.rescale(fmaxf(state.m, tile_max));
#pragma unroll
        for (int k = 0; k < W; ++k) o[k] *= alpha;
#pragma unroll
        for (int u = 0; u < kDecodeUnroll; ++u) {
            const float p = expf(s[u] - state.m);
            state.l += p;
#pragma unroll
            for (int k = 0; k < W; ++k) o[k] += p * to_float(value[u].value[k]);
        }
    }

    // The groups' states to one, each rescaled to the block's maximum: thread d owns element d.
    // groups * HS = kDecodeBlock * W floats whatever the head size.
    __shared__ float group_m[kDecodeBlock], group_l[kDecodeBlock];
    __shared__ float group_o[kDecodeBlock * W];
    if (lane == 0) group_m[group] = state.m, group_l[group] = state.l;
#pragma unroll
    for (int k = 0; k < W; ++k) group_o[group * HS + lane * W + k] = o[k];
    __syncthreads();
    float* out = workspace + kv::state_offset(row, split, HS);
    for (int d = threadIdx.x; d < HS; d += kDecodeBlock) {
        float M = -FLT_MAX;
        for (int g = 0; g < groups; ++g) M = fmaxf(M, group_m[g]);
        float l = 0.0f, od = 0.0f;
        for (int g = 0; g < groups; ++g) {
            const float w = kv::merge_weight(group_m[g], M);
            l += w * group_l[g];
            od += w * group_o[g * HS + d];
        }
        out[d] = od;
        if (d == 0) out[HS] = M, out[HS + 1] = l;
    }
}

// A block per (head, sequence), a thread per element of the head: out = sum_s w_s o_s / sum_s
// w_s l_s, w_s the merge weight of split s's maximum in the largest. The weights are computed
// once, in shared memory; then each thread's loop over the splits reads o_s[d], one coalesced
// load per split.
template <typename Act>
__global__ void decode_merge_kernel(Act* out, const float* workspace, int C, int NH, int HS,
                                    int splits) {
    __shared__ float weight[kDecodeMaxSplits], sum[kDecodeMaxSplits];
    const int h = blockIdx.x, b = blockIdx.y;
    const std::size_t row = static_cast<std::size_t>(b) * NH + h;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        weight[s] = workspace[kv::state_offset(row, s, HS) + HS];  // m_s, for now
        sum[s] = workspace[kv::state_offset(row, s, HS) + HS + 1];
    }
    __syncthreads();
    float M = -FLT_MAX;
    for (int s = 0; s < splits; ++s) M = fmaxf(M, weight[s]);
    __syncthreads();  // every thread has its M before the maxima become weights
    for (int s = threadIdx.x; s < splits; s += blockDim.x)
        weight[s] = kv::merge_weight(weight[s], M);
    __syncthreads();
    for (int d = threadIdx.x; d < HS; d += blockDim.x) {
        float l = 0.0f, o = 0.0f;
        for (int s = 0; s < splits; ++s) {
            l += weight[s] * sum[s];
            o += weight[s] * workspace[kv::state_offset(row, s, HS) + d];
        }
        out[static_cast<std::size_t>(b) * C + h * HS + d] = from_float<Act>(o / l);
    }
}

// The GPU's SMs, asked once: the split of decode attention fills them.
int sm_count() {
    static const int count = course::multiprocessor_count();
    return count;
}

// ---- Sampling ----

constexpr int kSampleBlock = 512;
constexpr int kSampleWarps = kSampleBlock / kWarp;
// Tokens per thread whose loads a select's pass issues together: one block reads a whole row, so
// a load at a time would leave each pass waiting on ~100 round trips to memory per thread.
constexpr int kSampleLoads = 8;

// What a block's threads share: a select's histogram and its outcome, the partials of its sums.
struct SampleShared {
    Mass bins[sampling::kBins];
    Mass lanes[kSampleWarps][kWarp];  // add_to_bins' values, a row per warp
    Mass partials[kSampleWarps];
    float maxima[kSampleWarps];
    unsigned prefix;
    Mass above;
};

// The block's sum (or maximum) of one value per thread, in every thread.
__device__ Mass block_sum(Mass value, SampleShared& shared) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullMask, value, offset);
    if (threadIdx.x % kWarp == 0) shared.partials[threadIdx.x / kWarp] = value;
    __syncthreads();
    Mass total = 0;
    for (int w = 0; w < kSampleWarps; ++w) total += shared.partials[w];
    __syncthreads();  // the partials are reused by the next call
    return total;
}
__device__ float block_max(float value, SampleShared& shared) {
    value = warp_max(value);
    if (threadIdx.x % kWarp == 0) shared.maxima[threadIdx.x / kWarp] = value;
    __syncthreads();
    float result = -FLT_MAX;
    for (int w = 0; w < kSampleWarps; ++w) result = fmaxf(result, shared.maxima[w]);
    __syncthreads();
    return result;
}

// Each lane's weight w (0: none) added into shared.bins[bin], one atomic per distinct bin of the
// warp: the lanes with the same bin (__match_any_sync) leave their weights in the warp's row of
// shared.lanes and the first of them adds their sum. The first rounds' digit is the logits' sign
// and exponent, which most of a row's tokens share: an atomic per token would queue some 50,000
// on one or two addresses (0.56 ms per row on an H100), one per warp and bin queues 32 times
// fewer. Called by all 32 lanes of every warp.
__device__ void add_to_bins(unsigned bin, Mass w, SampleShared& shared) {
    constexpr unsigned kNone = sampling::kBins;  // a bin no lane adds to
    const unsigned peers = __match_any_sync(kFullMask, w != 0 ? bin : kNone);
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    shared.lanes[warp][lane] = w;
    __syncwarp();
    if (w != 0 && lane == __ffs(peers) - 1) {
        Mass sum = 0;
        for (unsigned rest = peers; rest != 0; rest &= rest - 1)
            sum += shared.lanes[warp][__ffs(rest) - 1];
        atomicAdd(&shared.bins[bin], sum);
    }
    __syncwarp();  // the row is read before the next call writes it
}

// The largest key v such that the weights of the row's tokens with key >= v add up to `need` or
// more: four rounds of 8 bits, the most significant first, each a histogram (shared-memory
// atomics: integer sums, the same in any order) of the keys that match the digits chosen so far,
// by their next digit; thread 0 picks the digit (sampling::choose_digit, as the host twin). The
// loop runs whole tiles of kSampleLoads x the block's tokens (their loads first, all in flight),
// so that every lane of a warp reaches add_to_bins.
template <typename Act, typename Weight>
__device__ unsigned select_threshold(const Act* row, int V, Mass need, Weight weight,
                                     SampleShared& shared) {
    unsigned prefix = 0;
    Mass above = 0;
    for (int shift = sampling::kFirstShift; shift >= 0; shift -= sampling::kDigitBits) {
        for (int d = threadIdx.x; d < sampling::kBins; d += blockDim.x) shared.bins[d] = 0;
        __syncthreads();
        const unsigned chosen = sampling::digits_above(shift);
        for (int tile = 0; tile < V; tile += kSampleLoads * blockDim.x) {
            float x[kSampleLoads];
#pragma unroll
            for (int j = 0; j < kSampleLoads; ++j) {
                const int i = tile + j * blockDim.x + threadIdx.x;  // coalesced for each j
                x[j] = i < V ? to_float(row[i]) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < kSampleLoads; ++j) {
                const unsigned key = sampling::ordered_key(x[j]);
                unsigned bin = 0;
                Mass w = 0;
                if (tile + j * blockDim.x + threadIdx.x < V && (key & chosen) == prefix) {
                    w = weight(x[j], key);
                    bin = (key >> shift) & (sampling::kBins - 1);
                }
                add_to_bins(bin, w, shared);
            }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            shared.prefix = prefix | sampling::choose_digit(shared.bins, need, &above) << shift;
            shared.above = above;
        }
        __syncthreads();
        prefix = shared.prefix;
        above = shared.above;
    }
    return prefix;
}

// A block per row: the row's largest logit, the top-k threshold (counting tokens), the top-p
// threshold (their masses), then the draw: the kept mass's total times u, and a walk over tiles of
// kSampleBlock tokens, a block-wide inclusive scan each, to the tile where the prefix passes it.
template <typename Act>
__global__ void __launch_bounds__(kSampleBlock)
    sample_kernel(int* tokens, const Act* logits, const float* uniforms, int V, int Vp,
                  float temperature, int top_k, float top_p) {
    __shared__ SampleShared shared;
    const Act* row = logits + static_cast<std::size_t>(blockIdx.x) * Vp;
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;

    float largest = -FLT_MAX;
    for (int i = threadIdx.x; i < V; i += blockDim.x) largest = fmaxf(largest, to_float(row[i]));
    largest = block_max(largest, shared);

    unsigned threshold = 0;  // below every key: keeps every token
    if (top_k > 0 && top_k < V)
        threshold = select_threshold(
            row, V, static_cast<Mass>(top_k), [](float, unsigned) { return Mass{1}; }, shared);
    const auto kept_mass = [&](float x, unsigned key) -> Mass {
        return key >= threshold ? sampling::mass(x, largest, temperature) : 0;
    };
    const auto kept_total = [&] {
        Mass total = 0;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            const float x = to_float(row[i]);
            total += kept_mass(x, sampling::ordered_key(x));
        }
        return block_sum(total, shared);
    };
    if (top_p < 1.0f)
        threshold =
            select_threshold(row, V, sampling::top_p_need(top_p, kept_total()), kept_mass, shared);

    const Mass target = sampling::draw_target(uniforms[blockIdx.x], kept_total());
    Mass before = 0;  // the kept mass of the tiles walked
    for (int tile = 0; tile < V; tile += kSampleBlock) {
        const int i = tile + threadIdx.x;
        Mass own = 0;
        if (i < V) {
            const float x = to_float(row[i]);
            own = kept_mass(x, sampling::ordered_key(x));
        }
        // Inclusive scan: within the warp by shuffles, then the totals of the warps before.
        Mass inclusive = own;
        for (int offset = 1; offset < kWarp; offset *= 2) {
            const Mass other = __shfl_up_sync(kFullMask, inclusive, offset);
            if (lane >= offset) inclusive += other;
        }
        if (lane == kWarp - 1) shared.partials[warp] = inclusive;
        __syncthreads();
        Mass tile_total = 0;
        for (int w = 0; w < kSampleWarps; ++w) {
            if (w < warp) inclusive += shared.partials[w];
            tile_total += shared.partials[w];
        }
        __syncthreads();
        inclusive += before;
        if (inclusive > target && inclusive - own <= target) tokens[blockIdx.x] = i;
        before += tile_total;
        if (before > target) return;  // the same in every thread: the block leaves together
    }
}

}  // namespace

template <typename Act>
void decode_embedding_reference(Act* out, const int* tokens, const Act* wte, const Act* wpe,
                                const int* lengths, int B, int C) {
    const long long n = static_cast<long long>(B) * C;
    decode_embedding_kernel<Act><<<elementwise_blocks(n), kElementwiseBlock, 0, op_stream()>>>(
        out, tokens, wte, wpe, lengths, B, C);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void kv_cache_write_reference(Act* k_cache, Act* v_cache, const Act* qkv, const int* lengths, int B,
                              int T, int C, int NH, int capacity) {
    const long long n = static_cast<long long>(B) * T * C;
    if (n == 0) return;
    const auto launch = [&](auto width) {
        constexpr int W = decltype(width)::value;
        kv_cache_write_kernel<Act, W>
            <<<elementwise_blocks(n / W), kElementwiseBlock, 0, op_stream()>>>(
                k_cache, v_cache, qkv, lengths, T, C, NH, capacity, n / W);
    };
    if ((C / NH) % kWide<Act> == 0 && moves_wide<Act>(n, k_cache, v_cache, qkv))
        launch(std::integral_constant<int, kWide<Act>>{});
    else
        launch(std::integral_constant<int, 1>{});
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void decode_attention_reference(Act* out, float* workspace, const Act* qkv, const Act* k_cache,
                                const Act* v_cache, const int* lengths, int B, int C, int NH,
                                int capacity) {
    const int HS = C / NH;
    const int lanes = decode_lanes<Act>(HS);
    if (!course::is_aligned(qkv, 16) || !course::is_aligned(k_cache, 16) ||
        !course::is_aligned(v_cache, 16))
        throw std::invalid_argument("decode_attention: qkv and the caches must be 16-byte aligned");
    const kv::Split split = kv::split_for(capacity, B * NH, sm_count());
    decode_split_kernel<Act><<<dim3(split.splits, NH, B), kDecodeBlock, 0, op_stream()>>>(
        workspace, qkv, k_cache, v_cache, lengths, C, NH, capacity, split.chunk, lanes,
        attention_scale(HS));
    CUDA_CHECK_LAUNCH();
    // A thread per element of a head, in whole warps.
    decode_merge_kernel<Act><<<dim3(NH, B), course::ceil_div(HS, kWarp) * kWarp, 0, op_stream()>>>(
        out, workspace, C, NH, HS, split.splits);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void sample_reference(int* tokens, const Act* logits, const float* uniforms, int rows, int V,
                      int Vp, float temperature, int top_k, float top_p) {
    if (V > sampling::kMaxVocab)
        throw std::invalid_argument("sample: a vocabulary of " + std::to_string(V) +
                                    " is more than the fixed-point sums hold (2^23)");
    sample_kernel<Act><<<rows, kSampleBlock, 0, op_stream()>>>(tokens, logits, uniforms, V, Vp,
                                                               temperature, top_k, top_p);
    CUDA_CHECK_LAUNCH();
}

#define TRAINER_GENERATION_OPS(Act)                                                                \
    template void decode_embedding_reference<Act>(Act*, const int*, const Act*, const Act*,        \
                                                  const int*, int, int);                           \
    template void kv_cache_write_reference<Act>(Act*, Act*, const Act*, const int*, int, int, int, \
                                                int, int);                                         \
    template void decode_attention_reference<Act>(Act*, float*, const Act*, const Act*,            \
                                                  const Act*, const int*, int, int, int, int);     \
    template void sample_reference<Act>(int*, const Act*, const float*, int, int, int, float, int, \
                                        float);
TRAINER_GENERATION_OPS(float)
TRAINER_GENERATION_OPS(bf16)
TRAINER_GENERATION_OPS(fp16)
#undef TRAINER_GENERATION_OPS

}  // namespace trainer
