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

const ForwardRun<float> kFlash = [](const auto& Q, const auto& K, const auto& V, auto& O, auto& L,
                                    const Case& c) {
    const auto& s = c.shape;
    flash_forward(Q.data(), K.data(), V.data(), O.data(), L.data(), static_cast<int>(s.batch),
                  static_cast<int>(s.heads), static_cast<int>(s.T), static_cast<int>(s.D),
                  c.scale(), c.causal);
};

const BaselineRun<float> kCublas = [](const auto& Q, const auto& K, const auto& V, auto& O, auto&,
                                      const Case& c) {
    const auto& s = c.shape;
    course::baseline::cublas_attention_f32(Q.data(), K.data(), V.data(), O.data(),
                                           static_cast<int>(s.batch), static_cast<int>(s.heads),
                                           static_cast<int>(s.T), static_cast<int>(s.D), c.scale(),
                                           c.causal);
};

TEST_F(FlashForward, EdgeShapes) {
    auto rng = test_rng();
    edge_shapes<float>(kFlash, rng);
}

TEST_F(FlashForward, LargeScores) {
    auto rng = test_rng();
    large_scores<float>(kFlash, rng);
}

TEST_F(FlashForward, NoScoresBuffer) {
    if (course::exact_allocations()) {
        // Under compute-sanitizer (exact allocations) one head of T ~ 146k would take minutes.
        const std::string reason = "a head of T ~ 146k is too slow under compute-sanitizer";
        RecordProperty("skip_reason", reason);
        GTEST_SKIP() << reason;
    }
    auto rng = test_rng();
    no_scores_buffer(kFlash, false, rng);
}

void rate(std::size_t D, bool causal, course::Rng& rng) {
    const Case c = timed_case(D, causal);
    COURSE_REQUIRE_MEMORY(2 * scores_bytes(c) + timed_forward_bytes(c));
    time_forward<float>(kFlash, kCublas, "cublas_attention_f32", c, rng);
}

TEST_F(FlashForward, RateD64) {
    auto rng = test_rng();
    rate(64, false, rng);
}

TEST_F(FlashForward, RateD128) {
    auto rng = test_rng();
    rate(128, false, rng);
}

}  // namespace
