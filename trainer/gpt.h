// The GPT-2 model of the course's trainer: its configuration, its parameters (one flat array of
// 16 tensors, in the order of ParamTensor) and the Gpt class that runs its forward and backward
// passes, its optimizer step, and generation with a KV cache on the GPU through a table of ops
// (ops.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "decode_graph.h"
#include "ops.h"
#include "sampling.h"

namespace trainer {

struct GptConfig {
    int layers = 0;
    int channels = 0;           // C
    int heads = 0;              // NH; C / NH is the head size
    int max_seq_len = 0;        // the longest context, the rows of the position embedding
    int vocab_size = 0;         // V: tokens the tokenizer makes
    int padded_vocab_size = 0;  // Vp: V rounded up to a multiple of 128, for the GEMMs
};

// V rounded up to a multiple of 128 (50257 -> 50304).
int padded_vocab(int vocab_size);

// The presets: "tiny" (seconds on any GPU; the tests), "small" (minutes), "gpt2-124m". The
// vocabulary comes from the tokenizer. False for an unknown name.
bool gpt_preset(const std::string& name, int vocab_size, GptConfig* config);
const char* gpt_preset_names();
// The shape in a line for messages: "L=12 C=768 NH=12 T=1024 V=50257".
std::string describe(const GptConfig& config);

// The parameter tensors, in their order in the flat array.
enum ParamTensor {
    kTokenEmbedding,     // wte [Vp, C], also the LM head (tied)
    kPositionEmbedding,  // wpe [max_seq_len, C]
    kLn1Weight,          // [L, C]
    kLn1Bias,            // [L, C]
    kQkvWeight,          // [L, 3C, C]
    kQkvBias,            // [L, 3C]
    kAttnProjWeight,     // [L, C, C]
    kAttnProjBias,       // [L, C]
    kLn2Weight,          // [L, C]
    kLn2Bias,            // [L, C]
    kFcWeight,           // [L, 4C, C]
    kFcBias,             // [L, 4C]
    kFcProjWeight,       // [L, C, 4C]
    kFcProjBias,         // [L, C]
    kLnfWeight,          // [C]
    kLnfBias,            // [C]
    kParamTensors
};

struct ParamLayout {
    std::array<std::size_t, kParamTensors> size{};    // elements of each tensor
    std::array<std::size_t, kParamTensors> offset{};  // where it starts in the flat array
    std::size_t total = 0;
};
ParamLayout param_layout(const GptConfig& config);
// Weight decay applies to the matrices (embeddings and linear weights), not to biases or norms.
bool is_decayed(int tensor);
const char* param_name(int tensor);

// GPT-2's initialization, reproducible from the seed: normal(0, 0.02) for the matrices, the two
// projections into the residual stream scaled by 1 / sqrt(2 L), biases 0, LayerNorm weights 1;
// the padding rows of wte are 0.
std::vector<float> initial_params(const GptConfig& config, std::uint64_t seed);

// Model FLOPs per token of a training step (forward and backward): 6 per parameter in the
// matrices plus attention's products, the count MFU is quoted with.
double flops_per_token(const GptConfig& config, int T);

// A stretch of the flat gradient array: `count` floats from the device pointer `data`.
struct GradientRange {
    float* data;
    std::size_t count;
};

// Told by the backward which parameter gradients it has finished, as soon as their last writes
// are enqueued on the default stream: the final LayerNorm's first, then each layer's from the
// last layer to the first, the embeddings' last. A data-parallel run starts summing them across
// its GPUs while the backward goes on (trainer/data_parallel.h).
using GradientsFinished = std::function<void(const std::vector<GradientRange>&)>;

// The collectives of a data-parallel run that a sharded optimizer needs; every process calls
// each of them in the same order (trainer/data_parallel.h implements them with NCCL).
class Collectives {
  public:
    virtual ~Collectives() = default;
    virtual int processes() const = 0;
    virtual int rank() const = 0;
    // n floats summed across the processes, in place.
    virtual void sum(float* data, std::size_t n) = 0;
    // `data` holds processes() slices of slice_bytes each; afterwards every process holds every
    // slice as its owner (the process of the same rank) had it.
    virtual void all_gather(void* data, std::size_t slice_bytes) = 0;
};

// Which part of the optimizer this process keeps (ZeRO-1): with `collectives`, its moments and up
// to date master weights for one of collectives->processes() equal slices of the parameters,
// the rank-th (the parameter count padded to a multiple of the processes); without, all of them.
struct OptimizerShard {
    Collectives* collectives = nullptr;
};

// A GPT on the GPU with activations for micro-batches up to B x T. Act is float (all-fp32), bf16 or
// fp16 (mixed precision: 16-bit weights and activations, fp32 master weights, gradients and
// optimizer state; fp16 with loss scaling, loss_scaler.h). Errors (out of memory included) throw
// std::runtime_error.
template <typename Act>
class Gpt {
  public:
    Gpt(const GptConfig& config, const Ops<Act>& ops, int B, int T, OptimizerShard shard = {});
    ~Gpt();
    Gpt(const Gpt&) = delete;
    Gpt& operator=(const Gpt&) = delete;

