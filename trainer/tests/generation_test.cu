// Generation with the KV cache on the GPU, the model on the tiny preset: the logits of every
// decoding step against the CPU double reference and against generation without the cache (fp32,
// bf16, fp16; several chunks of decode attention per head); the tokens drawn both ways for the same
// uniforms, step by step (bf16 too) and end to end (fp32), at batch 1 and 4, past the context.
// Where the two ways draw differently, the uniform must lie closer to a boundary of the cumulative
// probabilities than the difference of their logits can move it (sampling_margins.h). Decoding
// steps run as CUDA graphs against the same steps launched op by op: the same logits and tokens,
// bit for bit, one graph captured per batch and sampling, none in fp32 (its LayerNorm cannot be
// captured: the model says so); generate_tokens, which waits for the GPU only where a refill needs
// the tokens, against a loop that waits at every step. The reference's generation ops on their
// own: generation_ops_test.cu. Skipped without a GPU.
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
    const std::vector<float> uniforms(B, 0.5f);  // the draws are not looked at here
    const double tolerance = kLogitTolerance<Act>;
    double worst[3] = {};  // cached, uncached against the CPU; cached against uncached
    for (int position = prompt - 1; position < N; ++position) {
        std::vector<int> step(B), window;
        for (int b = 0; b < B; ++b) {
            step[b] = tokens[b * N + position];
            window.insert(window.end(), tokens.begin() + b * N,
                          tokens.begin() + b * N + position + 1);
        }
        model.decode(step.data(), B, position, uniforms.data(), SamplingParams{}, true);
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
        model.decode(last.data(), B, w.length - 1, u.data(), kSampling, true);
        const std::vector<std::vector<int>> drawn = model.drawn_tokens();
        for (int b = 0; b < B; ++b) cached[b] = drawn[b][0];
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
                // The rule on the cached logits: where it draws as the GPU did, the logits parted
                // the ways, not the sampler.
                const int rule_on_cached = sample_token(
                    cached_logits.data() + static_cast<std::size_t>(b) * V, V, kSampling, u[b]);
                ASSERT_TRUE(testing::could_draw_otherwise(m, delta, kSampling.temperature,
                                                          testing::kSamplingRounding))
                    << "step " << step << ", sequence " << b << ": drew " << cached[b]
                    << " with the cache and " << uncached << " without (the host's rule on the "
                    << "cached logits: " << rule_on_cached << "), for u " << u[b] << ", which lies "
                    << m.draw << " from a boundary (top-p " << m.top_p << ", top-k gap "
                    << m.top_k_gap << ", top-p gap " << m.top_p_gap << "); the logits differ by "
                    << delta;
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

// ---- Decoding steps as CUDA graphs ----

// Two models of the same weights step side by side through generation's windows (refills past the
// context), one replaying its steps as a CUDA graph, the other launching their kernels one by one,
// each fed the tokens it drew (given by the host at a refill only): the same logits at every step,
// bit for bit, and the same tokens. The graph is captured once, at the second step, and runs
// every step from there; in fp32 the model says why it runs none.
template <typename Act>
void graphed_steps_are_the_eager_steps(int B) {
    const GptConfig config = testing::tiny_config();
    const int V = config.vocab_size, context = config.max_seq_len;
    const std::vector<float> params = testing::noisy_params(config, 79);
    Gpt<Act> graphed(config, *ops_table<Act>("reference"), B, context);
    Gpt<Act> eager(config, *ops_table<Act>("reference"), B, context);
    for (Gpt<Act>* model : {&graphed, &eager}) {
        model->set_params(params);
        model->reserve_kv_cache(B);
    }
    UniformStream uniforms(13);
    std::vector<std::vector<int>> sequences(B, std::vector<int>{0, 3});
    ::testing::internal::CaptureStdout();
    for (int step = 0; step < kSteps; ++step) {
        const Window w = window_at(step, 2, context);
        std::vector<float> u(B);
        for (float& x : u) x = uniforms.next();
        std::vector<int> last(B);
        for (int b = 0; b < B; ++b) last[b] = sequences[b].back();
        for (Gpt<Act>* model : {&graphed, &eager}) {
            for (int b = 0; b < B && w.refill; ++b)
                model->prefill(b, sequences[b].data() + w.start, w.length - 1);
            model->decode(w.refill ? last.data() : nullptr, B, w.length - 1, u.data(), kSampling,
                          model == &graphed);
        }
        const std::vector<float> want = eager.decode_logits(B), got = graphed.decode_logits(B);
        for (std::size_t i = 0; i < want.size(); ++i)
            ASSERT_EQ(got[i], want[i]) << "step " << step << ", sequence " << i / V << ", token "
                                       << i % V << ": the graph's logit is not the eager step's";
        const std::vector<std::vector<int>> drawn = graphed.drawn_tokens();
        const std::vector<std::vector<int>> eager_drawn = eager.drawn_tokens();
        ASSERT_EQ(drawn, eager_drawn) << "step " << step << ": the tokens drawn";
        for (int b = 0; b < B; ++b) sequences[b].push_back(drawn[b].at(0));
    }
    const std::string printed = ::testing::internal::GetCapturedStdout();
    EXPECT_EQ(eager.decode_graph_use().steps, 0);
    if (std::is_same_v<Act, float>) {
        EXPECT_EQ(graphed.decode_graph_use().steps, 0);
        EXPECT_NE(printed.find("not as a CUDA graph: in fp32 LayerNorm's forward is module 06's"),
                  std::string::npos)
            << printed;
    } else {
        EXPECT_EQ(graphed.decode_graph_use().captures, 1);
        EXPECT_EQ(graphed.decode_graph_use().steps, kSteps - 1) << "every step after the first";
        EXPECT_EQ(printed.find("not as a CUDA graph"), std::string::npos) << printed;
    }
    std::printf(
        "%s, batch %d: %ld of %d steps run by %d CUDA graph(s), the same logits and tokens as "
        "the steps launched op by op, bit for bit\n",
        kDtypeName<Act>, B, graphed.decode_graph_use().steps, kSteps,
        graphed.decode_graph_use().captures);
}

TEST(Generation, GraphedStepsAreTheEagerStepsBf16) {
    SKIP_UNLESS_RUNS(bf16);
    graphed_steps_are_the_eager_steps<bf16>(1);
    graphed_steps_are_the_eager_steps<bf16>(4);
}
TEST(Generation, GraphedStepsAreTheEagerStepsFp16) {
    SKIP_UNLESS_RUNS(fp16);
    graphed_steps_are_the_eager_steps<fp16>(3);
}
TEST(Generation, Fp32StepsRunWithoutAGraphAndSaySo) {
    SKIP_UNLESS_RUNS(float);
    graphed_steps_are_the_eager_steps<float>(2);
}

// generate_tokens with graphs, without them, and a loop of the same steps that gives the tokens
// and waits for the draws at every step: the same tokens. Past the context of the tiny preset (the
// window slides: a refill at every step), and in a context of 320 without a refill for 300 steps,
// more than the steps the model keeps in flight before it waits (kStepsInFlight). A second
// sampling captures a second graph.
template <typename Act>
void generate_tokens_is_the_waiting_loop(int context, int tokens) {
    GptConfig config = testing::tiny_config();
    config.max_seq_len = context;
    const int B = 2;
    const std::vector<int> prompt = {0, 5, 7};
    Gpt<Act> model(config, *ops_table<Act>("reference"), B, context);
    model.set_params(testing::noisy_params(config, 83));
    GenerationOptions options{B, tokens, context, kSampling, 17, true};
    const auto graphed = generate_tokens(model, prompt, options);
    EXPECT_EQ(model.decode_graph_use().captures, 1);
    options.cuda_graph = false;
    const auto eager = generate_tokens(model, prompt, options);
    EXPECT_EQ(graphed, eager) << "context " << context;

    UniformStream uniforms(options.seed);
    std::vector<std::vector<int>> sequences(B, prompt);
    for (int step = 0; step < tokens; ++step) {
        const Window w = window_at(step, static_cast<int>(prompt.size()), context);
        std::vector<float> u(B);
        for (float& x : u) x = uniforms.next();
        std::vector<int> last(B);
        for (int b = 0; b < B; ++b) {
            if (w.refill) model.prefill(b, sequences[b].data() + w.start, w.length - 1);
            last[b] = sequences[b].back();
        }
        model.decode(last.data(), B, w.length - 1, u.data(), kSampling, true);
        const std::vector<std::vector<int>> drawn = model.drawn_tokens();
        for (int b = 0; b < B; ++b) sequences[b].push_back(drawn[b].at(0));
    }
    for (int b = 0; b < B; ++b) {
        const std::vector<int> waited(sequences[b].begin() + prompt.size(), sequences[b].end());
        EXPECT_EQ(graphed[b], waited) << "context " << context << ", sequence " << b;
    }

    options.cuda_graph = true;
    options.sampling.top_k = 5;
    generate_tokens(model, prompt, options);
    EXPECT_EQ(model.decode_graph_use().captures, 2) << "another sampling, another graph";
}

TEST(Generation, GenerateTokensIsTheWaitingLoopBf16) {
    SKIP_UNLESS_RUNS(bf16);
    generate_tokens_is_the_waiting_loop<bf16>(64, kSteps);
    generate_tokens_is_the_waiting_loop<bf16>(320, 300);
}
TEST(Generation, GenerateTokensIsTheWaitingLoopFp16) {
    SKIP_UNLESS_RUNS(fp16);
    generate_tokens_is_the_waiting_loop<fp16>(320, 300);
}

}  // namespace
}  // namespace trainer
