// 10_inference/topk_fast: the k largest logits of each row, sorted, with each row split over a
// thread block cluster. Fast reference: the readable solution (topk.cu, included below) plus
// what a few rows leave on the table on Hopper.
//
// Teaches: a row split over a thread block cluster. With one block per row, 16 rows keep 16 of an
// H100's 132 SMs busy, and every pass over a row runs at one SM's rate. Here up to 8 blocks share
// a row: each histograms its slice of the row, the blocks add up their digit totals through
// distributed shared memory, so that every block picks the same digit and goes on to the next
// round; at the end each block collects its own survivors, and the first block of the cluster
// gathers the others' from their shared memory and sorts the k. GPUs without clusters, and
// enough rows to fill the GPU with a block each, take the readable solution's path. The module
// README compares the two.
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

// readable::topk_kernel with a cluster of blocks per row: the same rounds, each block over its
// slice of the row, every block picking the same digit from the cluster's totals.
__global__ void __launch_bounds__(kBlock)
    topk_in_cluster(const float* logits, float* values, int* indices, int vocab, int k) {
    __shared__ ClusterShared cs;
    TopkShared& s = cs.block;
    const unsigned blocks = course::cluster_blocks(), rank = course::cluster_rank();
    const std::size_t row_index = blockIdx.x / blocks;
    const float* row = logits + row_index * vocab;
    // Slices of whole 128-byte lines (32 logits), the last one shorter.
    const course::Slice part = course::cluster_slice(vocab, blocks, rank, 32);

    // Every round starts with a wait for the previous round's arrive (the cluster's blocks are
    // done reading `posted`) and ends with an arrive once this block has read the others'.
    course::cluster_arrive();
    Key prefix = 0;      // the digits chosen so far, in their places
    unsigned above = 0;  // how many keys of the row lie above the prefix's range
    for (int shift = readable::kKeyBits - 8; shift >= 0; shift -= 8) {
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

    // This block's survivors into its own shared memory.
    if (threadIdx.x == 0) s.count = 0;
    __syncthreads();
    readable::for_each_key(row, part.begin, part.end, [&](Key key) {
        if (key >= threshold) s.candidates[atomicAdd(&s.count, 1u)] = key;
    });
    course::cluster_wait();  // the last round's arrive
    course::cluster_sync();  // every block's survivors are in place

    // The first block gathers the others' after its own (k in all: no two keys are equal), sorts
    // them and writes the row; the others wait until it has read their shared memory.
    if (rank == 0) {
        unsigned offset = s.count;
        for (unsigned r = 1; r < blocks; ++r) {
            const TopkShared* other = course::in_cluster_block(&s, r);
            const unsigned count = other->count;
            for (unsigned j = threadIdx.x; j < count; j += kBlock)
                s.candidates[offset + j] = other->candidates[j];
            offset += count;
        }
    }
    course::cluster_arrive();
    if (rank == 0) readable::sort_and_write(k, values + row_index * k, indices + row_index * k, s);
    course::cluster_wait();
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
    static const bool clusters = course::clusters_available(topk_in_cluster);
    const int blocks = blocks_per_row(rows, vocab);
    if (!clusters || blocks == 1) {
        readable::topk(logits, values, indices, rows, vocab, k);
        return;
    }
    course::launch_in_clusters(topk_in_cluster, static_cast<unsigned>(rows * blocks), kBlock,
                               static_cast<unsigned>(blocks), 0, logits, values, indices, vocab, k);
    CUDA_CHECK_LAUNCH();
}
