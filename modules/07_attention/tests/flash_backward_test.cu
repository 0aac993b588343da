// Checker of 07_attention/flash_backward: 16-bit Q, K, V, dO (random, rounded to bf16, or fp16 in
// a build for sm_75), O and L from the reference forward (O rounded likewise), T around the tile
// sizes (1, 17, 63, 64, 65, 1000, 4096), D 64 and 128, causal and not, B and H not 1: dQ, dK and dV
// against the double CPU reference backward (the float32 GPU reference of common/ at T = 4096; the
// CPU reference is itself checked against finite differences in double,
// common/tests/reference_attention_test.cpp). Each case runs twice: dK and dV must come out with
// the same bits (dQ may not: atomics add in any order). One head long enough that its T x T scores
// would not fit in this GPU's memory, even in 16 bits, sampled rows checked. Then the FLOP rate at
// B 4, H 16, T 4096, D 64 and 128, causal and not, next to cuDNN's fused backward (else cuBLAS's
// materialized one), in the same element type.
#include "backward_checks.h"
#include "flash_backward.h"

namespace {

using namespace attention_checks;

class FlashBackward : public course::GpuTest {};

const BackwardRun kFlashBackward = [](const BackwardProblem& p, F32& dQ, F32& dK, F32& dV) {
    const auto& s = p.c.shape;
    flash_backward(as_tensor(p.dQ_in), as_tensor(p.dK_in), as_tensor(p.dV_in), as_tensor(p.d_O),
                   as_tensor(p.d_dO), p.d_L.data(), dQ.data(), dK.data(), dV.data(),
                   static_cast<int>(s.batch), static_cast<int>(s.heads), static_cast<int>(s.T),
                   static_cast<int>(s.D), p.c.scale(), p.c.causal);
};

TEST_F(FlashBackward, EdgeShapes) {
    auto rng = test_rng();
    backward_edge_shapes(kFlashBackward, rng);
}

TEST_F(FlashBackward, LongSequence) {
    auto rng = test_rng();
    backward_long_sequence(kFlashBackward, rng);
}

TEST_F(FlashBackward, MostHeads) {
    auto rng = test_rng();
    backward_most_heads(kFlashBackward, rng);
}

TEST_F(FlashBackward, LargeScores) {
    auto rng = test_rng();
    backward_large_scores(kFlashBackward, rng);
}

// One head whose T x T scores would not fit in this GPU's memory even in 16 bits (T about 200000
// on an 80 GB GPU): a kernel that keeps P or dS in a scratch buffer cannot allocate it.
TEST_F(FlashBackward, NoScoresBuffer) {
    ATTENTION_SKIP_UNDER_SANITIZER("one head of T ~ 200k");
    auto rng = test_rng();
    backward_no_scores_buffer(kFlashBackward, rng);
}

TEST_F(FlashBackward, RateD64) {
    auto rng = test_rng();
    rate_backward(kFlashBackward, timed_case(64, false), rng);
}
TEST_F(FlashBackward, RateD64Causal) {
    auto rng = test_rng();
    rate_backward(kFlashBackward, timed_case(64, true), rng);
}
TEST_F(FlashBackward, RateD128) {
    auto rng = test_rng();
    rate_backward(kFlashBackward, timed_case(128, false), rng);
}
TEST_F(FlashBackward, RateD128Causal) {
    auto rng = test_rng();
    rate_backward(kFlashBackward, timed_case(128, true), rng);
}

}  // namespace
