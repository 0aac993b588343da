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
#include "course/exercise.h"
#include "decode_attention.h"

// The partial state of one split of one (sequence, head): its maximum score m, its sum
// l = sum_j exp(s_j - m) and its output o = sum_j exp(s_j - m) v_j (D floats, not divided by l).
__global__ void decode_split_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                                    const __nv_bfloat16* v_cache, const int* lengths,
                                    float* workspace, int heads, int kv_heads, int capacity, int D,
                                    float scale, int chunk) {
    // TODO: block (split, head, sequence) = (blockIdx.x, blockIdx.y, blockIdx.z) owns the keys
    //       [split * chunk, min(lengths[b], (split + 1) * chunk)) of its key-value head's cache;
    //       it may own none when lengths[b] is short.
    // TODO: the scores of those keys, their maximum, sum and output: the online softmax of
    //       module 07, one running (m, l, o) per group of lanes, merged at the end of the block.
    // TODO: store (m, l, o) in this split's slot of the workspace.
}

// out = (sum_s exp(m_s - M) o_s) / (sum_s exp(m_s - M) l_s) with M the largest m_s, and the lse.
__global__ void decode_merge_kernel(const float* workspace, __nv_bfloat16* out, float* lse,
                                    int heads, int D, int splits) {
    // TODO: one block per (sequence, head), one thread per output element d.
}

void decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const int* lengths, __nv_bfloat16* out,
                      float* lse, float* workspace, int batch, int heads, int kv_heads,
                      int capacity, int D, float scale) {
    // TODO: splits = min(kDecodeMaxSplits, ceil_div(capacity, 256)), chunk = ceil_div(capacity,
    //       splits); grid (splits, heads, batch) for the first kernel, (heads, batch) for the
    //       merge; CUDA_CHECK_LAUNCH() after each launch.
    COURSE_TODO(
        "decode_attention: write the split and merge kernels and launch them, then "
        "delete this line");
}
