// 10_inference/topk_fast: the k largest logits of each row, sorted, with each row split over a
// thread block cluster. Fast reference: the readable solution (topk.cu, included below) plus
// what a few rows leave on the table on Hopper.
//
// Teaches: a row split over a thread block cluster. With one block per row, 16 rows keep 16 of an
// H100's 132 SMs busy, and every pass over a row runs at one SM's rate. Here up to 8 blocks share
// a row: each histograms its slice of the row (held in registers where it fits 8 tokens a
// thread), the blocks add up their digit totals through distributed shared memory, so that every
// block picks the same digit and goes on to the next round; at the end each block collects and
// sorts its own survivors (the sort's steps within a warp by shuffles), and each survivor's place
// in the row is the count of larger keys in every block's sorted list, by binary searches through
// distributed shared memory: no block gathers or sorts all k. GPUs without clusters, and enough
// rows to fill the GPU with a block each, take the readable solution's path. The module README
// compares the two.
//
// Run:  grader run 10/topk --solutions       (the "topk (fast)" row)
// Contract: topk.h                           Notes:  notes/10_inference.md, section 3
#include <algorithm>

#include "course/cluster.h"
#include "course/exercise.h"
#include "course/launch.h"
#include "topk.h"

// The readable solution, whole: its keys, histogram rounds, digit pick and sort serve here too,
// and readable::topk runs what this file does not take. (Every header it includes is included
// above, so that none of them lands inside the namespace.)
namespace readable {
#include "topk.cu"
}  // namespace readable

namespace {

using readable::kBins;
using readable::kBlock;
using readable::Key;
using readable::TopkShared;

struct ClusterShared {
    TopkShared block;        // the readable kernel's: the histogram, then this block's survivors
    unsigned posted[kBins];  // this block's digit totals in a round, read by the whole cluster
};

// The tokens of this block's slice that each thread holds in registers when the slice fits: its
// keys are then read from memory once, not once a round.
constexpr int kHeld = readable::kLoads;

// readable::count_digits over the keys this thread holds (tokens begin + threadIdx.x + u * kBlock
// below end).
__device__ void count_held_digits(const Key (&keys)[kHeld], int begin, int end, Key prefix,
                                  int shift, TopkShared& s) {
    for (int i = threadIdx.x; i < kBins * readable::kLanes; i += kBlock) s.counts[i] = 0;
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kHeld; ++u)
        if (begin + static_cast<int>(threadIdx.x) + u * kBlock < end)
            readable::count_key(keys[u], prefix, shift, s);
    __syncthreads();
    readable::add_up_columns(s);
}

// How many keys of the cluster's sorted lists (every block's s.candidates, largest first) are
// larger than `key`: its place in the row's top k. A binary search in each block's list, the
// blocks' searches side by side, so that each step waits for one round trip to the other SMs.
__device__ unsigned place_in_cluster(Key key, TopkShared& s, unsigned blocks) {
    const TopkShared* list[course::kMaxClusterBlocks];
    unsigned size[course::kMaxClusterBlocks], larger[course::kMaxClusterBlocks];
#pragma unroll
    for (unsigned r = 0; r < course::kMaxClusterBlocks; ++r) {
        list[r] = r < blocks ? course::in_cluster_block(&s, r) : &s;
        size[r] = r < blocks ? list[r]->count : 0;
        larger[r] = 0;
    }
    // The first `larger` keys of each list are larger than key: try `step` more, halving it.
    for (unsigned step = readable::kMaxK; step > 0; step /= 2) {
        Key probe[course::kMaxClusterBlocks];
#pragma unroll
        for (unsigned r = 0; r < course::kMaxClusterBlocks; ++r)
            probe[r] = larger[r] + step <= size[r] ? list[r]->candidates[larger[r] + step - 1] : 0;
#pragma unroll
        for (unsigned r = 0; r < course::kMaxClusterBlocks; ++r)
            if (probe[r] > key) larger[r] += step;
    }
    unsigned place = 0;
#pragma unroll
    for (unsigned r = 0; r < course::kMaxClusterBlocks; ++r) place += larger[r];
    return place;
}

// The bitonic steps of strides below 32 for the widths `from` .. `to`, in registers: a warp holds
// 32 consecutive places, and a stride below 32 pairs places of one warp, exchanged by shuffles
// with no barrier between the steps (readable::bitonic_step's rule for which key each keeps).
__device__ void steps_in_warps(int size, int from, int to, TopkShared& s) {
    for (int p = threadIdx.x; p < size; p += kBlock) {  // whole warps: size is a multiple of 32
        Key x = s.candidates[p];
        for (int width = from; width <= to; width *= 2) {
            for (int stride = min(width, readable::kLanes) / 2; stride > 0; stride /= 2) {
                const Key y = __shfl_xor_sync(0xffffffffu, x, stride);
                const bool larger_here = ((p & stride) == 0) == ((p & width) == 0);
                if ((x < y) == larger_here) x = y;
            }
        }
        s.candidates[p] = x;
    }
    __syncthreads();
}

// readable::sort_keys with the steps of strides below 32 in registers: a sort of 512 keys waits
// at 16 barriers instead of 46.
__device__ void sort_survivors(int count, TopkShared& s) {
    int size = readable::kLanes;  // at least a warp's places
    while (size < count) size *= 2;
    for (int j = count + threadIdx.x; j < size; j += kBlock) s.candidates[j] = 0;
    __syncthreads();
    steps_in_warps(size, 2, readable::kLanes, s);
    for (int width = 2 * readable::kLanes; width <= size; width *= 2) {
        for (int stride = width / 2; stride >= readable::kLanes; stride /= 2)
            readable::bitonic_step(size, width, stride, s);
        steps_in_warps(size, width, width, s);
    }
}

