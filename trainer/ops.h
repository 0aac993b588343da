// The trainer's dispatch layer: every operation of the GPT model goes through one table of
// function pointers, so that the same forward and backward code (gpt.cu) runs on the course's
// reference kernels or on a learner's.
//
// Act is the type of the activations and of the working copy of the weights: float in the
// all-fp32 mode (for checking), __nv_bfloat16 or __half in mixed precision (fp16 where the GPU has
// no bf16 tensor cores: compute capability 7.x, the T4). Parameter gradients, the optimizer's
// state and the master weights are always float, as are the LayerNorm statistics and the losses.
//
// Shapes use the names of the model: B sequences of T tokens, C channels, NH heads, OC output
// channels of a linear layer, V the vocabulary and Vp the vocabulary padded for the GEMMs.
// Every pointer is a device pointer; every function enqueues its work in order on one stream: the
// default stream, or, while generation captures a decoding step into a CUDA graph, the capture's
// (op_stream below; a table says in graph_refusal where its ops cannot follow it).
//
// The tables (ops_reference.cu): "reference", the course's fastest implementation (generation's ops
// in ops_generation.cu), and "profile", the same ops each timed alone with CUDA events (a table of
// GPU time per op at exit). Module 08's exercise tables (ops_learner.cu): "learner", whose entries
// call the learner's exercise kernels through their contracts, taking the reference entry for every
// op the learner has not plugged in, "solutions", the same with the course's readable solutions,
// and "fast", with the course's fast references (the readable solution where an exercise has none);
// `train_gpt --kernels NAME` selects a table (ops_table below).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>

namespace trainer {

using bf16 = __nv_bfloat16;
using fp16 = __half;

// The name of a storage type, as --dtype spells it.
template <typename Act>
constexpr const char* kDtypeName = std::is_same_v<Act, float>  ? "fp32"
                                   : std::is_same_v<Act, bf16> ? "bf16"
                                                               : "fp16";

// Where each token of a micro-batch sits, grouped by token id, so that the gradient of the token
// embedding sums each row in a fixed order (no atomics, the same bits on every run). Built on the
// host from the token ids (gpt.cu), uploaded with them.
struct TokenBuckets {
    int count;             // number of distinct tokens in the micro-batch
    const int* token;      // [count]: the token id of each bucket
    const int* start;      // [count + 1]: bucket k holds positions[start[k] .. start[k + 1])
    const int* positions;  // [B * T]: flat positions b * T + t, in increasing order per bucket
};

// The stream the reference's kernels and products are enqueued on (ops_reference.cu,
// ops_generation.cu): the default stream, except while generation captures a decoding step into a
// CUDA graph (gpt.cu), which it does on a stream of its own because the default stream cannot be
// captured. What the reference runs through a contract without a stream (module 06's LayerNorm in
// fp32, module 07's attention, cuDNN's) stays on the default stream. Per thread, as the capture.
namespace detail {
inline thread_local cudaStream_t op_stream = nullptr;
}
inline cudaStream_t op_stream() { return detail::op_stream; }

// While it lives, op_stream() is `stream` on this thread.
class OpStreamScope {
  public:
    explicit OpStreamScope(cudaStream_t stream) : previous_(detail::op_stream) {
        detail::op_stream = stream;
    }
    ~OpStreamScope() { detail::op_stream = previous_; }
    OpStreamScope(const OpStreamScope&) = delete;
    OpStreamScope& operator=(const OpStreamScope&) = delete;

  private:
    cudaStream_t previous_;
};

// The softmax scale of attention with heads of HS elements: 1 / sqrt(HS).
inline float attention_scale(int HS) { return 1.0f / std::sqrt(static_cast<float>(HS)); }

// Decode attention (generation with a KV cache) cuts a sequence's cache into at most this many
// splits, and its scratch holds a partial state per (sequence, head) and split: a partial output
// (HS floats), its maximum and its sum. Module 10's decode_attention contract's workspace.
constexpr int kDecodeMaxSplits = 128;
constexpr std::size_t decode_workspace_floats(int B, int NH, int HS) {
    return static_cast<std::size_t>(B) * NH * kDecodeMaxSplits * (HS + 2);
}

// The attention ops' scratch, in bytes per B * T * C element: 5 Act tensors (q, k, v, out and
// dout per head) followed by 3 float ones (the flash backward's dq, dk, dv), which also holds the
// T x T way's 6 Act tensors.
template <typename Act>
constexpr std::size_t kAttentionScratch = 5 * sizeof(Act) + 3 * sizeof(float);

template <typename Act>
struct Ops {
    const char* name;

    // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
    void (*embedding_forward)(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B,
                              int T, int C);
    // dwte[token,:] += sum of dout over the token's positions; dwpe[t,:] += sum_b dout[b,t,:]
    void (*embedding_backward)(float* dwte, float* dwpe, const Act* dout,
                               const TokenBuckets& buckets, int B, int T, int C);

