// The GPU model against the CPU double reference on the tiny preset, and on one layer of heads
// of 64 (attention fused in bf16: cuDNN's way and module 07's flash kernels): the loss, the logits
// and every parameter's gradient in the all-fp32 mode (tight) and in mixed precision (loose; fp16
// through a scaled loss); the gradient accumulation, AdamW's first step with clipping, the loss
// scale divided out in the update, an fp16 overflow skipping the step, and bit-for-bit
// repeatability. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>

#include "cpu_reference.h"
#include "gpt.h"
#include "ops.h"
#include "test_support.h"

namespace trainer {
namespace {

using testing::gpu_present;

constexpr int kB = 3, kT = 29;  // T below the context and not a multiple of anything

struct Reference {
    double loss;
    std::vector<double> logits, grads;
};

Reference cpu_reference(const GptConfig& config, const std::vector<float>& params,
                        const std::vector<int>& inputs, const std::vector<int>& targets) {
    CpuGpt model(config, params);
    Reference r;
    r.loss = model.forward(inputs, targets, kB, kT);
    r.logits = model.logits();
    r.grads = model.backward();
    return r;
}

// Each tensor's gradient within `tolerance` of the reference, relative to the tensor's largest.
void expect_grads_close(const GptConfig& config, const std::vector<float>& got,
                        const std::vector<double>& want, double tolerance) {
    const ParamLayout layout = param_layout(config);
    for (int tensor = 0; tensor < kParamTensors; ++tensor) {
        double largest = 0.0, worst = 0.0;
        std::size_t worst_at = 0;
        for (std::size_t i = layout.offset[tensor]; i < layout.offset[tensor] + layout.size[tensor];
             ++i) {
            largest = std::max(largest, std::fabs(want[i]));
            const double error = std::fabs(got[i] - want[i]);
            if (error > worst) worst = error, worst_at = i - layout.offset[tensor];
        }
        EXPECT_LE(worst, tolerance * largest + 1e-9)
            << param_name(tensor) << ": worst error at [" << worst_at
            << "], tensor's largest |grad| " << largest;
    }
}

// loss_scale: the backward starts from the loss times it and the gradients are divided by it
// after (fp16's loss scaling, train_gpt's first step).
template <typename Act>
void check_against_cpu(const GptConfig& config, double loss_tolerance, double logit_tolerance,
                       double grad_tolerance, float loss_scale = 1.0f) {
    const std::vector<float> params = testing::noisy_params(config, 11);
    std::vector<int> inputs, targets;
    testing::tokens(kB * kT, 13, &inputs, &targets);
    const Reference want = cpu_reference(config, params, inputs, targets);

    Gpt<Act> model(config, *ops_table<Act>("reference"), kB, kT);
    model.set_params(params);
    EXPECT_NEAR(model.loss(inputs.data(), targets.data(), kB, kT), want.loss, loss_tolerance);
    const std::vector<float> logits = model.logits(kB, kT);
    double worst = 0.0;
    for (int row = 0; row < kB * kT; ++row)
        for (int v = 0; v < config.vocab_size; ++v) {
            const std::size_t i = static_cast<std::size_t>(row) * config.padded_vocab_size + v;
            worst = std::max(worst, std::fabs(logits[i] - want.logits[i]));
        }
    EXPECT_LE(worst, logit_tolerance) << "largest logit error";
    model.zero_grads();
    const float loss =
        model.forward_backward(inputs.data(), targets.data(), kB, kT, loss_scale / (kB * kT));
    EXPECT_NEAR(loss, want.loss, loss_tolerance);
    std::vector<float> grads = model.grads();
    for (float& g : grads) g /= loss_scale;
    expect_grads_close(config, grads, want.grads, grad_tolerance);
}

TEST(GpuModel, Fp32MatchesCpuReference) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    check_against_cpu<float>(testing::tiny_config(), 1e-5, 1e-4, 1e-4);
}

TEST(GpuModel, Bf16MatchesCpuReferenceLoosely) {
    if (!gpu_present(8)) GTEST_SKIP() << "bf16 needs a GPU of compute capability 8.0 or newer";
    check_against_cpu<bf16>(testing::tiny_config(), 2e-2, 5e-2, 6e-2);
}

// fp16 keeps 3 more bits than bf16 (tolerances a third of bf16's); the backward from a scaled loss,
// the gradients unscaled after. 2^10, not train_gpt's first 2^16: 87 tokens make each logit's
// gradient 1/87 of the scale, and this tiny model's LayerNorms (inputs of std ~0.05) multiply it
// by some 20 on the way down, which 2^16 could carry past fp16's 65504 (train_gpt would skip).
TEST(GpuModel, Fp16MatchesCpuReferenceLoosely) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    check_against_cpu<fp16>(testing::tiny_config(), 7e-3, 2e-2, 2e-2, 1024.0f);
}

