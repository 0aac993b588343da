// 10_inference/sample_fast: temperature, top-k and top-p sampling with each row split over a
// thread block cluster. Fast reference: the readable solution (sample.cu, included below) plus
// what the rows' few blocks leave on the table on Hopper.
//
// Teaches: a row split over a thread block cluster. With one block per row, 16 or 64 rows keep
// 16 or 64 of an H100's 132 SMs busy, and every pass over a row runs at one SM's rate. Here up to
// 8 blocks share a row: each histograms its slice, the blocks add up their digit totals through
// distributed shared memory, so every block picks the same digit and goes on to the next round;
// the draw adds up the chunks' masses the same way. GPUs without clusters, and enough rows to
// fill the GPU with a block each, take the readable solution's path. The module README compares
// the two.
//
// Run:  grader run 10/sample --solutions     (the "sample (fast)" row)
// Contract: sample.h                         Notes:  notes/10_inference.md, section 3
#include <algorithm>
#include <cfloat>

#include "course/cluster.h"
#include "course/exercise.h"
#include "course/launch.h"
#include "sample.h"

// The readable solution, whole: its histogram, selects, scans and draw serve here too, and
// readable::sample runs what this file does not take. (Every header it includes is included
// above, so that none of them lands inside the namespace.)
namespace readable {
#include "sample.cu"
}  // namespace readable

