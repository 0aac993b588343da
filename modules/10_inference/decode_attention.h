// Contract of 10_inference/decode_attention. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

// The most splits of one sequence's cache: the workspace holds this many partial states per
// (sequence, query head).
constexpr int kDecodeMaxSplits = 128;

// The floats of scratch memory the checker gives decode_attention: per (sequence, query head)
// and split, room for a partial output (D floats), its maximum and its sum.
constexpr std::size_t decode_attention_workspace_floats(int batch, int heads, int D) {
    return static_cast<std::size_t>(batch) * heads * kDecodeMaxSplits * (D + 2);
}

// One decoding step of attention: the new token of each sequence b, query head h, against the
// first lengths[b] positions of its sequence's key-value cache:
//     s_j = scale * (q[b][h] . K[b][g][j]),   0 <= j < lengths[b]
//     out[b][h] = sum_j exp(s_j - L) V[b][g][j],   lse[b][h] = L = log sum_j exp(s_j)
// with g = h / (heads / kv_heads), the key-value head that query head h shares (grouped-query
// attention; kv_heads == heads is plain multi-head attention).
// - Layouts (row-major, D contiguous): q and out [batch][heads][D], bf16; k_cache and v_cache
//   [batch][kv_heads][capacity][D], bf16; lengths [batch], int; lse [batch][heads], float32.
//   Scores, the softmax and the sums in float32; out rounded to bf16 once, at the end.
// - D is 64 or 128; 1 <= batch <= 1024; 1 <= kv_heads <= heads <= 128, heads a multiple of
//   kv_heads; 1 <= lengths[b] <= capacity <= 65536; batch * kv_heads * capacity * D < 2^31.
// - Cache positions at or past lengths[b] hold anything (NaN included): never read them.
// - workspace: decode_attention_workspace_floats(batch, heads, D) floats of device memory, its
//   contents on entry anything, yours for the call (the partial states of the splits).
// - Every pointer is a device pointer, 16-byte aligned; none aliases another.
// lengths lives on the device: the launcher cannot read it without a synchronization, so size
// the split from capacity. Enqueue the work on the default stream and return; the checker
// synchronizes.
void decode_attention(const __nv_bfloat16* q, const __nv_bfloat16* k_cache,
                      const __nv_bfloat16* v_cache, const int* lengths, __nv_bfloat16* out,
                      float* lse, float* workspace, int batch, int heads, int kv_heads,
                      int capacity, int D, float scale);
