// Checker of 07_attention/flash_causal: T around the tile sizes (1, 17, 63, 64, 65, 1000, 4096), D
// 64 and 128, causal and not, B and H not 1, against the double CPU reference (the float32 GPU
// reference of common/ at T = 4096); scores in the hundreds (exp overflows without the row
// maximum); each case run twice (the same bits both times); one head long enough that its T x T
// scores would not fit in this GPU's memory. Then the FLOP rate at B 4, H 16, T 4096 next to
// cuBLAS's materialized attention in float32, causal (FLOPs counted for the visible half); at D
// 64 it must take at most 65% of cuBLAS's time, which skipping the masked tiles gives.
#include "attention_checks.h"
#include "flash_causal.h"

namespace {

using namespace attention_checks;

class FlashCausal : public course::GpuTest {};

const ForwardRun<float> kFlash = flash_f32_run(flash_causal);

TEST_F(FlashCausal, EdgeShapes) {
    auto rng = test_rng();
    edge_shapes<float>(kFlash, rng);
}

TEST_F(FlashCausal, LongSequence) {
    COURSE_SKIP_ON_EMULATOR("T = 4096");
    auto rng = test_rng();
    long_sequence<float>(kFlash, rng);
}

TEST_F(FlashCausal, LargeScores) {
    auto rng = test_rng();
    large_scores<float>(kFlash, rng);
}

TEST_F(FlashCausal, MostHeads) {
    auto rng = test_rng();
    most_heads<float>(kFlash, rng);
}

TEST_F(FlashCausal, NoScoresBuffer) {
    ATTENTION_SKIP_UNDER_SANITIZER("one head of T ~ 146k");
    COURSE_SKIP_ON_EMULATOR("one head whose T x T scores would not fit in memory");
    auto rng = test_rng();
    no_scores_buffer<float>(kFlash, true, rng);
}

// The causal rate at D 64, judged: against cuBLAS's materialized causal attention, which computes
// all T x T scores and masks half of them. A flash kernel that skips the fully masked tiles does
// half that work, and at the readable solution's efficiency takes about half cuBLAS's time; one
// that computes them and masks takes about as long as cuBLAS. The yardstick is the library's, not
// the kernel's own non-causal run, which a non-causal path slowed on purpose would flatter.
TEST_F(FlashCausal, RateD64) {
    auto rng = test_rng();
    const Case c = timed_case(64, true);
    COURSE_REQUIRE_MEMORY(2 * scores_bytes(c) + timed_forward_bytes(c));
    const auto timing = time_forward<float>(kFlash, {{"cublas_attention_f32", cublas_f32}}, c, rng);
    const double fraction = timing.learner.median_ms / timing.baseline.median_ms;
    EXPECT_LE(fraction, 0.65)
        << "the causal run takes " << 100 * fraction
        << "% of the time of cuBLAS's materialized causal attention, which computes every score "
           "and masks half: a flash kernel that skips the fully masked tiles takes at most 65%. "
           "Stop the key loop at the tile holding the block's last query instead of masking them";
}

TEST_F(FlashCausal, RateD128) {
    auto rng = test_rng();
    rate_f32(kFlash, 128, true, rng);
}

}  // namespace
