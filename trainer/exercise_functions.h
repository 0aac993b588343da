// The contract functions of the exercises that the trainer's exercise tables can call (modules 01,
// 04-08 and 10, listed in kernel_ops.toml), each with the key it is found under in an exercise's
// kernel library: kernel_entry.cpp, compiled into every library, answers the key with the
// function's address where the library's exercise defines it, else null. ops_learner.cu asks for
// the keys and casts the addresses back to these types.
//
// The contracts come from the modules' headers, so a change of a contract shows here. Overloads
// (module 08's float and bf16 versions) are named by their type. The optional entry points of
// the fast references (vector_add_bf16, gemm_bf16_epilogue, layernorm_bf16,
// layernorm_backward_bf16, cross_entropy_bf16, flash_wgmma_packed: course/entry_point.h) are keys
// like the others: a library whose file does not define one answers null, and the table converts
// around the contract instead. Module 10's functions have their types written here as well, which
// the tables call: a course without the module (it is not in modules/ yet) builds without its
// headers and its keys, and where the module is there, its headers must agree with these types
// (the static_asserts below).
#pragma once

#include <cuda_bf16.h>

#include <type_traits>

#include "01_basics/vector_add.h"
#include "01_basics/vector_add_bf16.h"
#include "04_sgemm/sgemm.h"
#include "05_gemm_advanced/gemm_bf16.h"
#include "05_gemm_advanced/gemm_bf16_epilogue.h"
#include "06_softmax_norms/cross_entropy.h"
#include "06_softmax_norms/cross_entropy_bf16.h"
#include "06_softmax_norms/layernorm.h"
#include "06_softmax_norms/layernorm_backward.h"
#include "06_softmax_norms/layernorm_backward_bf16.h"
#include "06_softmax_norms/layernorm_bf16.h"
#include "07_attention/attention_naive.h"
#include "07_attention/flash_backward.h"
#include "07_attention/flash_causal.h"
#include "07_attention/flash_forward.h"
#include "07_attention/flash_tc.h"
#include "07_attention/flash_wgmma.h"
#include "07_attention/flash_wgmma_packed.h"
#include "08_training/adamw.h"
#include "08_training/embedding.h"
#include "08_training/gelu.h"
#include "08_training/linear_backward.h"

namespace trainer::exercise {

// The types of the overloaded functions of module 08, per activation type.
template <typename Act>
using GeluForward = void(Act* out, const Act* inp, long long n);
template <typename Act>
using GeluBackward = void(Act* dinp, const Act* inp, const Act* dout, long long n);
template <typename Act>
using EmbeddingForward = void(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B,
                              int T, int C);
template <typename Act>
using EmbeddingBackward = void(float* dwte, float* dwpe, const Act* dout,
                               const ::TokenBuckets& buckets, int B, int T, int C);
template <typename Act>
using AdamW = void(float* master, Act* working, const float* grads, float* m, float* v, long long n,
                   float lr, float beta1, float beta2, float beta1_correction,
                   float beta2_correction, float eps, float weight_decay, float grad_scale);

using bf16 = __nv_bfloat16;

// Module 10's contracts (modules/10_inference/decode_attention.h, topk.h, sample.h).
using DecodeAttention = void(const bf16* q, const bf16* k_cache, const bf16* v_cache,
                             const int* lengths, bf16* out, float* lse, float* workspace, int batch,
                             int heads, int kv_heads, int capacity, int D, float scale);
using TopK = void(const float* logits, float* values, int* indices, int rows, int vocab, int k);
using Sample = void(const float* logits, const float* uniforms, int* tokens, int rows, int vocab,
                    float temperature, int top_k, float top_p);

}  // namespace trainer::exercise

