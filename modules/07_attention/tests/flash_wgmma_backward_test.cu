// Checker of 07_attention/flash_wgmma_backward: flash_backward's cases and checks
// (backward_checks.h) on Hopper's path. bf16 Q, K, V, dO (random, rounded to bf16), O and L from
// the reference forward (O rounded likewise), T around the tile sizes (1, 17, 63, 64, 65, 1000,
// 4096: a single key, partial Q/dO and K/V tiles whose TMA boxes run into the next head's rows),
// D 64 and 128, causal and not, B and H not 1: dQ, dK and dV against the double CPU reference
// backward (the float32 GPU reference of common/ at T = 4096). Each case runs twice: dK and dV
// must come out with the same bits (a stage read before its copies landed, or a P^T or dS^T tile
// read before every warp stored it, shows as a race; dQ may differ: atomics add in any order).
// 65535 heads (more work items than a persistent grid has blocks: an item done twice or never,
// or a counter of items left stale by the call before, shows there); scores of tens; one head long
// enough that its T x T scores would not fit in this GPU's memory, even in bf16, sampled rows
// checked. Then the FLOP rate at B 4, H 16, T 4096, D 64 and 128, causal and not (the judged
// cases), and at the GPT trainer's shape (B 16, H 12, T 1024, D 64, causal: shown, not judged),
// next to cuDNN's fused backward (else cuBLAS's materialized one), in bf16, timed in the same run.
// Where the file defines the optional flash_wgmma_backward_packed (flash_wgmma_packed.h, the GPT
// trainer's call: the fast reference does), the edge shapes and large scores again through it, q,
// k, v packed as the trainer's qkv and O, dO token-major, the gradient read back from the
// trainer's dqkv (bf16): a head's columns or a sequence's rows read or written in the wrong place
// show there.
// Skips where the Hopper path cannot run, with the reason (attention_checks::HopperTest).
#include "backward_checks.h"
#include "course/entry_point.h"
#include "flash_wgmma_backward.h"
#include "flash_wgmma_packed.h"

// Optional: null where the file under test does not define it.
__attribute__((weak)) decltype(flash_wgmma_backward_packed) flash_wgmma_backward_packed;

