// The reference's ops of generation (ops_generation.cu), which ops_reference.cu puts in its
// table: a new token's embedding, the KV cache written, attention of one new token per sequence
// over it, and sampling on the GPU. What each computes: ops.h, the fields of the same names.
#pragma once

#include "ops.h"

namespace trainer {

template <typename Act>
void decode_embedding_reference(Act* out, const int* tokens, const Act* wte, const Act* wpe,
                                const int* lengths, int B, int C);

template <typename Act>
void kv_cache_write_reference(Act* k_cache, Act* v_cache, const Act* qkv, const int* lengths, int B,
                              int T, int C, int NH, int capacity);

// Heads whose size is kWide<Act> (8 in bf16 and fp16, 4 in fp32) times a power of two up to 32;
// other sizes throw std::invalid_argument (generation without the cache takes any).
template <typename Act>
void decode_attention_reference(Act* out, float* workspace, const Act* qkv, const Act* k_cache,
                                const Act* v_cache, const int* lengths, int B, int C, int NH,
                                int capacity);

template <typename Act>
void sample_reference(int* tokens, const Act* logits, const float* uniforms, int rows, int V,
                      int Vp, float temperature, int top_k, float top_p);

}  // namespace trainer