// readable::topk_kernel with a cluster of blocks per row: the same rounds, each block over its
// slice of the row, every block picking the same digit from the cluster's totals. With kHolds,
// each thread keeps its keys of the slice in registers from the first load on.
template <bool kHolds>
__global__ void __launch_bounds__(kBlock)
    topk_in_cluster(const float* logits, float* values, int* indices, int vocab, int k) {
    __shared__ ClusterShared cs;
    TopkShared& s = cs.block;
    const unsigned blocks = course::cluster_blocks();
    const std::size_t row_index = blockIdx.x / blocks;
    const float* row = logits + row_index * vocab;
    // Slices of whole 128-byte lines (32 logits), the last one shorter.
    const course::Slice part =
        course::cluster_slice(vocab, blocks, course::cluster_rank(), readable::kLanes);

    Key held[kHeld] = {};
    if constexpr (kHolds) {
        float logits_held[kHeld];  // all loads first, as readable::for_each_key
#pragma unroll
        for (int u = 0; u < kHeld; ++u) {
            const int i = part.begin + static_cast<int>(threadIdx.x) + u * kBlock;
            logits_held[u] = i < part.end ? row[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kHeld; ++u)
            held[u] = readable::token_key(logits_held[u],
                                          part.begin + static_cast<int>(threadIdx.x) + u * kBlock);
    }

    // Every round starts with a wait for the previous round's arrive (the cluster's blocks are
    // done reading `posted`) and ends with an arrive once this block has read the others'.
    course::cluster_arrive();
    Key prefix = 0;      // the digits chosen so far, in their places
    unsigned above = 0;  // how many keys of the row lie above the prefix's range
    for (int shift = readable::kKeyBits - 8; shift >= 0; shift -= 8) {
        if constexpr (kHolds)
            count_held_digits(held, part.begin, part.end, prefix, shift, s);
        else
            readable::count_digits(row, part.begin, part.end, prefix, shift, s);
        course::cluster_wait();
        if (threadIdx.x < kBins) cs.posted[threadIdx.x] = s.bins[threadIdx.x];
        course::cluster_sync();  // every block's totals are posted
        if (threadIdx.x < kBins) {
            unsigned total = 0;
            for (unsigned r = 0; r < blocks; ++r)
                total += course::in_cluster_block(cs.posted, r)[threadIdx.x];
            s.bins[threadIdx.x] = total;  // the row's totals: the same digit in every block
        }
        course::cluster_arrive();
        __syncthreads();
        readable::pick_digit(prefix, above, shift, k, s);
        prefix = s.prefix;
        above = s.above;
        if (s.done) break;  // the same in every thread of every block
    }
    const Key threshold = prefix;

    // This block's survivors into its own shared memory, sorted there.
    if (threadIdx.x == 0) s.count = 0;
    __syncthreads();
    const auto collect = [&](Key key) {
        if (key >= threshold) s.candidates[atomicAdd(&s.count, 1u)] = key;
    };
    if constexpr (kHolds) {
#pragma unroll
        for (int u = 0; u < kHeld; ++u)
            if (part.begin + static_cast<int>(threadIdx.x) + u * kBlock < part.end)
                collect(held[u]);
    } else {
        readable::for_each_key(row, part.begin, part.end, collect);
    }
    __syncthreads();  // the count is complete
    sort_survivors(s.count, s);
    course::cluster_wait();  // the last round's arrive
    course::cluster_sync();  // every block's survivors are sorted, cluster-wide

    // The k survivors are spread over the blocks, each block's sorted: a survivor's place in the
    // row is the number of keys larger than it in all of them. Every block writes its own.
    const unsigned count = s.count;
    const std::size_t out = row_index * k;
    for (unsigned j = threadIdx.x; j < count; j += kBlock) {
        const Key key = s.candidates[j];
        const unsigned place = place_in_cluster(key, s, blocks);
        values[out + place] = readable::value_of(key);
        indices[out + place] = readable::index_of(key);
    }
    course::cluster_arrive();  // done reading the others' lists
    course::cluster_wait();    // and they are done reading this block's
}

// Blocks per row: enough to give every SM a block (the rows are few), at most the portable
// cluster of 8, and at least a token per thread in each.
int blocks_per_row(int rows, int vocab) {
    static const int sms = course::multiprocessor_count();
    const int most_for_vocab = course::ceil_div(vocab, kBlock);
    return std::max(
        1, std::min({sms / rows, static_cast<int>(course::kMaxClusterBlocks), most_for_vocab}));
}

}  // namespace

void topk(const float* logits, float* values, int* indices, int rows, int vocab, int k) {
    static const bool clusters = course::clusters_available(topk_in_cluster<true>);
    const int blocks = blocks_per_row(rows, vocab);
    if (!clusters || blocks == 1) {
        readable::topk(logits, values, indices, rows, vocab, k);
        return;
    }
    // The first slice is the longest: where it fits the threads' registers, every slice does.
    const course::Slice first = course::cluster_slice(vocab, blocks, 0, readable::kLanes);
    const bool holds = first.end - first.begin <= kHeld * kBlock;
    course::launch_in_clusters(holds ? topk_in_cluster<true> : topk_in_cluster<false>,
                               static_cast<unsigned>(rows * blocks), kBlock,
                               static_cast<unsigned>(blocks), 0, logits, values, indices, vocab, k);
    CUDA_CHECK_LAUNCH();
}
