// trainer/gpt: the GPT-2 model of the course's trainer, forward and backward written out layer by
// layer, every op called through the dispatch table (ops.h), and generation with a KV cache.
//
// Teaches: what a training step of a transformer computes and keeps. The forward pass stores what
// the backward pass needs (each LayerNorm's input statistics, each linear layer's input, the
// attention probabilities); the backward pass walks the layers in reverse, carrying the gradient
// of the residual stream and adding each parameter's gradient into a float buffer; the optimizer
// then updates float master weights and, in mixed precision, their bf16 or fp16 copy. In fp16 the
// backward starts from a scaled loss (loss_scaler.h) and the update divides the scale out of the
// gradients, or skips the step where they overflowed. Generation keeps every layer's keys and
// values (the KV cache, kv_cache.h): a prefill writes a prompt's, then each decoding step runs the
// layers for one new token per sequence, its attention reading the cache, computes the logits of
// its position only and draws the next token. A step is some 140 small kernels, too short to hide
// their launches, so it runs as one CUDA graph, captured once and replayed for every token: its
// ops read what changes per token (the position, the token, the random number) from the GPU's
// memory, which one copy per step fills, and the host enqueues step after step without waiting.
//
// Run:  build/trainer/bin/train_gpt --help          (trainer/README.md)
// Interface: gpt.h
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "course/check.h"
#include "gpt.h"
#include "kv_cache.h"