    const GptConfig& config() const { return config_; }
    // Bytes of GPU memory this model allocated.
    std::size_t device_bytes() const { return device_bytes_; }

    // The master weights and the optimizer's moments (param_layout(config).total floats each).
    // Sharded, the getters are collectives (every process calls them; each gets all of it).
    void set_params(const std::vector<float>& params);
    std::vector<float> params();
    void set_optimizer_state(const std::vector<float>& m, const std::vector<float>& v);
    void optimizer_state(std::vector<float>* m, std::vector<float>* v);

    // Mean loss of a micro-batch of B x T tokens (targets: the next token of each input).
    float loss(const int* inputs, const int* targets, int B, int T);
    // Forward and backward of a micro-batch: adds d(dloss_scale * sum of losses)/dparams to the
    // gradients and returns the mean loss. For a step's mean loss over n micro-batches of B x T,
    // dloss_scale = 1 / (n * B * T). `finished` (if any) hears of the gradients as the backward
    // finishes them.
    float forward_backward(const int* inputs, const int* targets, int B, int T, float dloss_scale,
                           const GradientsFinished& finished = nullptr);
    void zero_grads();
    std::vector<float> grads() const;
    // The gradients on the GPU, param_layout(config()).total floats in one buffer (a data-parallel
    // run sums them across its processes before update), padded with zeros to gradient_slice()
    // times the shards.
    float* device_grads() { return grads_; }
    // A shard's slice of the flat arrays, in floats (all of them without sharding).
    std::size_t gradient_slice() const { return slice_; }
    // Bytes of the optimizer's moments on this GPU (all, or one shard's).
    std::size_t optimizer_bytes() const { return 2 * slice_ * sizeof(float); }
    // The logits [B, T, Vp] of the last forward (before a backward overwrites them), as floats.
    std::vector<float> logits(int B, int T) const;
    // Logits of the last position of B sequences of t tokens each (tokens [B][t]): [B][V] floats
    // (generation without a KV cache: a whole forward pass for each new token).
    std::vector<float> next_token_logits(const int* tokens, int B, int t);

    // ---- Generation with a KV cache (kv_cache.h; trainer/README.md, "Generation") ----
    // Room for `sequences` sequences of up to max_seq_len tokens: every layer's keys and values in
    // the activations' type, and the buffers of a decoding step. Allocated by the first call, and
    // again (the caches' contents lost) by a call for more sequences.
    void reserve_kv_cache(int sequences);
    // Bytes of the KV cache and the decoding step's buffers (0 before reserve_kv_cache).
    std::size_t kv_cache_bytes() const { return gen_.bytes; }
    // Sequence b's cache filled from tokens[0 .. t): their keys and values at positions 0 .. t - 1,
    // from a forward pass over them (t up to the T the model was built for; 0 leaves it empty).
    void prefill(int b, const int* tokens, int t);
    // Enqueues one decoding step of B sequences and returns without waiting for the GPU: sequence
    // b's token at `position` (its cache holding positions 0 .. position - 1) is tokens[b] where
    // tokens is not null, else the token the last step, of the same B, drew for it. Its key and
    // value are written at `position` in every layer, its attention reads positions 0 ..
    // position, the logits of the next token are computed for that position only (decode_logits),
    // and the next token is drawn from them on the GPU with uniforms[b] by the table's sample op,
    // the rule of sampling.h (drawn_tokens). With `graph`, the step runs as a CUDA graph where the
    // table allows it (decode_graph.h: captured at the second step of a batch and sampling,
    // replayed by the later ones); without, or where the table does not (a line says why, once),
    // its kernels are launched one by one. The two ways run the same kernels on the same values:
    // the same logits and tokens, bit for bit.
    void decode(const int* tokens, int B, int position, const float* uniforms,
                const SamplingParams& params, bool graph);
    // The tokens drawn by the decoding steps since the last call, [B][steps], once the GPU has
    // drawn them.
    std::vector<std::vector<int>> drawn_tokens();
    // The last decoding step's logits, [B][V] floats.
    std::vector<float> decode_logits(int B) const;
    // How the decoding steps ran: graphs captured, and steps run by a graph (the others launched
    // their kernels one by one).
    struct DecodeGraphUse {
        int captures = 0;
        long steps = 0;
    };
    DecodeGraphUse decode_graph_use() const { return gen_.use; }

