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

__global__ void topk_kernel(const float* logits, float* values, int* indices, int vocab, int k) {
    // TODO: block r takes row r (logits + std::size_t(r) * vocab).
    // TODO: the key of token i: its float made an ordered unsigned (as in `sample`), shifted up,
    //       with (2^24 - 1 - i) below it: unique, and larger for the smaller index of equal values.
    // TODO: the threshold, the k-th largest key, by a radix select (8 bits a round, the most
    //       significant first; each thread loading 8 logits before it uses any; the digit found
    //       by warp 0's scan); the k tokens whose key is >= it into shared memory; sort them,
    //       largest first; write values and indices.
}

void topk(const float* logits, float* values, int* indices, int rows, int vocab, int k) {
    // TODO: one block of 1024 threads per row, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("topk: write topk_kernel and launch it, then delete this line");
}