// Heads of 64: in bf16 on a GPU with bf16 tensor cores, attention is fused (cuDNN's where the
// build has it, else module 07's flash kernels) instead of the tiny preset's T x T way.
TEST(GpuModel, Bf16FusedAttentionMatchesCpuReferenceLoosely) {
    if (!gpu_present(8)) GTEST_SKIP() << "bf16 needs a GPU of compute capability 8.0 or newer";
    const GptConfig config = testing::head64_config();
    ASSERT_FALSE(ops_table<bf16>("reference")->attention_keeps_scores(64))
        << "bf16 heads of 64 should take the fused way on this GPU (is this build for sm_80+?)";
    check_against_cpu<bf16>(config, 2e-2, 5e-2, 6e-2);
}

// The same with module 07's flash kernels, where cuDNN would have taken it.
TEST(GpuModel, Bf16FlashAttentionMatchesCpuReferenceLoosely) {
    if (!gpu_present(8)) GTEST_SKIP() << "bf16 needs a GPU of compute capability 8.0 or newer";
    struct FlashOnly {  // for this test only, whatever its end
        FlashOnly() { allow_cudnn_attention(false); }
        ~FlashOnly() { allow_cudnn_attention(true); }
    } flash_only;
    check_against_cpu<bf16>(testing::head64_config(), 2e-2, 5e-2, 6e-2);
}

TEST(GpuModel, AccumulatedMicroBatchesEqualOneBatch) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    const GptConfig config = testing::tiny_config();
    const std::vector<float> params = testing::noisy_params(config, 17);
    std::vector<int> inputs, targets;
    testing::tokens(2 * kT, 19, &inputs, &targets);
    Gpt<float> model(config, *ops_table<float>("reference"), 2, kT);
    model.set_params(params);
    model.zero_grads();
    model.forward_backward(inputs.data(), targets.data(), 2, kT, 1.0f / (2 * kT));
    const std::vector<float> whole = model.grads();
    model.zero_grads();
    for (int half = 0; half < 2; ++half)
        model.forward_backward(inputs.data() + half * kT, targets.data() + half * kT, 1, kT,
                               1.0f / (2 * kT));
    const std::vector<float> accumulated = model.grads();
    for (std::size_t i = 0; i < whole.size(); ++i)
        ASSERT_NEAR(accumulated[i], whole[i], 1e-6 + 1e-4 * std::fabs(whole[i]))
            << "parameter " << i;
}

TEST(GpuModel, FirstAdamWStepWithClipping) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    const GptConfig config = testing::tiny_config();
    const std::vector<float> params = testing::noisy_params(config, 23);
    std::vector<int> inputs, targets;
    testing::tokens(kB * kT, 29, &inputs, &targets);
    Gpt<float> model(config, *ops_table<float>("reference"), kB, kT);
    model.set_params(params);
    model.zero_grads();
    model.forward_backward(inputs.data(), targets.data(), kB, kT, 1.0f / (kB * kT));
    const std::vector<float> grads = model.grads();
    double squared = 0.0;
    for (float g : grads) squared += static_cast<double>(g) * g;
    const double norm = std::sqrt(squared),
                 max_norm = 0.5 * norm;  // clipping halves every gradient
    const float lr = 1e-3f, eps = 1e-8f, wd = 0.1f;
    const float reported = model.update(lr, 0.9f, 0.95f, eps, wd, static_cast<float>(max_norm), 1);
    EXPECT_NEAR(reported, norm, 1e-4 * norm);
    const std::vector<float> updated = model.params();
    const ParamLayout layout = param_layout(config);
    for (int tensor = 0; tensor < kParamTensors; ++tensor)
        for (std::size_t i = layout.offset[tensor]; i < layout.offset[tensor] + layout.size[tensor];
             ++i) {
            // Step 1: m_hat = g, v_hat = g^2, so the step is g / (|g| + eps) of the clipped g.
            const double g = 0.5 * grads[i];
            const double decay = is_decayed(tensor) ? wd : 0.0;
            const double want = params[i] * (1.0 - lr * decay) - lr * g / (std::fabs(g) + eps);
            ASSERT_NEAR(updated[i], want, 1e-6) << param_name(tensor) << " element " << i;
        }
}

