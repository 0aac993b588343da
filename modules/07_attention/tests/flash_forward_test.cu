// Checker of 07_attention/flash_forward: T around the tile sizes (1, 17, 63, 64, 65, 1000, 4096), D
// 64 and 128, causal and not, B and H not 1, against the double CPU reference (the float32 GPU
// reference of common/ at T = 4096); scores in the hundreds (exp overflows without the row
// maximum); each case run twice (the same bits both times); one head long enough that its T x T
// scores would not fit in this GPU's memory. Then the FLOP rate at B 4, H 16, T 4096 next to
// cuBLAS's materialized attention in float32.
#include "attention_checks.h"
#include "flash_forward.h"

namespace {

using namespace attention_checks;

class FlashForward : public course::GpuTest {};

const ForwardRun<float> kFlash = flash_f32_run(flash_forward);

TEST_F(FlashForward, EdgeShapes) {
    auto rng = test_rng();
    edge_shapes<float>(kFlash, rng);
}

TEST_F(FlashForward, LongSequence) {
    COURSE_SKIP_ON_EMULATOR("T = 4096");
    auto rng = test_rng();
    long_sequence<float>(kFlash, rng);
}

TEST_F(FlashForward, LargeScores) {
    auto rng = test_rng();
    large_scores<float>(kFlash, rng);
}

TEST_F(FlashForward, MostHeads) {
    auto rng = test_rng();
    most_heads<float>(kFlash, rng);
}

TEST_F(FlashForward, NoScoresBuffer) {
    ATTENTION_SKIP_UNDER_SANITIZER("one head of T ~ 146k");
    COURSE_SKIP_ON_EMULATOR("one head whose T x T scores would not fit in memory");
    auto rng = test_rng();
    no_scores_buffer<float>(kFlash, false, rng);
}

TEST_F(FlashForward, RateD64) {
    auto rng = test_rng();
    rate_f32(kFlash, 64, false, rng);
}

TEST_F(FlashForward, RateD128) {
    auto rng = test_rng();
    rate_f32(kFlash, 128, false, rng);
}

}  // namespace