    // out = LayerNorm(inp) * weight + bias over the last dimension (C), rows = B * T; saves the
    // per-row mean and 1/std for the backward.
    void (*layernorm_forward)(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                              const Act* bias, int rows, int C);
    // dinp += d(LayerNorm)/dinp applied to dout; dweight += ..., dbias += ... (accumulated, so
    // that the residual stream's gradient and the micro-batches add up).
    void (*layernorm_backward)(Act* dinp, float* dweight, float* dbias, const Act* dout,
                               const Act* inp, const Act* weight, const float* mean,
                               const float* rstd, int rows, int C);

    // y[rows, OC] = inp[rows, C] @ weight[OC, C]^T (+ bias[OC] where bias is not null); out = y,
    // or, where gelu_input is not null, gelu_input = y and out = GELU(y), the tanh approximation
    // of GPT-2 (the MLP's first layer and its activation, which the reference fuses).
    void (*linear_forward)(Act* out, Act* gelu_input, const Act* inp, const Act* weight,
                           const Act* bias, int rows, int C, int OC);
    // dinp = dout @ weight (written), or, where gelu_input is not null (inp was GELU(gelu_input):
    // the MLP's second layer), the gradient with respect to gelu_input, (dout @ weight) *
    // GELU'(gelu_input); dweight += dout^T @ inp; dbias += column sums of dout (dbias may be null:
    // a layer without bias).
    void (*linear_backward)(Act* dinp, float* dweight, float* dbias, const Act* dout,
                            const Act* inp, const Act* gelu_input, const Act* weight, int rows,
                            int C, int OC);

    // Causal multi-head self-attention, in one of two ways chosen by the head size
    // (attention_keeps_scores): flash attention, which keeps only lse, each query row's
    // logsumexp of its scaled scores [B, NH, T]; or the T x T way, which keeps att
    // [B, NH, T, T], the probabilities, and uses preatt (B * NH * T * T, reused by every layer)
    // for the scores. The buffers a way does not use may be null. qkv [B, T, 3C] holds q, k, v
    // side by side; out [B, T, C]. scratch: kAttentionScratch (below), reused by every layer.
    void (*attention_forward)(Act* out, float* lse, Act* att, Act* scratch, Act* preatt,
                              const Act* qkv, int B, int T, int C, int NH);
    // dqkv [B, T, 3C] written from dout [B, T, C], given the forward's qkv, out and what it kept
    // (lse or att); datt as preatt above.
    void (*attention_backward)(Act* dqkv, Act* scratch, Act* datt, const Act* dout, const Act* qkv,
                               const Act* out, const float* lse, const Act* att, int B, int T,
                               int C, int NH);
    // Whether attention with heads of head_size elements takes the T x T way (att and preatt
    // needed) on this GPU and build.
    bool (*attention_keeps_scores)(int head_size);
    // out = a + b, n elements
    void (*residual_forward)(Act* out, const Act* a, const Act* b, long long n);

    // Softmax cross-entropy of each row of logits [rows, Vp] over its first V columns against
    // targets[row]: losses[row] = logsumexp - logit[target]. Where dloss != 0 the logits are
    // overwritten by their gradient, (softmax - onehot) * dloss (0 in the padded columns).
    void (*cross_entropy)(Act* logits, float* losses, const int* targets, float dloss, int rows,
                          int V, int Vp);

    // Sum of squares of n floats, written to *out (one float). Deterministic.
    void (*sum_of_squares)(float* out, const float* values, long long n);
    // AdamW step on n parameters: grads scaled by grad_scale (the clipping factor), bias
    // correction with beta1_correction = 1 - beta1^step (and beta2's), decoupled weight decay.
    // Writes master (float) and, where working is not null, its Act copy.
    void (*adamw)(float* master, Act* working, const float* grads, float* m, float* v, long long n,
                  float lr, float beta1, float beta2, float beta1_correction,
                  float beta2_correction, float eps, float weight_decay, float grad_scale);

    // ---- Generation with a KV cache (gpt.h: Gpt::prefill, Gpt::decode; kv_cache.h) ----
    // Where a decoding step's values change from token to token (its position, its token), the
    // ops read them from the GPU's memory, so that a CUDA graph of the step serves every token.