// The gradients of a loss scaled by a power of two are the unscaled ones times it, exactly (in
// fp32, far from under- and overflow); the update divides the scale out in its norm and AdamW
// pass: the same weights, bit for bit.
TEST(GpuModel, UpdateDividesTheLossScaleOut) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    const GptConfig config = testing::tiny_config();
    std::vector<int> inputs, targets;
    testing::tokens(kB * kT, 41, &inputs, &targets);
    std::vector<float> weights[2], norms(2);
    const float scales[2] = {1.0f, 1024.0f};
    for (int run = 0; run < 2; ++run) {
        Gpt<float> model(config, *ops_table<float>("reference"), kB, kT);
        model.set_params(testing::noisy_params(config, 43));
        model.zero_grads();
        model.forward_backward(inputs.data(), targets.data(), kB, kT, scales[run] / (kB * kT));
        // max_norm below the norm: the clipping factor is computed from the unscaled norm.
        norms[run] = model.update(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 1, scales[run]);
        weights[run] = model.params();
    }
    EXPECT_EQ(norms[1], norms[0]) << "the norm reported should be the unscaled gradient's";
    EXPECT_GT(norms[0], 0.1f) << "the test means to clip";
    EXPECT_EQ(weights[1], weights[0]) << "the scaled step should equal the unscaled one";
}

// A loss scale too large for fp16: the scaled gradients overflow to inf, the update takes no step
// (weights and moments as they were) and returns a norm that is not finite; a scale that fits
// then steps.
TEST(GpuModel, Fp16OverflowSkipsTheStep) {
    if (!gpu_present()) GTEST_SKIP() << "no CUDA GPU";
    const GptConfig config = testing::tiny_config();
    std::vector<int> inputs, targets;
    testing::tokens(kB * kT, 47, &inputs, &targets);
    Gpt<fp16> model(config, *ops_table<fp16>("reference"), kB, kT);
    const std::vector<float> params = testing::noisy_params(config, 53);
    model.set_params(params);
    // The cross-entropy's gradient alone is up to 2^30 / 87 per logit, past fp16's 65504.
    const float too_large = 0x1p30f;
    model.zero_grads();
    model.forward_backward(inputs.data(), targets.data(), kB, kT, too_large / (kB * kT));
    const float norm = model.update(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, too_large);
    EXPECT_FALSE(std::isfinite(norm)) << "an overflowed gradient should report a non-finite norm";
    EXPECT_EQ(model.params(), params) << "a skipped step should leave the weights";
    std::vector<float> m, v;
    model.optimizer_state(&m, &v);
    EXPECT_EQ(m, std::vector<float>(m.size(), 0.0f)) << "a skipped step should leave the moments";
    EXPECT_EQ(v, std::vector<float>(v.size(), 0.0f));

    const float fits = 1024.0f;  // as in Fp16MatchesCpuReferenceLoosely
    model.zero_grads();
    model.forward_backward(inputs.data(), targets.data(), kB, kT, fits / (kB * kT));
    EXPECT_TRUE(std::isfinite(model.update(1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1, fits)));
    EXPECT_NE(model.params(), params) << "a clean step should move the weights";
}

TEST(GpuModel, RepeatsBitForBit) {
    if (!gpu_present(8)) GTEST_SKIP() << "bf16 needs a GPU of compute capability 8.0 or newer";
    const GptConfig config = testing::tiny_config();
    std::vector<int> inputs, targets;
    testing::tokens(kB * kT, 31, &inputs, &targets);
    std::vector<float> runs[2];
    for (auto& grads : runs) {
        Gpt<bf16> model(config, *ops_table<bf16>("reference"), kB, kT);
        model.set_params(testing::noisy_params(config, 37));
        model.zero_grads();
        model.forward_backward(inputs.data(), targets.data(), kB, kT, 1.0f / (kB * kT));
        grads = model.grads();
    }
    EXPECT_EQ(runs[0], runs[1]);
}

}  // namespace
}  // namespace trainer
