// Checker of 07_attention/attention_naive: T around the tile sizes (1, 17, 63, 64, 65, 1000,
// 4096), D 64 and 128, causal and not, B and H not 1, against the double CPU reference (the
// float32 GPU reference of common/ at T = 4096); scores in the hundreds (exp overflows without
// the row maximum); each case run twice (the same bits both times). Then the FLOP rate at B 4,
// H 16, T 4096, D 64 next to cuBLAS's materialized attention: the label names the T x T scores
// the three kernels write and read.
#include "attention_checks.h"
#include "attention_naive.h"

namespace {

using namespace attention_checks;

class AttentionNaive : public course::GpuTest {};

void run_naive(const course::DeviceBuffer<float>& Q, const course::DeviceBuffer<float>& K,
               const course::DeviceBuffer<float>& V, course::DeviceBuffer<float>& O,
               course::DeviceBuffer<float>& L, const Case& c, float* scores) {
    const auto& s = c.shape;
    attention_naive(Q.data(), K.data(), V.data(), O.data(), L.data(), scores,
                    static_cast<int>(s.batch), static_cast<int>(s.heads), static_cast<int>(s.T),
                    static_cast<int>(s.D), c.scale(), c.causal);
}

// A fresh scores workspace for every call of the correctness cases.
const ForwardRun<float> kNaive = [](const auto& Q, const auto& K, const auto& V, auto& O, auto& L,
                                    const Case& c) {
    course::DeviceBuffer<float> scores("scores", c.shape.heads_total() * c.shape.T * c.shape.T);
    run_naive(Q, K, V, O, L, c, scores.data());
};

TEST_F(AttentionNaive, EdgeShapes) {
    auto rng = test_rng();
    edge_shapes<float>(kNaive, rng);
}

TEST_F(AttentionNaive, LongSequence) {
    COURSE_SKIP_ON_EMULATOR("T = 4096");
    auto rng = test_rng();
    long_sequence<float>(kNaive, rng);
}

TEST_F(AttentionNaive, LargeScores) {
    auto rng = test_rng();
    large_scores<float>(kNaive, rng);
}

TEST_F(AttentionNaive, MostHeads) {
    auto rng = test_rng();
    most_heads<float>(kNaive, rng);
}

TEST_F(AttentionNaive, Rate) {
    auto rng = test_rng();
    const Case c = timed_case(64, false);
    // Three T x T float buffers: the exercise's scores, and cuBLAS's scores and probabilities.
    COURSE_REQUIRE_MEMORY(3 * scores_bytes(c) + timed_forward_bytes(c));
    course::DeviceBuffer<float> scores("scores", c.shape.heads_total() * c.shape.T * c.shape.T);
    const ForwardRun<float> naive = [&](const auto& Q, const auto& K, const auto& V, auto& O,
                                        auto& L, const Case& cc) {
        run_naive(Q, K, V, O, L, cc, scores.data());
    };
    std::printf("[attention_naive] the scores of B 4 H 16 T 4096: %.1f GB of device memory\n",
                scores_bytes(c) / 1e9);
    time_forward<float>(naive, {{"cublas_attention_f32", cublas_f32}}, c, rng);
}

}  // namespace
