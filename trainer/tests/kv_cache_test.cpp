// The KV cache's arithmetic without a GPU (kv_cache.h, generate.h, decode_graph.h): its layout,
// the split of decode attention along the cache (every position in one chunk, the GPU filled at
// batch 1), the split-and-merge of softmax states against one softmax in double (empty chunks,
// masked keys, scores large enough that an unrescaled merge overflows), generation's window: which
// tokens the cache holds at which positions, step by step, the context sliding; and when a decoding
// step runs as a CUDA graph, is captured, or runs its ops one by one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "decode_graph.h"
#include "generate.h"
#include "kv_cache.h"

namespace trainer {
namespace {

TEST(KvCache, LayoutIsDecodeAttentionsContract) {
    const int S = 3, NH = 4, capacity = 7, HS = 8;  // [sequences][NH][capacity][HS]
    EXPECT_EQ(kv::layer_elements(S, NH, capacity, HS),
              static_cast<std::size_t>(S) * NH * capacity * HS);
    std::set<std::size_t> seen;
    for (int b = 0; b < S; ++b)
        for (int h = 0; h < NH; ++h)
            for (int p = 0; p < capacity; ++p)
                for (int d = 0; d < HS; ++d) {
                    const std::size_t at = kv::offset(b, h, p, d, NH, capacity, HS);
                    ASSERT_EQ(at, ((static_cast<std::size_t>(b) * NH + h) * capacity + p) * HS + d);
                    seen.insert(at);
                }
    EXPECT_EQ(seen.size(), kv::layer_elements(S, NH, capacity, HS)) << "every element once";
    EXPECT_EQ(*seen.rbegin() + 1, kv::layer_elements(S, NH, capacity, HS)) << "and nothing past it";
}

TEST(KvCache, SplitsCoverEveryPositionOnce) {
    for (int capacity : {1, 2, 63, 64, 65, 100, 256, 1024, 4097, 32768, 65536})
        for (int rows : {1, 4, 12, 192, 1000, 20000})
            for (int sms : {1, 40, 132}) {
                const kv::Split split = kv::split_for(capacity, rows, sms);
                SCOPED_TRACE("capacity " + std::to_string(capacity) + ", rows " +
                             std::to_string(rows) + ", SMs " + std::to_string(sms));
                ASSERT_GE(split.splits, 1);
                ASSERT_LE(split.splits, kDecodeMaxSplits) << "the workspace holds no more";
                ASSERT_GE(static_cast<long long>(split.splits) * split.chunk, capacity);
                ASSERT_LT(static_cast<long long>(split.splits - 1) * split.chunk, capacity)
                    << "no chunk past the capacity";
                ASSERT_TRUE(split.chunk >= kv::kMinSplitKeys || split.splits == 1)
                    << "chunks of " << split.chunk;
            }
}

TEST(KvCache, BatchOneOfGpt2FillsAnH100) {
    // 12 heads of 1024 positions on 132 SMs: 16 chunks of 64 each, 192 blocks.
    const kv::Split split = kv::split_for(1024, 12, 132);
    EXPECT_EQ(split.splits, 16);
    EXPECT_EQ(split.chunk, 64);
    EXPECT_GE(split.splits * 12, 132);
    // Batch 16 has rows enough: two chunks.
    EXPECT_EQ(kv::split_for(1024, 192, 132).splits, 2);
}

// One query against `length` keys, the decode kernel's way: each chunk of the split in tiles of 4
// keys (the keys past the length masked to -inf), an online softmax per chunk, then the chunks'
// states merged at their common maximum. Returns o (HS values) and writes the logsumexp.
std::vector<double> split_attention(const std::vector<float>& scores,
                                    const std::vector<std::vector<float>>& values, int length,
                                    kv::Split split, float* lse) {
    const int HS = static_cast<int>(values[0].size());
    struct State {
        kv::PartialSoftmax softmax;
        std::vector<float> o;
    };
    std::vector<State> states(split.splits, State{{}, std::vector<float>(HS, 0.0f)});
    for (int s = 0; s < split.splits; ++s) {
        const int begin = s * split.chunk, end = std::min(length, begin + split.chunk);
        for (int base = begin; base < end; base += 4) {
            float tile[4], tile_max = -FLT_MAX;
            for (int u = 0; u < 4; ++u) {
                tile[u] = base + u < end ? scores[base + u] : -INFINITY;
                tile_max = std::max(tile_max, tile[u]);
            }
            State& state = states[s];
            const float alpha = state.softmax.rescale(std::max(state.softmax.m, tile_max));
            for (float& x : state.o) x *= alpha;
            for (int u = 0; u < 4; ++u) {
                const float p = std::exp(tile[u] - state.softmax.m);
                state.softmax.l += p;
                for (int d = 0; d < HS; ++d)
                    state.o[d] += p * (base + u < end ? values[base + u][d] : 0.0f);
            }
        }
    }
    float M = -FLT_MAX;
    for (const State& state : states) M = std::max(M, state.softmax.m);
    float l = 0.0f;
    std::vector<double> o(HS, 0.0);
    for (const State& state : states) {
        const float w = kv::merge_weight(state.softmax.m, M);
        l += w * state.softmax.l;
        for (int d = 0; d < HS; ++d) o[d] += w * state.o[d];
    }
    for (double& x : o) x /= l;
    *lse = M + std::log(l);
    return o;
}

TEST(KvCache, SplitAndMergeEqualOneSoftmax) {
    std::mt19937 random(7);
    const int capacity = 1024, HS = 8;
    for (float spread : {1.0f, 300.0f})  // scores in the hundreds: exp overflows unless rescaled
        for (int length : {1, 2, 63, 64, 65, 200, 1000, 1024})
            for (kv::Split split :
                 {kv::split_for(capacity, 1, 132), kv::Split{11, 100}, kv::Split{1, capacity}}) {
                std::normal_distribution<float> normal(0.0f, spread);
                std::vector<float> scores(capacity);
                std::vector<std::vector<float>> values(capacity, std::vector<float>(HS));
                for (float& s : scores) s = normal(random);
                for (auto& v : values)
                    for (float& x : v) x = std::normal_distribution<float>(0.0f, 1.0f)(random);
                double max = -INFINITY;
                for (int j = 0; j < length; ++j) max = std::max<double>(max, scores[j]);
                double sum = 0.0;
                std::vector<double> want(HS, 0.0);
                for (int j = 0; j < length; ++j) {
                    const double p = std::exp(scores[j] - max);
                    sum += p;
                    for (int d = 0; d < HS; ++d) want[d] += p * values[j][d];
                }
                float lse = 0.0f;
                const std::vector<double> got =
                    split_attention(scores, values, length, split, &lse);
                SCOPED_TRACE("length " + std::to_string(length) + ", " +
                             std::to_string(split.splits) + " chunks of " +
                             std::to_string(split.chunk) + ", scores of spread " +
                             std::to_string(spread));
                for (int d = 0; d < HS; ++d) ASSERT_NEAR(got[d], want[d] / sum, 1e-5) << d;
                ASSERT_NEAR(lse, max + std::log(sum), 1e-5 * std::max(1.0, std::fabs(max)));
            }
}

// Generation's window, with a model of the cache: what prefill and decode write where, step by
// step (generate.cpp's order: on a refill the window's first length - 1 tokens at positions 0 ..,
// then the decoded token at length - 1). The cache must hold the window at positions 0 .. length
// - 1 after every step, and never a position past the context.
TEST(Generation, WindowSlidesAndTheCacheHoldsIt) {
    for (int prompt : {1, 3, 9})
        for (int context : {1, 4, 8}) {
            std::vector<int> sequence(prompt);
            for (int i = 0; i < prompt; ++i) sequence[i] = 1000 + i;
            std::vector<int> cache(context, -1);
            int refills = 0;
            for (int step = 0; step < 30; ++step) {
                const Window w = window_at(step, prompt, context);
                SCOPED_TRACE("prompt " + std::to_string(prompt) + ", context " +
                             std::to_string(context) + ", step " + std::to_string(step));
                ASSERT_EQ(w.start + w.length, static_cast<int>(sequence.size()))
                    << "the window ends at the last token";
                ASSERT_EQ(w.length, std::min(context, static_cast<int>(sequence.size())));
                ASSERT_EQ(w.refill, step == 0 || w.start > 0);
                if (w.refill) {
                    ++refills;
                    std::fill(cache.begin(), cache.end(), -1);  // what was there is stale
                    for (int p = 0; p < w.length - 1; ++p) cache[p] = sequence[w.start + p];
                }
                ASSERT_LT(w.length - 1, context) << "decoded past the cache";
                cache[w.length - 1] = sequence.back();
                for (int p = 0; p < w.length; ++p)
                    ASSERT_EQ(cache[p], sequence[w.start + p]) << "position " << p;
                sequence.push_back(step);
            }
            // Refilled on the first step, then on every step once the window slides.
            const int sliding = std::max(0, 30 - std::max(0, context - prompt));
            EXPECT_EQ(refills, std::max(1, sliding))
                << "prompt " << prompt << ", context " << context;
        }
}

// ---- When a decoding step is a CUDA graph ----

using Launch = DecodeGraphPlan::Launch;

// The launches of a run of steps, each of B sequences with `params`.
std::vector<Launch> steps(DecodeGraphPlan& plan, int count, int B, const SamplingParams& params,
                          bool graphs = true) {
    std::vector<Launch> launches;
    for (int i = 0; i < count; ++i) launches.push_back(plan.next(B, params, graphs));
    return launches;
}

TEST(DecodeGraph, RunsOnceEagerlyThenCapturesThenReplays) {
    DecodeGraphPlan plan;
    const SamplingParams params{1.0f, 40, 0.9f};
    EXPECT_EQ(steps(plan, 4, 16, params),
              (std::vector<Launch>{DecodeGraphPlan::kEager, DecodeGraphPlan::kCapture,
                                   DecodeGraphPlan::kReplay, DecodeGraphPlan::kReplay}));
}

TEST(DecodeGraph, AnotherBatchOrSamplingIsCapturedAgain) {
    const std::vector<Launch> again = {DecodeGraphPlan::kEager, DecodeGraphPlan::kCapture,
                                       DecodeGraphPlan::kReplay};
    const SamplingParams params{1.0f, 40, 1.0f};
    for (const SamplingParams& other :
         {SamplingParams{0.8f, 40, 1.0f}, SamplingParams{1.0f, 0, 1.0f},
          SamplingParams{1.0f, 40, 0.95f}}) {
        DecodeGraphPlan plan;
        steps(plan, 3, 1, params);
        EXPECT_EQ(steps(plan, 3, 1, other), again) << "the sampling's settings are the graph's";
    }
    DecodeGraphPlan plan;
    steps(plan, 3, 1, params);
    EXPECT_EQ(steps(plan, 3, 16, params), again) << "the batch's buffers are the graph's";
    EXPECT_EQ(steps(plan, 3, 1, params), again) << "one graph is kept";
}

TEST(DecodeGraph, WithoutGraphsEveryStepRunsEagerly) {
    DecodeGraphPlan plan;
    const SamplingParams params;
    EXPECT_EQ(steps(plan, 3, 4, params, false), std::vector<Launch>(3, DecodeGraphPlan::kEager));
    steps(plan, 3, 4, params);
    EXPECT_EQ(steps(plan, 2, 4, params, false), std::vector<Launch>(2, DecodeGraphPlan::kEager))
        << "--no-cuda-graph, or a table that refuses graphs";
    EXPECT_EQ(plan.next(4, params, true), DecodeGraphPlan::kReplay) << "the graph is still good";
}

TEST(DecodeGraph, NewBuffersForgetTheGraph) {
    DecodeGraphPlan plan;
    const SamplingParams params;
    steps(plan, 3, 2, params);
    plan.forget();  // reserve_kv_cache for more sequences, or a capture that failed
    EXPECT_EQ(steps(plan, 3, 2, params),
              (std::vector<Launch>{DecodeGraphPlan::kEager, DecodeGraphPlan::kCapture,
                                   DecodeGraphPlan::kReplay}));
}

}  // namespace
}  // namespace trainer
