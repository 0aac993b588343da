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
#include "course/exercise.h"
#include "decode_attention.h"

// Finished splits of each (sequence, head) in the current call, batch 1024 x heads 128 at most
// (the contract's limits). Zero when the program loads.
__device__ unsigned int split_counters[1024 * 128];

// The partial state of one split of one (sequence, head): its maximum score m, its sum
// l = sum_j exp(s_j - m) and its output o = sum_j exp(s_j - m) v_j (D floats, not divided by l).
__global__ void decode_split_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int* lengths,
                                    __nv_bfloat16* out, float* lse, float* workspace, int heads,
                                    int kv_heads, int capacity, int D, float scale, int chunk) {
    // TODO: block (split, head, sequence) = (blockIdx.x, blockIdx.y, blockIdx.z) owns the keys
    //       [split * chunk, min(lengths[b], (split + 1) * chunk)) of its key-value head's cache;
    //       it may own none when lengths[b] is short.
    // TODO: the scores of those keys, their maximum, sum and output: the online softmax of
    //       module 07, one running (m, l, o) per group of lanes, merged at the end of the block.
    // TODO: store (m, l, o) in this split's slot of the workspace.
    // TODO: count the split as done: __threadfence() (the state before the count, for every
    //       SM), __syncthreads(), then thread 0 atomicAdd(&split_counters[row], 1). The block
    //       that gets gridDim.x - 1 is the last: it sets the count back to 0 for the next call
    //       and merges the row's states: out = (sum_s exp(m_s - M) o_s) / (sum_s exp(m_s - M)
    //       l_s) with M the largest m_s, and lse.
}

void decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const int* lengths, __nv_bfloat16* out,
                      float* lse, float* workspace, int batch, int heads, int kv_heads,
                      int capacity, int D, float scale) {
    // TODO: splits = one wave of blocks: (SM count x 8) / (batch x heads), at least 1, at most
    //       kDecodeMaxSplits and capacity / 64; the SM count asked once (cudaDeviceGetAttribute).
    //       chunk = ceil_div(capacity, splits) rounded up to a multiple of 64 keys; splits =
    //       ceil_div(capacity, chunk); grid (splits, heads, batch); CUDA_CHECK_LAUNCH().
    COURSE_TODO("decode_attention: write the split kernel and launch it, then delete this line");
}
