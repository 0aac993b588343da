// Generation with the KV cache on the GPU, the model on the tiny preset: the logits of every
// decoding step against the CPU double reference and against generation without the cache (fp32,
// bf16, fp16; several chunks of decode attention per head); the tokens drawn both ways for the same
// uniforms, step by step (bf16 too) and end to end (fp32), at batch 1 and 4, past the context.
// Where the two ways draw differently, the uniform must lie closer to a boundary of the cumulative
// probabilities than the difference of their logits can move it (sampling_margins.h). The
// reference's generation ops on their own: generation_ops_test.cu. Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "course/check.h"
#include "cpu_reference.h"
#include "generate.h"
#include "gpt.h"
#include "kv_cache.h"
#include "ops.h"
#include "sampling.h"
#include "sampling_margins.h"
#include "test_support.h"

namespace trainer {
namespace {

using testing::gpu_present;

// bf16 needs compute capability 8.0 (its products); fp32 and fp16 run on any GPU.
template <typename Act>
bool runs_here() {
    return gpu_present(std::is_same_v<Act, bf16> ? 8 : 0);
}
#define SKIP_UNLESS_RUNS(Act) \
    if (!runs_here<Act>()) GTEST_SKIP() << "no CUDA GPU for " << kDtypeName<Act>

// The logits' tolerance against the CPU double reference, per dtype: the model tests' own
// (gpu_model_test.cu). Two ways each within it of the exact logits are within twice it of each
// other.
template <typename Act>
constexpr double kLogitTolerance = std::is_same_v<Act, float>  ? 1e-4
                                   : std::is_same_v<Act, bf16> ? 5e-2
                                                               : 2e-2;

// ---- The model ----

// The tiny preset with a context of 200: decode attention cuts each head's cache of 200 positions
// into 3 chunks (kv::split_for), the later ones empty on the first steps.
GptConfig long_config() {
    GptConfig config = testing::tiny_config();
    config.max_seq_len = 200;
    return config;
}

// B sequences of 150 tokens: a prompt of 7 prefilled (6 tokens) and decoded (the 7th), then a
// decoding step per token, fed the sequences' own tokens. Each step's logits, with the cache and
// without it (a forward pass over the sequence so far), against the CPU reference's logits at that
// position (one causal forward pass over the whole sequence gives every position's).
template <typename Act>
void cached_logits_match_the_reference() {
    const GptConfig config = long_config();
    const int B = 3, N = 150, prompt = 7, V = config.vocab_size, Vp = config.padded_vocab_size;
    const std::vector<float> params = testing::noisy_params(config, 61);
    std::vector<int> tokens, unused;
    testing::tokens(B * N, 67, &tokens, &unused);  // [B][N]
    std::vector<std::vector<double>> want(B);
    for (int b = 0; b < B; ++b) {
        CpuGpt cpu(config, params);
        const std::vector<int> sequence(tokens.begin() + b * N, tokens.begin() + (b + 1) * N);
        cpu.forward(sequence, std::vector<int>(N, 0), 1, N);
        want[b] = cpu.logits();
    }
    Gpt<Act> model(config, *ops_table<Act>("reference"), B, config.max_seq_len);
    model.set_params(params);
    model.reserve_kv_cache(B);
    for (int b = 0; b < B; ++b) model.prefill(b, tokens.data() + b * N, prompt - 1);
    const double tolerance = kLogitTolerance<Act>;
    double worst[3] = {};  // cached, uncached against the CPU; cached against uncached
    for (int position = prompt - 1; position < N; ++position) {
        std::vector<int> step(B), window;
        for (int b = 0; b < B; ++b) {
            step[b] = tokens[b * N + position];
            window.insert(window.end(), tokens.begin() + b * N,
                          tokens.begin() + b * N + position + 1);
        }
        model.decode(step.data(), B, position);
        const std::vector<float> cached = model.decode_logits(B);
        const std::vector<float> uncached = model.next_token_logits(window.data(), B, position + 1);
        for (int b = 0; b < B; ++b)
            for (int i = 0; i < V; ++i) {
                const double exact = want[b][static_cast<std::size_t>(position) * Vp + i];
                const double c = cached[static_cast<std::size_t>(b) * V + i];
                const double u = uncached[static_cast<std::size_t>(b) * V + i];
                const double errors[3] = {std::fabs(c - exact), std::fabs(u - exact),
                                          std::fabs(c - u)};
                for (int e = 0; e < 3; ++e) worst[e] = std::max(worst[e], errors[e]);
                ASSERT_LE(errors[0], tolerance)
                    << "the cached logit of token " << i << " at position " << position
                    << " of sequence " << b << ": " << c << ", the CPU's " << exact;
                ASSERT_LE(errors[1], tolerance)
                    << "the uncached logit of token " << i << " at position " << position
                    << " of sequence " << b << ": " << u << ", the CPU's " << exact;
                ASSERT_LE(errors[2], 2 * tolerance)
                    << "token " << i << " at position " << position << " of sequence " << b
                    << ": cached " << c << ", uncached " << u;
            }
    }
    std::printf(
        "%s: largest logit differences over %d steps: cached %.3g, uncached %.3g from the "
        "CPU's; %.3g between them (tolerance %.3g)\n",
        kDtypeName<Act>, N - prompt + 1, worst[0], worst[1], worst[2], tolerance);
}

TEST(Generation, CachedLogitsMatchTheReferenceFp32) {
    SKIP_UNLESS_RUNS(float);
    cached_logits_match_the_reference<float>();
}
TEST(Generation, CachedLogitsMatchTheReferenceBf16) {
    SKIP_UNLESS_RUNS(bf16);
    cached_logits_match_the_reference<bf16>();
}
TEST(Generation, CachedLogitsMatchTheReferenceFp16) {
    SKIP_UNLESS_RUNS(fp16);
    cached_logits_match_the_reference<fp16>();
}

constexpr SamplingParams kSampling{1.0f, 40, 0.9f};
constexpr int kSteps = 100;  // past the tiny preset's context of 64: the window slides

// Generation's steps both ways side by side (generate.cpp's steps, window_at's windows), from the
// same uniforms, each fed the token drawn without the cache: the logits within twice the
// tolerance of each other, and the tokens drawn the same wherever the difference of the two
// ways' logits cannot move a boundary of the cumulative probabilities across the uniform.
template <typename Act>
void both_ways_draw_the_same_tokens(int B) {
    const GptConfig config = testing::tiny_config();
    const int V = config.vocab_size, context = config.max_seq_len;
    Gpt<Act> model(config, *ops_table<Act>("reference"), B, context);
    model.set_params(testing::noisy_params(config, 71));
    model.reserve_kv_cache(B);
    UniformStream uniforms(5);
    std::vector<std::vector<int>> sequences(B, std::vector<int>{0});
    int differ = 0;
    for (int step = 0; step < kSteps; ++step) {
        const Window w = window_at(step, 1, context);
        std::vector<float> u(B);
        for (float& x : u) x = uniforms.next();
        std::vector<int> last(B), cached(B), window;
        for (int b = 0; b < B; ++b) {
            if (w.refill) model.prefill(b, sequences[b].data() + w.start, w.length - 1);
            last[b] = sequences[b].back();
            window.insert(window.end(), sequences[b].begin() + w.start, sequences[b].end());
        }
        model.decode(last.data(), B, w.length - 1);
        model.sample_next(cached.data(), u.data(), B, kSampling);
        const std::vector<float> cached_logits = model.decode_logits(B);
        const std::vector<float> logits = model.next_token_logits(window.data(), B, w.length);
        for (int b = 0; b < B; ++b) {
            const float* row = logits.data() + static_cast<std::size_t>(b) * V;
            double delta = 0.0;
            for (int i = 0; i < V; ++i)
                delta = std::max<double>(delta, std::fabs(row[i] - cached_logits[b * V + i]));
            ASSERT_LE(delta, 2 * kLogitTolerance<Act>)
                << "step " << step << ", sequence " << b << ": the two ways' logits";
            const int uncached = sample_token(row, V, kSampling, u[b]);
            if (cached[b] != uncached) {
                ++differ;
                const testing::SamplingMargins m =
                    testing::sampling_margins(row, V, kSampling, u[b]);
                ASSERT_TRUE(testing::could_draw_otherwise(m, delta, kSampling.temperature,
                                                          testing::kSamplingRounding))
                    << "step " << step << ", sequence " << b << ": drew " << cached[b]
                    << " with the cache and " << uncached << " without, for u " << u[b]
                    << ", which lies " << m.draw << " from a boundary (top-p " << m.top_p
                    << ", top-k gap " << m.top_k_gap << "); the logits differ by " << delta;
            }
            sequences[b].push_back(uncached);
        }
    }
    EXPECT_LE(differ, B * kSteps / 10) << "too many draws near a boundary to say much";
    std::printf(
        "%s, batch %d: %d of %d draws differ, each explained by a boundary within the "
        "logits' difference\n",
        kDtypeName<Act>, B, differ, B * kSteps);
}

TEST(Generation, BothWaysDrawTheSameTokensFp32) {
    SKIP_UNLESS_RUNS(float);
    both_ways_draw_the_same_tokens<float>(1);
    both_ways_draw_the_same_tokens<float>(4);
}
TEST(Generation, BothWaysDrawTheSameTokensBf16) {
    SKIP_UNLESS_RUNS(bf16);
    both_ways_draw_the_same_tokens<bf16>(1);
    both_ways_draw_the_same_tokens<bf16>(4);
}
TEST(Generation, BothWaysDrawTheSameTokensFp16) {
    SKIP_UNLESS_RUNS(fp16);
    both_ways_draw_the_same_tokens<fp16>(4);
}

// generate_tokens itself (what train_gpt runs) with the cache and without, fp32, the same seed:
// the same tokens, or sequences that part where a draw lay within the logits' tolerance of a
// boundary (checked on the logits without the cache at the step where they part).
TEST(Generation, GenerateTokensDrawsTheSameBothWaysFp32) {
    SKIP_UNLESS_RUNS(float);
    const GptConfig config = testing::tiny_config();
    const int V = config.vocab_size;
    for (int B : {1, 4}) {
        Gpt<float> model(config, *ops_table<float>("reference"), B, config.max_seq_len);
        model.set_params(testing::noisy_params(config, 73));
        GenerationOptions options{B, kSteps, config.max_seq_len, kSampling, 11, true};
        const std::vector<int> prompt = {0};
        const auto cached = generate_tokens(model, prompt, options);
        options.kv_cache = false;
        const auto uncached = generate_tokens(model, prompt, options);
        for (int b = 0; b < B; ++b) {
            const auto parted =
                std::mismatch(cached[b].begin(), cached[b].end(), uncached[b].begin());
            const int step = static_cast<int>(parted.first - cached[b].begin());
            if (step == kSteps) continue;
            std::vector<int> sequence = prompt;
            sequence.insert(sequence.end(), uncached[b].begin(), uncached[b].begin() + step);
            const Window w = window_at(step, 1, config.max_seq_len);
            const std::vector<float> row =
                model.next_token_logits(sequence.data() + w.start, 1, w.length);
            UniformStream uniforms(options.seed);
            for (int skip = 0; skip < step * B + b; ++skip) uniforms.next();
            const float u = uniforms.next();
            const testing::SamplingMargins m =
                testing::sampling_margins(row.data(), V, kSampling, u);
            EXPECT_TRUE(testing::could_draw_otherwise(
                m, 2 * kLogitTolerance<float>, kSampling.temperature, testing::kSamplingRounding))
                << "batch " << B << ", sequence " << b << " parts at step " << step << " (cached "
                << cached[b][step] << ", uncached " << uncached[b][step] << ") for u " << u << ", "
                << m.draw << " from a boundary";
            std::printf(
                "batch %d, sequence %d: the same tokens for %d of %d steps, then a draw "
                "%.3g from a boundary\n",
                B, b, step, kSteps, m.draw);
        }
    }
}

}  // namespace
}  // namespace trainer