namespace trainer {

int padded_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

bool gpt_preset(const std::string& name, int vocab_size, GptConfig* config) {
    struct Preset {
        const char* name;
        int layers, channels, heads, max_seq_len;
    };
    static const Preset presets[] = {
        {"tiny", 2, 64, 4, 64},     // the tests': a few hundred thousand parameters
        {"small", 6, 384, 6, 256},  // minutes on one GPU
        {"gpt2-124m", 12, 768, 12, 1024},
    };
    for (const Preset& preset : presets) {
        if (name != preset.name) continue;
        *config = {preset.layers,      preset.channels, preset.heads,
                   preset.max_seq_len, vocab_size,      padded_vocab(vocab_size)};
        return true;
    }
    return false;
}

const char* gpt_preset_names() { return "tiny, small, gpt2-124m"; }

std::string describe(const GptConfig& c) {
    return "L=" + std::to_string(c.layers) + " C=" + std::to_string(c.channels) +
           " NH=" + std::to_string(c.heads) + " T=" + std::to_string(c.max_seq_len) +
           " V=" + std::to_string(c.vocab_size);
}

ParamLayout param_layout(const GptConfig& config) {
    const std::size_t L = config.layers, C = config.channels;
    ParamLayout layout;
    layout.size = {static_cast<std::size_t>(config.padded_vocab_size) * C,
                   static_cast<std::size_t>(config.max_seq_len) * C,
                   L * C,
                   L * C,
                   L * 3 * C * C,
                   L * 3 * C,
                   L * C * C,
                   L * C,
                   L * C,
                   L * C,
                   L * 4 * C * C,
                   L * 4 * C,
                   L * C * 4 * C,
                   L * C,
                   C,
                   C};
    for (int i = 0; i < kParamTensors; ++i) {
        layout.offset[i] = layout.total;
        layout.total += layout.size[i];
    }
    return layout;
}

bool is_decayed(int tensor) {
    return tensor == kTokenEmbedding || tensor == kPositionEmbedding || tensor == kQkvWeight ||
           tensor == kAttnProjWeight || tensor == kFcWeight || tensor == kFcProjWeight;
}

const char* param_name(int tensor) {
    static const char* names[kParamTensors] = {"wte",
                                               "wpe",
                                               "ln1.weight",
                                               "ln1.bias",
                                               "qkv.weight",
                                               "qkv.bias",
                                               "attn_proj.weight",
                                               "attn_proj.bias",
                                               "ln2.weight",
                                               "ln2.bias",
                                               "fc.weight",
                                               "fc.bias",
                                               "fc_proj.weight",
                                               "fc_proj.bias",
                                               "lnf.weight",
                                               "lnf.bias"};
    return names[tensor];
}

namespace {

// splitmix64: a small generator whose stream is the same on every platform, so a seed names
// the same initial weights everywhere (the PyTorch check rebuilds them from the trainer's file).
struct Random {
    std::uint64_t state;
    std::uint64_t next() {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
    double normal() {  // Box-Muller, one of the pair
        return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
    }
};

}  // namespace

std::vector<float> initial_params(const GptConfig& config, std::uint64_t seed) {
    const ParamLayout layout = param_layout(config);
    std::vector<float> params(layout.total, 0.0f);
    Random random{seed};
    const double std_dev = 0.02, residual_std_dev = 0.02 / std::sqrt(2.0 * config.layers);
    for (int i = 0; i < kParamTensors; ++i) {
        float* tensor = params.data() + layout.offset[i];
        std::size_t count = layout.size[i];
        if (i == kLn1Weight || i == kLn2Weight || i == kLnfWeight) {
            std::fill(tensor, tensor + count, 1.0f);
        } else if (is_decayed(i)) {
            // The padding rows of wte stay 0: no token maps to them and the loss ignores them.
            if (i == kTokenEmbedding)
                count = static_cast<std::size_t>(config.vocab_size) * config.channels;
            const double scale =
                (i == kAttnProjWeight || i == kFcProjWeight) ? residual_std_dev : std_dev;
            for (std::size_t j = 0; j < count; ++j)
                tensor[j] = static_cast<float>(scale * random.normal());
        }
    }
    return params;
}

double flops_per_token(const GptConfig& config, int T) {
    const ParamLayout layout = param_layout(config);
    // The position embedding is a lookup, not a product; wte is also the LM head's matrix.
    const double matrix_params =
        static_cast<double>(layout.total - layout.size[kPositionEmbedding]);
    return 6.0 * matrix_params + 12.0 * config.layers * config.channels * static_cast<double>(T);
}

template <typename Act>
template <typename P>
P* Gpt<Act>::allocate(std::size_t count, const char* what, std::vector<void*>* owner) {
    void* p = nullptr;
    const std::size_t bytes = count * sizeof(P);
    const cudaError_t status = cudaMalloc(&p, bytes);
    if (status == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // not sticky: clear it
        char message[512];
        if (owner == &gen_.allocations)
            std::snprintf(message, sizeof message,
                          "out of GPU memory allocating %s (%.2f GiB, %.2f GiB taken before it) "
                          "for generating %d sequences with a KV cache: lower --generate-batch",
                          what, bytes / 1073741824.0, device_bytes_ / 1073741824.0, gen_.sequences);
        else
            std::snprintf(
                message, sizeof message,
                "out of GPU memory allocating %s (%.2f GiB, %.2f GiB taken before it) for "
                "micro-batches of %d x %d tokens: lower the batch size (-b) or the "
                "sequence length (-t), and raise --grad-accum to keep the tokens per step",
                what, bytes / 1073741824.0, device_bytes_ / 1073741824.0, max_B_, max_T_);
        throw std::runtime_error(message);
    }
    CUDA_CHECK(status);
    (owner ? owner : &allocations_)->push_back(p);
    device_bytes_ += bytes;
    return static_cast<P*>(p);
}

template <typename Act>
Gpt<Act>::Gpt(const GptConfig& config, const Ops<Act>& ops, int B, int T, OptimizerShard shard)
    : config_(config),
      ops_(ops),
      max_B_(B),
      max_T_(T),
      layout_(param_layout(config)),
      shards_(shard.collectives) {
    if (config.channels % config.heads != 0)
        throw std::runtime_error("the width (" + std::to_string(config.channels) +
                                 ") must be a multiple of the number of heads (" +
                                 std::to_string(config.heads) + ")");
    if (T > config.max_seq_len)
        throw std::runtime_error("sequence length " + std::to_string(T) +
                                 " is longer than the model's context (" +
                                 std::to_string(config.max_seq_len) + "): lower -t");
    // Sharded, the flat arrays are padded (with zeros the model never reads) to equal slices, one
    // per process: NCCL's all-gather and reduce-scatter move equal slices.
    const std::size_t shards = shards_ ? shards_->processes() : 1;
    slice_ = (layout_.total + shards - 1) / shards;
    padded_ = slice_ * shards;
    shard_begin_ = shards_ ? shards_->rank() * slice_ : 0;
    master_ = allocate<float>(padded_, "the master weights");
    if constexpr (std::is_same_v<Act, float>) {
        working_ = master_;
    } else {
        working_ = allocate<Act>(
            padded_, std::is_same_v<Act, bf16> ? "the bf16 weights" : "the fp16 weights");
        CUDA_CHECK(cudaMemset(working_, 0, padded_ * sizeof(Act)));
    }
    grads_ = allocate<float>(padded_, "the gradients");
    m_ = allocate<float>(slice_, "the optimizer's first moments");
    v_ = allocate<float>(slice_, "the optimizer's second moments");
    CUDA_CHECK(cudaMemset(master_, 0, padded_ * sizeof(float)));
    CUDA_CHECK(cudaMemset(grads_, 0, padded_ * sizeof(float)));
    CUDA_CHECK(cudaMemset(m_, 0, slice_ * sizeof(float)));
    CUDA_CHECK(cudaMemset(v_, 0, slice_ * sizeof(float)));
    for (int i = 0; i < kParamTensors; ++i) {
        param_[i] = working_ + layout_.offset[i];
        grad_[i] = grads_ + layout_.offset[i];
    }

    const std::size_t L = config.layers, C = config.channels, NH = config.heads;
    const std::size_t bt = static_cast<std::size_t>(B) * T, btc = bt * C;
    // The T x T buffers only where attention takes the T x T way; the flash way keeps lse.
    score_elements_ = ops_.attention_keeps_scores(config.channels / config.heads)
                          ? static_cast<std::size_t>(B) * NH * T * T
                          : 0;
    const std::size_t scores = score_elements_;
    act_.encoded = allocate<Act>(btc, "activations (embeddings)");
    act_.ln1 = allocate<Act>(L * btc, "activations (ln1)");
    act_.ln1_mean = allocate<float>(L * bt, "activations (ln1 statistics)");
    act_.ln1_rstd = allocate<float>(L * bt, "activations (ln1 statistics)");
    act_.qkv = allocate<Act>(L * 3 * btc, "activations (qkv)");
    act_.atty = allocate<Act>(L * btc, "activations (attention output)");
    act_.att = allocate<Act>(L * scores, "activations (attention probabilities)");
    act_.lse = allocate<float>(L * NH * bt, "activations (attention logsumexps)");
    act_.residual2 = allocate<Act>(L * btc, "activations (residual)");
    act_.ln2 = allocate<Act>(L * btc, "activations (ln2)");
    act_.ln2_mean = allocate<float>(L * bt, "activations (ln2 statistics)");
    act_.ln2_rstd = allocate<float>(L * bt, "activations (ln2 statistics)");
    act_.fch = allocate<Act>(L * 4 * btc, "activations (MLP)");
    act_.fch_gelu = allocate<Act>(L * 4 * btc, "activations (MLP GELU)");
    act_.residual3 = allocate<Act>(L * btc, "activations (residual)");
    act_.lnf = allocate<Act>(btc, "activations (final LayerNorm)");
    act_.lnf_mean = allocate<float>(bt, "activations (final LayerNorm statistics)");
    act_.lnf_rstd = allocate<float>(bt, "activations (final LayerNorm statistics)");
    act_.logits = allocate<Act>(bt * config.padded_vocab_size, "the logits");
    act_.losses = allocate<float>(bt, "the losses");
    act_.projection = allocate<Act>(btc, "scratch");
    act_.attention_scratch =
        allocate<Act>(btc * kAttentionScratch<Act> / sizeof(Act), "attention scratch");
    act_.scores = allocate<Act>(scores, "attention scores");
    act_.dresidual = allocate<Act>(btc, "gradient scratch");
    act_.dbtc = allocate<Act>(btc, "gradient scratch");
    act_.d4c = allocate<Act>(4 * btc, "gradient scratch");
    act_.dqkv = allocate<Act>(3 * btc, "gradient scratch");
    inputs_ = allocate<int>(bt, "token ids");
    targets_ = allocate<int>(bt, "token ids");
    bucket_data_ = allocate<int>(3 * bt + 1, "token buckets");
    norm_ = allocate<float>(1, "the gradient norm");
    host_losses_.resize(bt);
}

template <typename Act>
Gpt<Act>::~Gpt() {
    release_generation();
    for (void* p : allocations_) cudaFree(p);
}

template <typename Act>
void Gpt<Act>::set_params(const std::vector<float>& params) {
    if (params.size() != layout_.total)
        throw std::runtime_error("set_params: " + std::to_string(params.size()) +
                                 " values for a model of " + std::to_string(layout_.total));
    CUDA_CHECK(
        cudaMemcpy(master_, params.data(), params.size() * sizeof(float), cudaMemcpyHostToDevice));
    if constexpr (!std::is_same_v<Act, float>) {
        std::vector<Act> working(params.size());
        for (std::size_t i = 0; i < params.size(); ++i) working[i] = Act(params[i]);
        CUDA_CHECK(cudaMemcpy(working_, working.data(), working.size() * sizeof(Act),
                              cudaMemcpyHostToDevice));
    }
}

// One parameter-sized float array (weights, gradients, moments) copied to the host.
template <typename Act>
std::vector<float> Gpt<Act>::download(const float* device) const {
    std::vector<float> host(layout_.total);
    CUDA_CHECK(
        cudaMemcpy(host.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
}

template <typename Act>
void Gpt<Act>::gather_shards(float* full, const float* own) {
    if (full + shard_begin_ != own)
        CUDA_CHECK(cudaMemcpy(full + shard_begin_, own, slice_ * sizeof(float),
                              cudaMemcpyDeviceToDevice));
    shards_->all_gather(full, slice_ * sizeof(float));
}

template <typename Act>
std::vector<float> Gpt<Act>::params() {
    // Sharded in mixed precision, each process updated the master weights of its slice only.
    if (shards_) gather_shards(master_, master_ + shard_begin_);
    return download(master_);
}

template <typename Act>
void Gpt<Act>::set_optimizer_state(const std::vector<float>& m, const std::vector<float>& v) {
    // This process's slice of each (its end past the parameters stays 0).
    const std::size_t count = std::min(slice_, layout_.total - std::min(layout_.total, shard_begin_));
    CUDA_CHECK(cudaMemcpy(m_, m.data() + shard_begin_, count * sizeof(float),
                          cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemcpy(v_, v.data() + shard_begin_, count * sizeof(float),
                          cudaMemcpyHostToDevice));
}

template <typename Act>
void Gpt<Act>::optimizer_state(std::vector<float>* m, std::vector<float>* v) {
    if (!shards_) {
        *m = download(m_);
        *v = download(v_);
        return;
    }
    float* full = nullptr;  // for a moment: a checkpoint is rare
    CUDA_CHECK(cudaMalloc(&full, padded_ * sizeof(float)));
    for (auto [moments, host] : {std::pair{m_, m}, std::pair{v_, v}}) {
        gather_shards(full, moments);
        *host = download(full);
    }
    CUDA_CHECK(cudaFree(full));
}

// One line for a token id the model has no row for.
template <typename Act>
void Gpt<Act>::check_tokens(const int* tokens, int n) const {
    for (int i = 0; i < n; ++i)
        if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
            throw std::runtime_error(
                "token id " + std::to_string(tokens[i]) + " is outside the model's vocabulary of " +
                std::to_string(config_.vocab_size) + " (data made with another tokenizer?)");
}

// Uploads the token ids, and where there are targets (a backward may follow), groups the positions
// by token for the embedding's backward: sorting (token, position) pairs puts each token's
// positions together, in increasing order. Without targets (generation), no backward follows.
template <typename Act>
void Gpt<Act>::upload_tokens(const int* inputs, const int* targets, int n) {
    check_tokens(inputs, n);
    if (targets) check_tokens(targets, n);
    CUDA_CHECK(cudaMemcpy(inputs_, inputs, n * sizeof(int), cudaMemcpyHostToDevice));
    if (!targets) return;
    CUDA_CHECK(cudaMemcpy(targets_, targets, n * sizeof(int), cudaMemcpyHostToDevice));

    std::vector<std::pair<int, int>> order(n);
    for (int i = 0; i < n; ++i) order[i] = {inputs[i], i};
    std::sort(order.begin(), order.end());
    std::vector<int> host(3 * n + 1);  // token[count], start[count + 1], positions[n]
    std::vector<int> token, start;
    for (int i = 0; i < n; ++i) {
        if (i == 0 || order[i].first != order[i - 1].first) {
            token.push_back(order[i].first);
            start.push_back(i);
        }
        host[2 * n + 1 + i] = order[i].second;
    }
    start.push_back(n);
    const int count = static_cast<int>(token.size());
    std::copy(token.begin(), token.end(), host.begin());
    std::copy(start.begin(), start.end(), host.begin() + n);
    CUDA_CHECK(
        cudaMemcpy(bucket_data_, host.data(), host.size() * sizeof(int), cudaMemcpyHostToDevice));
    buckets_ = {count, bucket_data_, bucket_data_ + n, bucket_data_ + 2 * n + 1};
}

template <typename Act>
void Gpt<Act>::forward(const int* inputs, const int* targets, int B, int T, float dloss_scale) {
    if (B > max_B_ || T > max_T_)
        throw std::runtime_error("a micro-batch of " + std::to_string(B) + " x " +
                                 std::to_string(T) +
                                 " tokens is larger than the model was built for (" +
                                 std::to_string(max_B_) + " x " + std::to_string(max_T_) + ")");
    upload_tokens(inputs, targets, B * T);
    forward_layers(B, T);
    const int L = config_.layers, C = config_.channels;
    const int rows = B * T;
    const std::size_t btc = static_cast<std::size_t>(max_B_) * max_T_ * C;
    const Act* last = act_.residual3 + (L - 1) * btc;
    ops_.layernorm_forward(act_.lnf, act_.lnf_mean, act_.lnf_rstd, last, param_[kLnfWeight],
                           param_[kLnfBias], rows, C);
    // The LM head is the token embedding, transposed (weight tying).
    ops_.linear_forward(act_.logits, nullptr, act_.lnf, param_[kTokenEmbedding], nullptr, rows, C,
                        config_.padded_vocab_size);
    if (targets)
        ops_.cross_entropy(act_.logits, act_.losses, targets_, dloss_scale, rows,
                           config_.vocab_size, config_.padded_vocab_size);
}

template <typename Act>
void Gpt<Act>::forward_layers(int B, int T) {
    const int L = config_.layers, C = config_.channels, NH = config_.heads;
    const int rows = B * T;
    const long long n = static_cast<long long>(rows) * C;
    // Per-layer slices are as large as the model was built for, whatever this B and T.
    const std::size_t bt = static_cast<std::size_t>(max_B_) * max_T_, btc = bt * C;

    ops_.embedding_forward(act_.encoded, inputs_, param_[kTokenEmbedding],
                           param_[kPositionEmbedding], B, T, C);
    for (int l = 0; l < L; ++l) {
        const Act* residual = l == 0 ? act_.encoded : act_.residual3 + (l - 1) * btc;
        Act* ln1 = act_.ln1 + l * btc;
        Act* qkv = act_.qkv + l * 3 * btc;
        Act* atty = act_.atty + l * btc;
        Act* residual2 = act_.residual2 + l * btc;
        Act* ln2 = act_.ln2 + l * btc;
        Act* fch = act_.fch + l * 4 * btc;
        Act* fch_gelu = act_.fch_gelu + l * 4 * btc;
        Act* residual3 = act_.residual3 + l * btc;

        // Attention block: x + proj(attention(ln1(x)))
        ops_.layernorm_forward(ln1, act_.ln1_mean + l * bt, act_.ln1_rstd + l * bt, residual,
                               param_[kLn1Weight] + l * C, param_[kLn1Bias] + l * C, rows, C);
        ops_.linear_forward(qkv, nullptr, ln1, param_[kQkvWeight] + l * 3 * C * C,
                            param_[kQkvBias] + l * 3 * C, rows, C, 3 * C);
        ops_.attention_forward(atty, act_.lse + l * NH * bt, act_.att + l * score_elements_,
                               act_.attention_scratch, act_.scores, qkv, B, T, C, NH);
        ops_.linear_forward(act_.projection, nullptr, atty, param_[kAttnProjWeight] + l * C * C,
                            param_[kAttnProjBias] + l * C, rows, C, C);
        ops_.residual_forward(residual2, residual, act_.projection, n);
        // MLP block: x + proj(gelu(fc(ln2(x))))
        ops_.layernorm_forward(ln2, act_.ln2_mean + l * bt, act_.ln2_rstd + l * bt, residual2,
                               param_[kLn2Weight] + l * C, param_[kLn2Bias] + l * C, rows, C);
        ops_.linear_forward(fch_gelu, fch, ln2, param_[kFcWeight] + l * 4 * C * C,
                            param_[kFcBias] + l * 4 * C, rows, C, 4 * C);
        ops_.linear_forward(act_.projection, nullptr, fch_gelu,
                            param_[kFcProjWeight] + l * 4 * C * C, param_[kFcProjBias] + l * C,
                            rows, 4 * C, C);
        ops_.residual_forward(residual3, residual2, act_.projection, n);
    }
}

template <typename Act>
void Gpt<Act>::backward(int B, int T, const GradientsFinished& finished) {
    const int L = config_.layers, C = config_.channels, NH = config_.heads;
    const int rows = B * T;
    const long long n = static_cast<long long>(rows) * C;
    const std::size_t bt = static_cast<std::size_t>(max_B_) * max_T_, btc = bt * C;
    const Act* last = act_.residual3 + (L - 1) * btc;

    // act_.logits holds d(loss)/d(logits) now (the cross-entropy wrote it).
    ops_.linear_backward(act_.dbtc, grad_[kTokenEmbedding], nullptr, act_.logits, act_.lnf, nullptr,
                         param_[kTokenEmbedding], rows, C, config_.padded_vocab_size);
    // dresidual carries the residual stream's gradient down the layers; the LayerNorm backwards
    // add into it.
    CUDA_CHECK(cudaMemset(act_.dresidual, 0, n * sizeof(Act)));
    ops_.layernorm_backward(act_.dresidual, grad_[kLnfWeight], grad_[kLnfBias], act_.dbtc, last,
                            param_[kLnfWeight], act_.lnf_mean, act_.lnf_rstd, rows, C);
    if (finished) finished({{grad_[kLnfWeight], layout_.size[kLnfWeight]},
                            {grad_[kLnfBias], layout_.size[kLnfBias]}});
    for (int l = L - 1; l >= 0; --l) {
        const Act* residual = l == 0 ? act_.encoded : act_.residual3 + (l - 1) * btc;
        const Act* ln1 = act_.ln1 + l * btc;
        const Act* qkv = act_.qkv + l * 3 * btc;
        const Act* atty = act_.atty + l * btc;
        const Act* residual2 = act_.residual2 + l * btc;
        const Act* ln2 = act_.ln2 + l * btc;
        const Act* fch = act_.fch + l * 4 * btc;
        const Act* fch_gelu = act_.fch_gelu + l * 4 * btc;

        // MLP block. dresidual is d(residual3); the block's output adds to residual2 unchanged,
        // so after ln2's backward adds its part, dresidual is d(residual2).
        // Through GELU as well: d4c is d(fch).
        ops_.linear_backward(act_.d4c, grad_[kFcProjWeight] + l * 4 * C * C,
                             grad_[kFcProjBias] + l * C, act_.dresidual, fch_gelu, fch,
                             param_[kFcProjWeight] + l * 4 * C * C, rows, 4 * C, C);
        ops_.linear_backward(act_.dbtc, grad_[kFcWeight] + l * 4 * C * C,
                             grad_[kFcBias] + l * 4 * C, act_.d4c, ln2, nullptr,
                             param_[kFcWeight] + l * 4 * C * C, rows, C, 4 * C);
        ops_.layernorm_backward(act_.dresidual, grad_[kLn2Weight] + l * C, grad_[kLn2Bias] + l * C,
                                act_.dbtc, residual2, param_[kLn2Weight] + l * C,
                                act_.ln2_mean + l * bt, act_.ln2_rstd + l * bt, rows, C);
        // Attention block, the same way: dresidual becomes d(this layer's input).
        ops_.linear_backward(act_.dbtc, grad_[kAttnProjWeight] + l * C * C,
                             grad_[kAttnProjBias] + l * C, act_.dresidual, atty, nullptr,
                             param_[kAttnProjWeight] + l * C * C, rows, C, C);
        ops_.attention_backward(act_.dqkv, act_.attention_scratch, act_.scores, act_.dbtc, qkv,
                                atty, act_.lse + l * NH * bt, act_.att + l * score_elements_, B, T,
                                C, NH);
        ops_.linear_backward(act_.dbtc, grad_[kQkvWeight] + l * 3 * C * C,
                             grad_[kQkvBias] + l * 3 * C, act_.dqkv, ln1, nullptr,
                             param_[kQkvWeight] + l * 3 * C * C, rows, C, 3 * C);
        ops_.layernorm_backward(act_.dresidual, grad_[kLn1Weight] + l * C, grad_[kLn1Bias] + l * C,
                                act_.dbtc, residual, param_[kLn1Weight] + l * C,
                                act_.ln1_mean + l * bt, act_.ln1_rstd + l * bt, rows, C);
        if (finished) {  // layer l's slice of each of its 12 tensors
            std::vector<GradientRange> layer;
            for (int i = kLn1Weight; i <= kFcProjBias; ++i) {
                const std::size_t per_layer = layout_.size[i] / L;
                layer.push_back({grad_[i] + l * per_layer, per_layer});
            }
            finished(layer);
        }
    }
    ops_.embedding_backward(grad_[kTokenEmbedding], grad_[kPositionEmbedding], act_.dresidual,
                            buckets_, B, T, C);
    // The token embedding's gradient also holds the LM head's, written at the start.
    if (finished) finished({{grad_[kTokenEmbedding], layout_.size[kTokenEmbedding]},
                            {grad_[kPositionEmbedding], layout_.size[kPositionEmbedding]}});
}

// The mean of the last forward's per-position losses (the copy waits for the GPU).
template <typename Act>
float Gpt<Act>::mean_loss(int rows) {
    CUDA_CHECK(
        cudaMemcpy(host_losses_.data(), act_.losses, rows * sizeof(float), cudaMemcpyDeviceToHost));
    double sum = 0.0;
    for (int i = 0; i < rows; ++i) sum += host_losses_[i];
    return static_cast<float>(sum / rows);
}

template <typename Act>
float Gpt<Act>::loss(const int* inputs, const int* targets, int B, int T) {
    forward(inputs, targets, B, T, 0.0f);
    return mean_loss(B * T);
}

template <typename Act>
float Gpt<Act>::forward_backward(const int* inputs, const int* targets, int B, int T,
                                 float dloss_scale, const GradientsFinished& finished) {
    forward(inputs, targets, B, T, dloss_scale);
    backward(B, T, finished);
    return mean_loss(B * T);
}

template <typename Act>
void Gpt<Act>::zero_grads() {
    CUDA_CHECK(cudaMemset(grads_, 0, padded_ * sizeof(float)));
}

template <typename Act>
std::vector<float> Gpt<Act>::grads() const {
    return download(grads_);
}

template <typename Act>
std::vector<float> Gpt<Act>::logits(int B, int T) const {
    const std::size_t count = static_cast<std::size_t>(B) * T * config_.padded_vocab_size;
    std::vector<Act> stored(count);
    CUDA_CHECK(cudaMemcpy(stored.data(), act_.logits, count * sizeof(Act), cudaMemcpyDeviceToHost));
    std::vector<float> host(count);
    for (std::size_t i = 0; i < count; ++i) host[i] = static_cast<float>(stored[i]);
    return host;
}

namespace {

// The first V of every `pitch` logits on the device, `rows` times, as floats.
template <typename Act>
std::vector<float> rows_of_logits(const Act* logits, std::size_t pitch, int rows, int V) {
    std::vector<Act> stored(static_cast<std::size_t>(rows) * V);
    CUDA_CHECK(cudaMemcpy2D(stored.data(), V * sizeof(Act), logits, pitch * sizeof(Act),
                            V * sizeof(Act), rows, cudaMemcpyDeviceToHost));
    std::vector<float> host(stored.size());
    for (std::size_t i = 0; i < stored.size(); ++i) host[i] = static_cast<float>(stored[i]);
    return host;
}

}  // namespace

template <typename Act>
std::vector<float> Gpt<Act>::next_token_logits(const int* tokens, int B, int t) {
    forward(tokens, nullptr, B, t, 0.0f);
    const std::size_t Vp = config_.padded_vocab_size;
    return rows_of_logits(act_.logits + (t - 1) * Vp, t * Vp, B, config_.vocab_size);
}

// ---- Generation with a KV cache ----

namespace {

// Decoding steps the host enqueues before it waits for the GPU: the pinned memory of their values
// and draws (4 x sequences words each). A wait every 256 steps costs next to nothing.
constexpr int kStepsInFlight = 256;

// A capture of a stream into a CUDA graph: begun by the constructor, ended by end(), or by the
// destructor where an exception left it open (its graph dropped). ThreadLocal: a call that may not
// be captured (an allocation, a synchronization) fails instead of running, and so does a launch on
// the default stream, on which the capture's stream (a blocking one) would implicitly wait.
class StreamCapture {
  public:
    explicit StreamCapture(cudaStream_t stream) : stream_(stream) {
        CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    }
    cudaGraph_t end() {
        capturing_ = false;
        cudaGraph_t graph = nullptr;
        CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        return graph;
    }
    ~StreamCapture() {
        if (!capturing_) return;
        cudaGraph_t graph = nullptr;
        if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
        cudaGetLastError();  // a failed capture's error is not sticky: clear it
    }
    StreamCapture(const StreamCapture&) = delete;
    StreamCapture& operator=(const StreamCapture&) = delete;

  private:
    cudaStream_t stream_;
    bool capturing_ = true;
};

}  // namespace

template <typename Act>
void Gpt<Act>::release_generation() {
    if (gen_.in_flight > 0) cudaStreamSynchronize(nullptr);  // their copies use the pinned memory
    if (gen_.graph) cudaGraphExecDestroy(gen_.graph);
    if (gen_.capture_stream) cudaStreamDestroy(gen_.capture_stream);
    if (gen_.staged) cudaFreeHost(gen_.staged);
    for (void* p : gen_.allocations) cudaFree(p);
    device_bytes_ -= gen_.bytes;
    gen_ = Generation{};
}

template <typename Act>
void Gpt<Act>::reserve_kv_cache(int sequences) {
    if (sequences <= gen_.sequences) return;
    release_generation();
    gen_.sequences = sequences;
    const std::size_t before = device_bytes_;
    const int L = config_.layers, C = config_.channels, NH = config_.heads;
    const std::size_t S = sequences, Vp = config_.padded_vocab_size;
    std::vector<void*>* owner = &gen_.allocations;
    gen_.layer = kv::layer_elements(sequences, NH, config_.max_seq_len, C / NH);
    gen_.keys = allocate<Act>(L * gen_.layer, "the KV cache (keys)", owner);
    gen_.values = allocate<Act>(L * gen_.layer, "the KV cache (values)", owner);
    gen_.residual = allocate<Act>(S * C, "decoding activations", owner);
    gen_.residual2 = allocate<Act>(S * C, "decoding activations", owner);
    gen_.ln = allocate<Act>(S * C, "decoding activations", owner);
    gen_.qkv = allocate<Act>(S * 3 * C, "decoding activations", owner);
    gen_.atty = allocate<Act>(S * C, "decoding activations", owner);
    gen_.projection = allocate<Act>(S * C, "decoding activations", owner);
    gen_.fch = allocate<Act>(S * 4 * C, "decoding activations", owner);
    gen_.fch_gelu = allocate<Act>(S * 4 * C, "decoding activations", owner);
    gen_.logits = allocate<Act>(S * Vp, "decoding logits", owner);
    gen_.mean = allocate<float>(S, "decoding activations", owner);
    gen_.rstd = allocate<float>(S, "decoding activations", owner);
    gen_.workspace =
        allocate<float>(decode_workspace_floats(sequences, NH, C / NH), "decoding scratch", owner);
    gen_.step = allocate<int>(3 * S, "decoding scratch", owner);
    gen_.prefill_length = allocate<int>(1, "decoding scratch", owner);
    gen_.bytes = device_bytes_ - before;
    void* pinned = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned, kStepsInFlight * 4 * S * sizeof(int)));
    gen_.staged = static_cast<int*>(pinned);
    gen_.drawn = gen_.staged + kStepsInFlight * 3 * S;
}

template <typename Act>
void Gpt<Act>::prefill(int b, const int* tokens, int t) {
    if (b < 0 || b >= gen_.sequences)
        throw std::runtime_error("prefill: sequence " + std::to_string(b) + " of a KV cache for " +
                                 std::to_string(gen_.sequences) + " (reserve_kv_cache first)");
    if (t > max_T_)
        throw std::runtime_error("prefill: " + std::to_string(t) +
                                 " tokens are more than the model was built for (" +
                                 std::to_string(max_T_) + ")");
    if (t == 0) return;
    upload_tokens(tokens, nullptr, t);
    CUDA_CHECK(cudaMemcpy(gen_.prefill_length, &t, sizeof t, cudaMemcpyHostToDevice));
    forward_layers(1, t);
    const int C = config_.channels, NH = config_.heads, capacity = config_.max_seq_len;
    const std::size_t btc = static_cast<std::size_t>(max_B_) * max_T_ * C;
    const std::size_t sequence = kv::layer_elements(1, NH, capacity, C / NH);
    for (int l = 0; l < config_.layers; ++l)
        ops_.kv_cache_write(gen_.keys + l * gen_.layer + b * sequence,
                            gen_.values + l * gen_.layer + b * sequence, act_.qkv + l * 3 * btc,
                            gen_.prefill_length, 1, t, C, NH, capacity);
}

template <typename Act>
void Gpt<Act>::decode(const int* tokens, int B, int position, const float* uniforms,
                      const SamplingParams& params, bool graph) {
    if (B < 1 || B > gen_.sequences)
        throw std::runtime_error("decode: " + std::to_string(B) + " sequences for a KV cache of " +
                                 std::to_string(gen_.sequences) + " (reserve_kv_cache first)");
    const int capacity = config_.max_seq_len;
    if (position < 0 || position >= capacity)
        throw std::runtime_error("decode: position " + std::to_string(position) +
                                 " is outside the context of " + std::to_string(capacity));
    if (tokens)
        check_tokens(tokens, B);
    else if (B != gen_.batch)
        throw std::logic_error("decode: no tokens given, and the last step drew none for " +
                               std::to_string(B) + " sequences");
    if (B != gen_.batch) {
        wait_for_draws();
        for (const std::vector<int>& drawn : gen_.drawn_so_far)
            if (!drawn.empty())
                throw std::logic_error("decode: the tokens drawn for " +
                                       std::to_string(gen_.batch) +
                                       " sequences are not taken (drawn_tokens) before a step of " +
                                       std::to_string(B));
        gen_.batch = B;
        gen_.drawn_so_far.assign(B, {});
    }
    if (gen_.in_flight == kStepsInFlight) wait_for_draws();  // its pinned memory is reused

    // The step's values, uploaded by one copy: its tokens where the host gives them (else the
    // last step's draws stay where the sampler wrote them), its lengths and its uniforms.
    const std::size_t S = gen_.sequences;
    int* staged = gen_.staged + gen_.in_flight * 3 * S;
    if (tokens) std::copy(tokens, tokens + B, staged);
    std::fill(staged + B, staged + 2 * B, position + 1);
    std::memcpy(staged + 2 * B, uniforms, B * sizeof(float));
    const int first = tokens ? 0 : B;
    CUDA_CHECK(cudaMemcpyAsync(gen_.step + first, staged + first, (3 * B - first) * sizeof(int),
                               cudaMemcpyHostToDevice));

    const char* refused = graph ? ops_.graph_refusal() : nullptr;
    if (refused && !gen_.refusal_said) {
        std::printf(
            "generation: each decoding step launches its kernels one by one, not as a "
            "CUDA graph: %s\n",
            refused);
        std::fflush(stdout);
        gen_.refusal_said = true;
    }
    switch (gen_.plan.next(B, params, graph && !refused)) {
        case DecodeGraphPlan::kEager:
            enqueue_decode_step(B, params);
            break;
        case DecodeGraphPlan::kCapture:
            capture_decode_step(B, params);
            [[fallthrough]];
        case DecodeGraphPlan::kReplay:
            CUDA_CHECK(cudaGraphLaunch(gen_.graph, nullptr));  // on the default stream
            ++gen_.use.steps;
            break;
    }
    CUDA_CHECK(cudaMemcpyAsync(gen_.drawn + gen_.in_flight * S, gen_.step, B * sizeof(int),
                               cudaMemcpyDeviceToHost));
    ++gen_.in_flight;
}

// B sequences of one token each: the token's embedding at its position, the layers with the
// token's key and value written into the cache and its attention over it, the logits of the next
// token, and its draw. Every value that changes from token to token is read on the GPU from
// gen_.step: launched as they are here, the kernels serve every step from a graph.
template <typename Act>
void Gpt<Act>::enqueue_decode_step(int B, const SamplingParams& params) {
    const int L = config_.layers, C = config_.channels, NH = config_.heads;
    const int capacity = config_.max_seq_len;
    const long long n = static_cast<long long>(B) * C;
    int* tokens = gen_.step;
    const int* lengths = gen_.step + B;
    const float* uniforms = reinterpret_cast<const float*>(gen_.step + 2 * B);
    ops_.decode_embedding(gen_.residual, tokens, param_[kTokenEmbedding],
                          param_[kPositionEmbedding], lengths, B, C);
    for (int l = 0; l < L; ++l) {
        Act* keys = gen_.keys + l * gen_.layer;
        Act* values = gen_.values + l * gen_.layer;
        ops_.layernorm_forward(gen_.ln, gen_.mean, gen_.rstd, gen_.residual,
                               param_[kLn1Weight] + l * C, param_[kLn1Bias] + l * C, B, C);
        ops_.linear_forward(gen_.qkv, nullptr, gen_.ln, param_[kQkvWeight] + l * 3 * C * C,
                            param_[kQkvBias] + l * 3 * C, B, C, 3 * C);
        ops_.kv_cache_write(keys, values, gen_.qkv, lengths, B, 1, C, NH, capacity);
        ops_.decode_attention(gen_.atty, gen_.workspace, gen_.qkv, keys, values, lengths, B, C, NH,
                              capacity);
        ops_.linear_forward(gen_.projection, nullptr, gen_.atty,
                            param_[kAttnProjWeight] + l * C * C, param_[kAttnProjBias] + l * C, B,
                            C, C);
        ops_.residual_forward(gen_.residual2, gen_.residual, gen_.projection, n);
        ops_.layernorm_forward(gen_.ln, gen_.mean, gen_.rstd, gen_.residual2,
                               param_[kLn2Weight] + l * C, param_[kLn2Bias] + l * C, B, C);
        ops_.linear_forward(gen_.fch_gelu, gen_.fch, gen_.ln, param_[kFcWeight] + l * 4 * C * C,
                            param_[kFcBias] + l * 4 * C, B, C, 4 * C);
        ops_.linear_forward(gen_.projection, nullptr, gen_.fch_gelu,
                            param_[kFcProjWeight] + l * 4 * C * C, param_[kFcProjBias] + l * C, B,
                            4 * C, C);
        ops_.residual_forward(gen_.residual, gen_.residual2, gen_.projection, n);
    }
    ops_.layernorm_forward(gen_.ln, gen_.mean, gen_.rstd, gen_.residual, param_[kLnfWeight],
                           param_[kLnfBias], B, C);
    ops_.linear_forward(gen_.logits, nullptr, gen_.ln, param_[kTokenEmbedding], nullptr, B, C,
                        config_.padded_vocab_size);
    ops_.sample(tokens, gen_.logits, uniforms, B, config_.vocab_size, config_.padded_vocab_size,
                params.temperature, params.top_k, params.top_p);
}

// The step's ops enqueued on a stream of their own (op_stream: the default stream cannot be
// captured), captured into gen_.graph, which runs on the default stream, after the step's upload.
template <typename Act>
void Gpt<Act>::capture_decode_step(int B, const SamplingParams& params) {
    if (!gen_.capture_stream) CUDA_CHECK(cudaStreamCreate(&gen_.capture_stream));
    if (gen_.graph) CUDA_CHECK(cudaGraphExecDestroy(gen_.graph));
    gen_.graph = nullptr;
    try {
        StreamCapture capture(gen_.capture_stream);
        {
            const OpStreamScope on(gen_.capture_stream);
            enqueue_decode_step(B, params);
        }
        const cudaGraph_t graph = capture.end();
        const cudaError_t made = cudaGraphInstantiate(&gen_.graph, graph, 0);
        CUDA_CHECK(cudaGraphDestroy(graph));
        course::cuda_check(made, "cudaGraphInstantiate of a decoding step", __FILE__, __LINE__);
    } catch (const std::exception& e) {
        gen_.plan.forget();
        throw std::runtime_error(std::string("capturing a decoding step into a CUDA graph: ") +
                                 e.what() + " (--no-cuda-graph launches its kernels one by one)");
    }
    ++gen_.use.captures;
}

template <typename Act>
void Gpt<Act>::wait_for_draws() {
    if (gen_.in_flight == 0) return;
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
    const std::size_t S = gen_.sequences;
    for (int s = 0; s < gen_.in_flight; ++s)
        for (int b = 0; b < gen_.batch; ++b) gen_.drawn_so_far[b].push_back(gen_.drawn[s * S + b]);
    gen_.in_flight = 0;
}

template <typename Act>
std::vector<std::vector<int>> Gpt<Act>::drawn_tokens() {
    wait_for_draws();
    std::vector<std::vector<int>> drawn = std::move(gen_.drawn_so_far);
    gen_.drawn_so_far.assign(gen_.batch, {});
    return drawn;
}

template <typename Act>
std::vector<float> Gpt<Act>::decode_logits(int B) const {
    return rows_of_logits(gen_.logits, config_.padded_vocab_size, B, config_.vocab_size);
}

template <typename Act>
float Gpt<Act>::update(float lr, float beta1, float beta2, float eps, float weight_decay,
                       float max_norm, int step, float loss_scale) {
    // The norm of the whole gradient: sharded, each process's slice, summed across them.
    ops_.sum_of_squares(norm_, grads_ + shard_begin_, static_cast<long long>(slice_));
    if (shards_) shards_->sum(norm_, 1);
    float squared = 0.0f;
    CUDA_CHECK(cudaMemcpy(&squared, norm_, sizeof(float), cudaMemcpyDeviceToHost));
    // One inf or NaN anywhere in the gradients makes the sum of squares inf or NaN: an fp16
    // overflow (or squares past float's range, which a smaller loss scale cures as well). Every
    // process sees the same sum, so all of them skip the step together.
    if (!std::isfinite(squared)) return squared;
    // The gradients hold loss_scale times the step's: the norm without it, and AdamW divides it
    // out as it reads them (grad_scale), the clipping factor with it.
    const float norm = std::sqrt(squared) / loss_scale;
    const float clip = (max_norm > 0.0f && norm > max_norm) ? max_norm / norm : 1.0f;
    const float grad_scale = clip / loss_scale;
    const float beta1_correction = 1.0f - static_cast<float>(std::pow(beta1, step));
    const float beta2_correction = 1.0f - static_cast<float>(std::pow(beta2, step));
    // Each tensor's part in this process's slice [shard_begin_, shard_begin_ + slice_) (all of
    // it without sharding); its moments sit at the same place in the slice.
    for (int i = 0; i < kParamTensors; ++i) {
        const std::size_t begin = std::max(layout_.offset[i], shard_begin_);
        const std::size_t end =
            std::min(layout_.offset[i] + layout_.size[i], shard_begin_ + slice_);
        if (begin >= end) continue;
        Act* working = std::is_same_v<Act, float> ? nullptr : working_ + begin;
        ops_.adamw(master_ + begin, working, grads_ + begin, m_ + (begin - shard_begin_),
                   v_ + (begin - shard_begin_), static_cast<long long>(end - begin), lr, beta1,
                   beta2, beta1_correction, beta2_correction, eps,
                   is_decayed(i) ? weight_decay : 0.0f, grad_scale);
    }
    // Every process updated its slice of the weights the forward reads: each gets all of them.
    if (shards_) shards_->all_gather(working_, slice_ * sizeof(Act));
    return norm;
}

template class Gpt<float>;
template class Gpt<bf16>;
template class Gpt<fp16>;

}  // namespace trainer