    // Clips the gradients to max_norm (0: no clipping) and takes an AdamW step (step counts the
    // steps taken, from 1). Returns the gradient norm before clipping. loss_scale: the factor the
    // backward's losses were multiplied by (dloss_scale above; fp16's loss scaling), divided out
    // of the gradients in the same pass. Where a gradient is inf or NaN (an fp16 overflow), no
    // step is taken (weights and moments stay) and the value returned is not finite. Sharded, this
    // process's slice of the gradients must hold their sum over the processes (a reduce-scatter);
    // the update is a collective that leaves every process with the whole of the new weights.
    float update(float lr, float beta1, float beta2, float eps, float weight_decay, float max_norm,
                 int step, float loss_scale = 1.0f);

  private:
    void forward(const int* inputs, const int* targets, int B, int T, float dloss_scale);
    // The embedding and every layer, over the B x T tokens upload_tokens put on the GPU.
    void forward_layers(int B, int T);
    void check_tokens(const int* tokens, int n) const;
    void backward(int B, int T, const GradientsFinished& finished);
    // The whole of a sharded float array: `full` (padded size) gets every process's slice, this
    // process's from `own`.
    void gather_shards(float* full, const float* own);
    void upload_tokens(const int* inputs, const int* targets, int n);
    // A decoding step of B sequences: its ops enqueued, eagerly, or in a capture.
    void enqueue_decode_step(int B, const SamplingParams& params);
    void capture_decode_step(int B, const SamplingParams& params);
    // Waits for the decoding steps enqueued and moves the tokens they drew to gen_.drawn_so_far.
    void wait_for_draws();
    // The KV cache, the decoding step's buffers, its graph and its pinned memory, freed.
    void release_generation();
    std::vector<float> download(const float* device) const;
    float mean_loss(int rows);
    // `count` elements of GPU memory, owned by `owner` (freed with the model). Out of memory, the
    // error names `what` and what to lower.
    template <typename P>
    P* allocate(std::size_t count, const char* what, std::vector<void*>* owner = nullptr);

    GptConfig config_;
    const Ops<Act>& ops_;
    int max_B_, max_T_;
    ParamLayout layout_;
    Collectives* shards_;        // null: not sharded
    std::size_t padded_ = 0;     // layout_.total rounded up to a multiple of the shards
    std::size_t slice_ = 0;      // padded_ / shards: the floats of one shard
    std::size_t shard_begin_ = 0;  // where this process's slice starts
    std::size_t device_bytes_ = 0;
    std::vector<void*> allocations_;

    float* master_ = nullptr;  // fp32 master weights (sharded and bf16: only its slice current)
    Act* working_ = nullptr;   // the weights the forward reads: master_ itself in fp32 mode
    float* grads_ = nullptr;
    float* m_ = nullptr;  // the moments of this process's slice (slice_ floats each)
    float* v_ = nullptr;
    std::array<Act*, kParamTensors> param_{};
    std::array<float*, kParamTensors> grad_{};