namespace {

using readable::kBins;
using readable::kBlock;
using readable::kChunk;
using readable::kLoads;
using readable::kWarps;
using readable::Mass;
using readable::SampleShared;
using readable::Select;

struct ClusterShared {
    SampleShared block;  // the readable kernel's: the histogram's copies, the scans' partials
    // This block's digit totals in a round, then its chunks' kept masses: read by the cluster.
    Mass posted[readable::kMaxChunks];
    float posted_max;
};
static_assert(readable::kMaxChunks >= kBins, "posted holds a round's digit totals too");

// The block's part of the row: whole chunks, so that each chunk's mass is one block's.
struct Part {
    int first_chunk, end_chunk;  // chunks [first_chunk, end_chunk)
    int begin, end;              // tokens [begin, end)
    int share;                   // chunks per block: chunk c is the block of rank c / share
};

__device__ Part part_of_row(int vocab) {
    const int chunks = (vocab + kChunk - 1) / kChunk;
    const course::Slice slice =
        course::cluster_slice(chunks, course::cluster_blocks(), course::cluster_rank(), 1);
    const int share = (chunks + static_cast<int>(course::cluster_blocks()) - 1) /
                      static_cast<int>(course::cluster_blocks());
    return {slice.begin, slice.end, slice.begin * kChunk, min(slice.end * kChunk, vocab), share};
}

// readable::for_each_token over the tokens [begin, end) of the row.
template <class Visit>
__device__ void for_each_token(const float* row, int begin, int end, Visit visit) {
    for (int first = begin + threadIdx.x; first < end; first += kLoads * kBlock) {
        float logits[kLoads];
#pragma unroll
        for (int u = 0; u < kLoads; ++u) {
            const int i = first + u * kBlock;
            logits[u] = i < end ? row[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < kLoads; ++u)
            if (first + u * kBlock < end) visit(logits[u]);
    }
}

// posted[j] of the block of rank `rank` (distributed shared memory; this block's own without
// clusters).
__device__ Mass posted_by(ClusterShared& cs, unsigned rank, int j) {
    return course::in_cluster_block(cs.posted, rank)[j];
}

// The end of a round in a cluster: each block posts its digit totals, and every block adds up
// the cluster's (the same integers in every block: the same digit everywhere). Every round
// starts with a wait for the previous arrive (the cluster's blocks are done reading `posted`)
// and ends with an arrive once this block has read the others'.
__device__ void pick_digit(Select& select, ClusterShared& cs) {
    const Mass own = readable::digit_total(cs.block);
    course::cluster_wait();
    if (threadIdx.x < kBins) cs.posted[threadIdx.x] = own;
    course::cluster_sync();  // every block's totals are posted
    Mass bin = 0;
    if (threadIdx.x < kBins)
        for (unsigned rank = 0; rank < course::cluster_blocks(); ++rank)
            bin += posted_by(cs, rank, threadIdx.x);
    course::cluster_arrive();
    readable::pick_digit(select, bin, cs.block);
}

template <class Weight>
__device__ unsigned select_threshold(const float* row, const Part& part, Select select,
                                     Weight weight, ClusterShared& cs) {
    while (select.shift >= 0) {
        readable::clear_histogram(cs.block);
        for_each_token(row, part.begin, part.end, [&](float logit) {
            const unsigned key = readable::ordered_key(logit);
            if (readable::in_round(select, key))
                readable::add_weight(cs.block, select, key, weight(logit, key));
        });
        pick_digit(select, cs);
    }
    return select.prefix;
}

// readable::sample_kernel with a cluster of blocks per row: the same passes, each block over its
// part of the row, the same cuts and the same draw.
__global__ void __launch_bounds__(kBlock)
    sample_in_cluster(const float* logits, const float* uniforms, int* tokens, int vocab,
                      float temperature, int top_k, float top_p) {
    __shared__ ClusterShared cs;
    SampleShared& s = cs.block;
    const unsigned row_index = blockIdx.x / course::cluster_blocks();
    const float* row = logits + static_cast<std::size_t>(row_index) * vocab;
    const Part part = part_of_row(vocab);

    // Pass 1: the maximum and the top-k select's first round, over this block's part.
    const bool cut_k = top_k > 0 && top_k < vocab;
    Select k_select{0, 24, 0, static_cast<Mass>(top_k), 0.0f};
    readable::clear_histogram(s);
    float largest = -FLT_MAX;
    for_each_token(row, part.begin, part.end, [&](float logit) {
        largest = fmaxf(largest, logit);
        if (cut_k) readable::add_weight(s, k_select, readable::ordered_key(logit), 1);
    });
    largest = readable::block_max(largest, s.max_partials);
    largest = course::cluster_reduce(largest, &cs.posted_max,
                                     [](float a, float b) { return fmaxf(a, b); });
    course::cluster_arrive();  // done reading the maxima: each round below begins with a wait
    const auto mass = [&](float logit) {
        return static_cast<Mass>(expf((logit - largest) / temperature) * readable::kFixedPoint);
    };

    unsigned threshold = 0;
    if (cut_k) {
        pick_digit(k_select, cs);
        threshold = select_threshold(
            row, part, k_select, [](float, unsigned) { return Mass{1}; }, cs);
    }
    const unsigned top = readable::ordered_key(largest);
    if (top_p < 1.0f && top != threshold) {
        int shift = 24;
        while ((top ^ threshold) >> shift == 0) shift -= 8;
        const Select p_select{top & readable::digits_above(shift), shift, 0, 0, top_p};
        const unsigned nucleus = select_threshold(
            row, part, p_select,
            [&](float logit, unsigned key) { return key >= threshold ? mass(logit) : 0; }, cs);
        if (nucleus > threshold) threshold = nucleus;
    }
    const auto kept_mass = [&](float logit) {
        return readable::ordered_key(logit) >= threshold ? mass(logit) : 0;
    };

    // The draw: each block posts its chunks' masses (at their place in the row), every block
    // reads the row's; the first block finds the token.
    course::cluster_wait();
    for (int c = part.first_chunk + static_cast<int>(threadIdx.x) / 32; c < part.end_chunk;
         c += kWarps) {
        const Mass sum = readable::chunk_mass(row, vocab, c, kept_mass);
        if (threadIdx.x % 32 == 0) cs.posted[c - part.first_chunk] = sum;
    }
    course::cluster_sync();  // every block's chunks are posted
    const int chunks = (vocab + kChunk - 1) / kChunk;
    const int c = threadIdx.x;
    const Mass chunk = c < chunks ? posted_by(cs, c / part.share, c % part.share) : 0;
    course::cluster_arrive();
    if (course::cluster_rank() == 0)
        readable::draw_token(row, vocab, chunk, kept_mass, uniforms[row_index], tokens + row_index,
                             s);
    course::cluster_wait();  // the other blocks are done with this one's shared memory
}

// Blocks per row: enough to give every SM a block (the rows are few), at most the portable
// cluster of 8, and no more than the row has chunks.
int blocks_per_row(int rows, int vocab) {
    static const int sms = course::multiprocessor_count();
    const int chunks = course::ceil_div(vocab, kChunk);
    return std::max(1, std::min({sms / rows, static_cast<int>(course::kMaxClusterBlocks), chunks}));
}

}  // namespace

void sample(const float* logits, const float* uniforms, int* tokens, int rows, int vocab,
            float temperature, int top_k, float top_p) {
    static const bool clusters = course::clusters_available(sample_in_cluster);
    const int blocks = blocks_per_row(rows, vocab);
    if (!clusters || blocks == 1) {
        readable::sample(logits, uniforms, tokens, rows, vocab, temperature, top_k, top_p);
        return;
    }
    course::launch_in_clusters(sample_in_cluster, static_cast<unsigned>(rows * blocks), kBlock,
                               static_cast<unsigned>(blocks), 0, logits, uniforms, tokens, vocab,
                               temperature, top_k, top_p);
    CUDA_CHECK_LAUNCH();
}