#if __has_include("10_inference/decode_attention.h")
#include "10_inference/decode_attention.h"
#include "10_inference/sample.h"
#include "10_inference/topk.h"
static_assert(std::is_same_v<decltype(::decode_attention), trainer::exercise::DecodeAttention> &&
                  std::is_same_v<decltype(::topk), trainer::exercise::TopK> &&
                  std::is_same_v<decltype(::sample), trainer::exercise::Sample>,
              "module 10's contracts changed: update trainer/exercise_functions.h and the tables");
#define TRAINER_HAS_MODULE10 1
#define TRAINER_MODULE10_FUNCTIONS(X)                                     \
    X("decode_attention", decode_attention, decltype(::decode_attention)) \
    X("topk", topk, decltype(::topk))                                     \
    X("sample", sample, decltype(::sample))
#else
#define TRAINER_HAS_MODULE10 0
#define TRAINER_MODULE10_FUNCTIONS(X)  // a course without module 10: no keys
#endif

// X(key, function, type) for every contract function above: the key names the function (and,
// for an overload, its activation type), `type` is its function type.
#define TRAINER_EXERCISE_FUNCTIONS(X)                                                              \
    X("vector_add", vector_add, decltype(::vector_add))                                            \
    X("vector_add_bf16", vector_add_bf16, decltype(::vector_add_bf16))                             \
    X("sgemm", sgemm, decltype(::sgemm))                                                           \
    X("gemm_bf16", gemm_bf16, decltype(::gemm_bf16))                                               \
    X("gemm_bf16_epilogue", gemm_bf16_epilogue, decltype(::gemm_bf16_epilogue))                    \
    X("layernorm", layernorm, decltype(::layernorm))                                               \
    X("layernorm_bf16", layernorm_bf16, decltype(::layernorm_bf16))                                \
    X("layernorm_backward", layernorm_backward, decltype(::layernorm_backward))                    \
    X("layernorm_backward_bf16", layernorm_backward_bf16, decltype(::layernorm_backward_bf16))     \
    X("cross_entropy", cross_entropy, decltype(::cross_entropy))                                   \
    X("cross_entropy_bf16", cross_entropy_bf16, decltype(::cross_entropy_bf16))                    \
    X("attention_naive", attention_naive, decltype(::attention_naive))                             \
    X("flash_forward", flash_forward, decltype(::flash_forward))                                   \
    X("flash_causal", flash_causal, decltype(::flash_causal))                                      \
    X("flash_tc", flash_tc, decltype(::flash_tc))                                                  \
    X("flash_wgmma", flash_wgmma, decltype(::flash_wgmma))                                         \
    X("flash_wgmma_packed", flash_wgmma_packed, decltype(::flash_wgmma_packed))                    \
    X("flash_backward", flash_backward, decltype(::flash_backward))                                \
    X("linear_backward", linear_backward, decltype(::linear_backward))                             \
    X("gelu_forward float", gelu_forward, trainer::exercise::GeluForward<float>)                   \
    X("gelu_forward bf16", gelu_forward, trainer::exercise::GeluForward<trainer::exercise::bf16>)  \
    X("gelu_backward float", gelu_backward, trainer::exercise::GeluBackward<float>)                \
    X("gelu_backward bf16", gelu_backward,                                                         \
      trainer::exercise::GeluBackward<trainer::exercise::bf16>)                                    \
    X("embedding_forward float", embedding_forward, trainer::exercise::EmbeddingForward<float>)    \
    X("embedding_forward bf16", embedding_forward,                                                 \
      trainer::exercise::EmbeddingForward<trainer::exercise::bf16>)                                \
    X("embedding_backward float", embedding_backward, trainer::exercise::EmbeddingBackward<float>) \
    X("embedding_backward bf16", embedding_backward,                                               \
      trainer::exercise::EmbeddingBackward<trainer::exercise::bf16>)                               \
    X("adamw float", adamw, trainer::exercise::AdamW<float>)                                       \
    X("adamw bf16", adamw, trainer::exercise::AdamW<trainer::exercise::bf16>)                      \
    TRAINER_MODULE10_FUNCTIONS(X)