namespace {

using namespace attention_checks;

// A kernel of this file, whose device code is built with the exercise's flags.
__global__ void build_probe_kernel() {}

class FlashWgmmaBackward : public HopperTest<build_probe_kernel> {};

const BackwardRun kFlashWgmmaBackward = [](const BackwardProblem& p, F32& dQ, F32& dK, F32& dV) {
    const auto& s = p.c.shape;
    flash_wgmma_backward(course::as_bf16(p.dQ_in), course::as_bf16(p.dK_in),
                         course::as_bf16(p.dV_in), course::as_bf16(p.d_O), course::as_bf16(p.d_dO),
                         p.d_L.data(), dQ.data(), dK.data(), dV.data(), static_cast<int>(s.batch),
                         static_cast<int>(s.heads), static_cast<int>(s.T), static_cast<int>(s.D),
                         p.c.scale(), p.c.causal);
};

TEST_F(FlashWgmmaBackward, EdgeShapes) {
    auto rng = test_rng();
    backward_edge_shapes(kFlashWgmmaBackward, rng);
}

TEST_F(FlashWgmmaBackward, LongSequence) {
    auto rng = test_rng();
    backward_long_sequence(kFlashWgmmaBackward, rng);
}

TEST_F(FlashWgmmaBackward, MostHeads) {
    auto rng = test_rng();
    backward_most_heads(kFlashWgmmaBackward, rng);
}

TEST_F(FlashWgmmaBackward, LargeScores) {
    auto rng = test_rng();
    backward_large_scores(kFlashWgmmaBackward, rng);
}

// One head whose T x T scores would not fit in this GPU's memory even in bf16 (T about 200000
// on an 80 GB GPU): a kernel that keeps P or dS in a scratch buffer cannot allocate it.
TEST_F(FlashWgmmaBackward, NoScoresBuffer) {
    ATTENTION_SKIP_UNDER_SANITIZER("one head of T ~ 200k");
    auto rng = test_rng();
    backward_no_scores_buffer(kFlashWgmmaBackward, rng);
}

TEST_F(FlashWgmmaBackward, RateD64) {
    auto rng = test_rng();
    rate_backward(kFlashWgmmaBackward, timed_case(64, false), rng);
}
TEST_F(FlashWgmmaBackward, RateD64Causal) {
    auto rng = test_rng();
    rate_backward(kFlashWgmmaBackward, timed_case(64, true), rng);
}
TEST_F(FlashWgmmaBackward, RateD128) {
    auto rng = test_rng();
    rate_backward(kFlashWgmmaBackward, timed_case(128, false), rng);
}
TEST_F(FlashWgmmaBackward, RateD128Causal) {
    auto rng = test_rng();
    rate_backward(kFlashWgmmaBackward, timed_case(128, true), rng);
}

// The GPT trainer's attention (GPT-2 124M at its batch: 12 heads of 64, T 1024, causal): a block
// of 128 keys sees 2 to 16 query tiles of 64, 9 on average (33 at T 4096), so what a kernel does
// once per key block (its barriers, the K/V tiles' and first Q/dO tile's latency before any
// product, dK's and dV's stores with the tensor cores idle) weighs nearly four times as much.
// Shown beside the judged cases (module.toml's case_targets leave it out), as flash_wgmma's.
TEST_F(FlashWgmmaBackward, RateTrainerShape) {
    auto rng = test_rng();
    rate_backward(kFlashWgmmaBackward, Case{{16, 12, 1024, 64}, true}, rng);
}

// ---- flash_wgmma_backward_packed (flash_wgmma_packed.h), the trainer's layouts, where defined
// ----
//
// The case's Q, K, V ([B][H][T][D]) packed into the trainer's qkv ([B][T][3][H][D]) on the host,
// O and dO into its token-major [B][T][H][D]; the gradient comes out as the trainer's dqkv (bf16,
// laid out as qkv; NaN before the call, so that an element never written shows), put back into
// the contract's layout in float for the same checks.
const BackwardRun kPacked = [](const BackwardProblem& p, F32& dQ, F32& dK, F32& dV) {
    const auto& s = p.c.shape;
    const std::size_t B = s.batch, H = s.heads, T = s.T, D = s.D;
    const std::vector<std::uint16_t> tensors[5] = {p.dQ_in.download(), p.dK_in.download(),
                                                   p.dV_in.download(), p.d_O.download(),
                                                   p.d_dO.download()};
    std::vector<std::uint16_t> qkv(3 * tensors[0].size()), o(tensors[0].size()),
        d_o(tensors[0].size());
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t t = 0; t < T; ++t) {
                const std::size_t contract = ((b * H + h) * T + t) * D;
                for (std::size_t which = 0; which < 3; ++which)
                    std::copy_n(tensors[which].begin() + contract, D,
                                qkv.begin() + ((b * T + t) * 3 + which) * H * D + h * D);
                std::copy_n(tensors[3].begin() + contract, D,
                            o.begin() + (b * T + t) * H * D + h * D);
                std::copy_n(tensors[4].begin() + contract, D,
                            d_o.begin() + (b * T + t) * H * D + h * D);
            }
    const U16 d_qkv("qkv", qkv), d_O("O (token-major)", o), d_dO("dO (token-major)", d_o);
    constexpr std::uint16_t kBf16NaN = 0x7FC0;
    U16 d_dqkv("dqkv", std::vector<std::uint16_t>(qkv.size(), kBf16NaN));
    F32 dq_sums("dQ's sums", tensors[0].size());
    flash_wgmma_backward_packed(course::as_bf16(d_qkv), course::as_bf16(d_O), course::as_bf16(d_dO),
                                p.d_L.data(), dq_sums.data(), course::as_bf16(d_dqkv),
                                static_cast<int>(B), static_cast<int>(H), static_cast<int>(T),
                                static_cast<int>(D), p.c.scale(), p.c.causal);
    const std::vector<std::uint16_t> dqkv = d_dqkv.download();
    std::vector<float> gradients[3];
    for (auto& g : gradients) g.resize(tensors[0].size());
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t t = 0; t < T; ++t)
                for (std::size_t which = 0; which < 3; ++which)
                    for (std::size_t d = 0; d < D; ++d)
                        gradients[which][((b * H + h) * T + t) * D + d] =
                            course::from_bf16(dqkv[((b * T + t) * 3 + which) * H * D + h * D + d]);
    dQ.upload(gradients[0]);
    dK.upload(gradients[1]);
    dV.upload(gradients[2]);
};

TEST_F(FlashWgmmaBackward, PackedEdgeShapes) {
    COURSE_REQUIRE_ENTRY_POINT(flash_wgmma_backward_packed);
    auto rng = test_rng();
    backward_edge_shapes(kPacked, rng);
}

TEST_F(FlashWgmmaBackward, PackedLargeScores) {
    COURSE_REQUIRE_ENTRY_POINT(flash_wgmma_backward_packed);
    auto rng = test_rng();
    backward_large_scores(kPacked, rng);
}

}  // namespace