    // One new token per sequence: out[b,:] = wte[tokens[b],:] + wpe[lengths[b] - 1,:], the
    // token at the last position of its sequence (tokens and lengths on the device).
    void (*decode_embedding)(Act* out, const int* tokens, const Act* wte, const Act* wpe,
                             const int* lengths, int B, int C);
    // The keys and values of qkv [B, T, 3C] written into one layer's caches k_cache and v_cache
    // [B, NH, capacity, HS] at positions lengths[b] - T .. lengths[b] - 1 of sequence b: its last T
    // positions once written (lengths on the device; a position outside the cache is not written:
    // the callers check theirs on the host).
    void (*kv_cache_write)(Act* k_cache, Act* v_cache, const Act* qkv, const int* lengths, int B,
                           int T, int C, int NH, int capacity);
    // One new token per sequence: out [B, C], each head's attention of the token's query (the q
    // part of qkv [B, 3C]) over the first lengths[b] positions of its sequence's caches, the
    // token's own key and value among them (written before); the positions past lengths[b] are
    // never read. lengths is on the device; workspace: decode_workspace_floats(B, NH, C / NH)
    // floats of scratch.
    void (*decode_attention)(Act* out, float* workspace, const Act* qkv, const Act* k_cache,
                             const Act* v_cache, const int* lengths, int B, int C, int NH,
                             int capacity);
    // A token per row of logits [rows, Vp] (their first V columns) with temperature, top-k (0:
    // off) and top-p (1: off), drawn by uniforms[row] in [0, 1): the rule of sampling.h.
    // tokens [rows]; uniforms and tokens on the device.
    void (*sample)(int* tokens, const Act* logits, const float* uniforms, int rows, int V, int Vp,
                   float temperature, int top_k, float top_p);

    // Why a decoding step through this table cannot be captured into a CUDA graph (a phrase, for
    // the line generation prints before it launches the step's kernels one by one instead), or
    // nullptr where it can: every op a step calls (decode_embedding, layernorm_forward,
    // linear_forward, kv_cache_write, decode_attention, residual_forward, sample) then enqueues its
    // work on op_stream() alone, and allocates, synchronizes or copies to the host nothing once it
    // has run on the step's shapes.
    const char* (*graph_refusal)();
};

// Whether the reference's bf16 attention may be cuDNN's fused attention (the default, where the
// build has cuDNN and cuDNN an engine for the shape); false makes it module 07's flash kernels,
// for the tests to check both ways.
void allow_cudnn_attention(bool allowed);

// Whether the reference's bf16 attention, where it is module 07's (--attention flash, or where
// cuDNN refuses), is flash_wgmma's and flash_wgmma_backward's fast references (FlashAttention-3's
// design: TMA, wgmma, warp specialization; reading the packed qkv in place): on a
// Hopper GPU (compute capability 9.0) in a build with sm_90a device code (hopper_probe.cu).
// Elsewhere it is flash_tc's and flash_backward's fast references (FlashAttention-2's design).
bool flash_wgmma_runs_here();

// The "profile" table's times so far are dropped (train_gpt calls it after the first step, whose
// ops also make cuBLASLt's and cuDNN's plans); a no-op for the other tables.
void forget_op_times();

// The tables this build has, by name ("reference", "profile", "learner", "solutions", "fast");
// nullptr for an unknown name. Errors in setting up an exercise table (a choices file that cannot
// be read) throw std::runtime_error.
template <typename Act>
const Ops<Act>* ops_table(const std::string& name);

// What ops_table knows, for error messages ("reference, profile, learner, solutions, fast").
const char* ops_table_names();

// `table`'s ops, each call timed alone with CUDA events; a table of GPU time per op is printed at
// exit (train_gpt --profile). ops_table("profile") is the reference's.
template <typename Act>
const Ops<Act>* profiled_table(const Ops<Act>& table);

// ---- Module 08's exercise tables (ops_learner.cu, ops_check.cu) ----

// How the exercise tables are set up, before the first ops_table call that names one:
//   choices      the file saying which exercise runs each op ("op exercise" per line, e.g.
//                "gemm 04_sgemm/sgemm_vectorized"; an op not listed is the reference's), which the
//                grader writes from modules/08_training/kernels.toml; empty: the build's default,
//                trainer_kernels/<variant>.txt (learner.txt, solution.txt, fast.txt)
//   check_every  0, or N: every op that runs an exercise's kernel is also run by the reference on
//                the same inputs, and the two outputs compared, on the first step and every N
//                steps after, up to `steps`; a difference beyond the tolerance stops the run
//                with the op, the exercise, the call's shapes and the elements that differ
//   first_step   the step the run starts at (a resumed run's checkpoint's): the check counts
//                the steps from it, so that a resumed run checks the steps an uninterrupted one
//                would
struct ExerciseTableOptions {
    std::string choices;
    int check_every = 0;
    int steps = 0;
    int first_step = 0;
};
void configure_exercise_tables(const ExerciseTableOptions& options);

// The exercise table of that name ("learner", "solutions" or "fast"), or nullptr for another
// name. In fp16 there is none: their names throw std::invalid_argument (the exercises' contracts
// are fp32 and bf16).
template <typename Act>
const Ops<Act>* exercise_table(const std::string& name);
template <>
const Ops<fp16>* exercise_table<fp16>(const std::string& name);

}  // namespace trainer