    // Activations kept for the backward, per layer where it says L.
    struct Activations {
        Act* encoded;                // [B, T, C]
        Act* ln1;                    // [L, B, T, C]
        float *ln1_mean, *ln1_rstd;  // [L, B, T]
        Act* qkv;                    // [L, B, T, 3C]
        Act* atty;                   // [L, B, T, C]
        Act* att;                    // [L, B, NH, T, T], the T x T way of attention only
        float* lse;                  // [L, B, NH, T], attention's logsumexps (the flash way)
        Act* residual2;              // [L, B, T, C]
        Act* ln2;                    // [L, B, T, C]
        float *ln2_mean, *ln2_rstd;  // [L, B, T]
        Act* fch;                    // [L, B, T, 4C]
        Act* fch_gelu;               // [L, B, T, 4C]
        Act* residual3;              // [L, B, T, C]
        Act* lnf;                    // [B, T, C]
        float *lnf_mean, *lnf_rstd;  // [B, T]
        Act* logits;                 // [B, T, Vp], the gradient after a backward's forward
        float* losses;               // [B, T]
        // Scratch shared by the layers
        Act* projection;         // [B, T, C]: a linear layer's output before the residual add
        Act* attention_scratch;  // kAttentionScratch bytes per B * T * C element (ops.h)
        Act* scores;             // [B, NH, T, T]: preatt in the forward, datt in the backward
        Act* dresidual;          // [B, T, C]
        Act* dbtc;               // [B, T, C]
        Act* dbtc2;              // [B, T, C]
        Act* d4c;                // [B, T, 4C]
        Act* dqkv;               // [B, T, 3C]
    } act_{};

    int* inputs_ = nullptr;       // [B, T] token ids on the device
    int* targets_ = nullptr;      // [B, T]
    int* bucket_data_ = nullptr;  // TokenBuckets' arrays
    TokenBuckets buckets_{};
    float* norm_ = nullptr;           // one float: the squared gradient norm
    std::size_t score_elements_ = 0;  // of att per layer: B * NH * T * T, or 0 (flash way)
    std::vector<float> host_losses_;

    // Generation: the KV cache and a decoding step's activations, [sequences, ...] where not said.
    struct Generation {
        int sequences = 0;
        std::size_t layer = 0;      // elements of one layer's keys (or values): kv::layer_elements
        Act* keys = nullptr;        // [L][sequences][NH][max_seq_len][HS]
        Act* values = nullptr;      // the same
        Act* residual = nullptr;    // [C]: the residual stream into a layer, and out of it
        Act* residual2 = nullptr;   // [C]: after the layer's attention block
        Act* ln = nullptr;          // [C]: a LayerNorm's output
        Act* qkv = nullptr;         // [3C]
        Act* atty = nullptr;        // [C]
        Act* projection = nullptr;  // [C]
        Act* fch = nullptr;         // [4C]: the MLP's first product, before GELU
        Act* fch_gelu = nullptr;    // [4C]
        Act* logits = nullptr;      // [Vp]: the next token's
        float* mean = nullptr;      // LayerNorm's statistics (not kept)
        float* rstd = nullptr;
        float* workspace = nullptr;  // decode attention's: decode_workspace_floats
        // A step's values, read by its ops on the GPU (ops.h), 32-bit words: for a step of B
        // sequences its tokens [B] (the host's, or the last step's draws, which the sampler writes
        // there), its lengths [B] (position + 1) and its uniforms [B] (floats); [3 x sequences].
        int* step = nullptr;
        int* prefill_length = nullptr;  // a prefill's t, for kv_cache_write
        std::vector<void*> allocations;
        std::size_t bytes = 0;
        // Pinned host memory for the steps enqueued and not waited for (kStepsInFlight, gpt.cu):
        // each one's values ([3 x sequences] words, uploaded by one asynchronous copy) and the
        // tokens it drew ([sequences], downloaded by another), so that the host enqueues step after
        // step without waiting for the GPU.
        int* staged = nullptr;
        int* drawn = nullptr;
        int in_flight = 0;                           // steps enqueued since the last wait
        int batch = 0;                               // B of the last step (0: none yet)
        std::vector<std::vector<int>> drawn_so_far;  // [batch][steps] waited for, not yet taken
        // The decoding step's CUDA graph (decode_graph.h), captured on a stream of its own.
        DecodeGraphPlan plan;
        cudaStream_t capture_stream = nullptr;
        cudaGraphExec_t graph = nullptr;
        bool refusal_said = false;  // the line on why a step runs without a graph, printed
        DecodeGraphUse use;
    } gen_;
};

}  // namespace trainer
