// Checker of 07_attention/flash_tc: 16-bit inputs (random, rounded to bf16, or fp16 in a build for
// sm_75; the references see the same values), T around the tile sizes (1, 17, 63, 64, 65, 1000,
// 4096), D 64 and 128, causal and not, B and H not 1, against the double CPU reference (the float32
// GPU reference of common/ at T = 4096); scores in the hundreds (exp overflows without the row
// maximum); each case run twice (the same bits both times: a missing barrier before a K/V buffer is
// overwritten shows as a race); one head long enough that its T x T scores would not fit in this
// GPU's memory, even in 16 bits. Then the FLOP rate at B 4, H 16, T 4096, D 64 and 128, causal and
// not, next to cuDNN's fused attention (else cuBLAS's materialized attention), in the same element
// type, timed in the same run.
#include "attention_checks.h"
#include "flash_tc.h"

namespace {

using namespace attention_checks;

class FlashTc : public course::GpuTest {};

const ForwardRun<std::uint16_t> kFlashTc = [](const auto& Q, const auto& K, const auto& V, auto& O,
                                              auto& L, const Case& c) {
    const auto& s = c.shape;
    flash_tc(as_tensor(Q), as_tensor(K), as_tensor(V), as_tensor(O), L.data(),
             static_cast<int>(s.batch), static_cast<int>(s.heads), static_cast<int>(s.T),
             static_cast<int>(s.D), c.scale(), c.causal);
};

// cuDNN's fused attention where it runs here, else cuBLAS's materialized attention, in the
// exercise's element type: bf16, or fp16 in a build for sm_75 (the cases then go under the fp16
// names: shown, not judged, the targets being bf16 figures).
const Baselines<std::uint16_t> kBaselines{
    {std::string("cudnn_attention_") + course::kTensorElementName,
     baseline_16(course::kFp16TensorCores ? course::baseline::cudnn_attention_fp16
                                          : course::baseline::cudnn_attention_bf16)},
    {std::string("cublas_attention_") + course::kTensorElementName,
     baseline_16(course::kFp16TensorCores ? course::baseline::cublas_attention_fp16
                                          : course::baseline::cublas_attention_bf16)}};

TEST_F(FlashTc, EdgeShapes) {
    auto rng = test_rng();
    edge_shapes<std::uint16_t>(kFlashTc, rng);
}

TEST_F(FlashTc, LongSequence) {
    COURSE_SKIP_ON_EMULATOR("T = 4096");
    auto rng = test_rng();
    long_sequence<std::uint16_t>(kFlashTc, rng);
}

TEST_F(FlashTc, LargeScores) {
    auto rng = test_rng();
    large_scores<std::uint16_t>(kFlashTc, rng);
}

TEST_F(FlashTc, MostHeads) {
    auto rng = test_rng();
    most_heads<std::uint16_t>(kFlashTc, rng);
}

// One head whose T x T scores would not fit in this GPU's memory even in 16 bits (T about 200000
// on an 80 GB GPU): a kernel that keeps them in a scratch buffer cannot allocate it. Causal, for
// half the work.
TEST_F(FlashTc, NoScoresBuffer) {
    ATTENTION_SKIP_UNDER_SANITIZER("one head of T ~ 200k");
    COURSE_SKIP_ON_EMULATOR("one head whose T x T scores would not fit in memory");
    auto rng = test_rng();
    no_scores_buffer<std::uint16_t>(kFlashTc, true, rng);
}

void rate(std::size_t D, bool causal, course::Rng& rng) {
    const Case c = timed_case(D, causal);
    COURSE_REQUIRE_MEMORY(2 * scores_bytes(c) + timed_forward_bytes(c));
    time_forward<std::uint16_t>(kFlashTc, kBaselines, c, rng);
}

TEST_F(FlashTc, RateD64) {
    auto rng = test_rng();
    rate(64, false, rng);
}
TEST_F(FlashTc, RateD64Causal) {
    auto rng = test_rng();
    rate(64, true, rng);
}
TEST_F(FlashTc, RateD128) {
    auto rng = test_rng();
    rate(128, false, rng);
}
TEST_F(FlashTc, RateD128Causal) {
    auto rng = test_rng();
    rate(128, true, rng);
}

}  // namespace
