// Checker of 07_attention/flash_wgmma: flash_tc's cases and checks (attention_checks.h) on
// Hopper's path. bf16 inputs (random, rounded to bf16; the references see the same values), T
// around the tile sizes (1, 17, 63, 64, 65, 1000, 4096: a single key, partial K/V tiles, a T that
// is not a multiple of 128 so that the last tile's TMA box runs into the next head's rows; and at
// D 64, 191, 192, 193, 320, 383 around the fast reference's 192-row query tiles), D 64
// and 128, causal and not, B and H not 1, against the double CPU reference (the float32 GPU
// reference of common/ at T = 4096); scores in the hundreds (exp overflows without the row
// maximum); each case run twice (the same bits both times: a stage read before its copies landed,
// or a P tile read before every warp stored it, shows as a race); 65535 heads; one head long
// enough that its T x T scores would not fit in this GPU's memory, even in bf16. Then the FLOP
// rate at B 4, H 16, T 4096, D 64 and 128, causal and not (the judged cases), and at the GPT
// trainer's shape (B 16, H 12, T 1024, D 64, causal: shown, not judged), next to cuDNN's fused
// attention (else cuBLAS's materialized bf16 attention), timed in the same run. Where the file
// defines the optional flash_wgmma_packed (flash_wgmma_packed.h, the GPT trainer's call: the fast
// reference does), the edge shapes and large scores again through it, q, k, v packed as the
// trainer's qkv and O read back from its token-major rows: a head's columns or a sequence's rows
// taken from the wrong place show there.
// Skips where the Hopper path cannot run, with the reason (attention_checks::HopperTest).
#include "attention_checks.h"
#include "course/entry_point.h"
#include "flash_wgmma.h"
#include "flash_wgmma_packed.h"

// Optional: null where the file under test does not define it.
__attribute__((weak)) decltype(flash_wgmma_packed) flash_wgmma_packed;

namespace {

using namespace attention_checks;

// A kernel of this file, whose device code is built with the exercise's flags.
__global__ void build_probe_kernel() {}

class FlashWgmma : public HopperTest<build_probe_kernel> {};

const ForwardRun<std::uint16_t> kFlashWgmma = [](const auto& Q, const auto& K, const auto& V,
                                                 auto& O, auto& L, const Case& c) {
    const auto& s = c.shape;
    flash_wgmma(course::as_bf16(Q), course::as_bf16(K), course::as_bf16(V), course::as_bf16(O),
                L.data(), static_cast<int>(s.batch), static_cast<int>(s.heads),
                static_cast<int>(s.T), static_cast<int>(s.D), c.scale(), c.causal);
};

// cuDNN's fused attention where it runs here, else cuBLAS's materialized attention, in bf16.
const Baselines<std::uint16_t> kBaselines{
    {"cudnn_attention_bf16", baseline_16(course::baseline::cudnn_attention_bf16)},
    {"cublas_attention_bf16", baseline_16(course::baseline::cublas_attention_bf16)}};

TEST_F(FlashWgmma, EdgeShapes) {
    auto rng = test_rng();
    edge_shapes<std::uint16_t>(kFlashWgmma, rng);
}

// T around a query tile of 192 rows (the fast reference's at D 64, not causal: three consumer
// warpgroups of 64 rows), each consumer's rows ending inside the last tile or past it; the
// readable kernel's 128-row tiles see the same T.
TEST_F(FlashWgmma, QueryTileEdges) {
    auto rng = test_rng();
    for (std::size_t T : {191, 192, 193, 320, 383})
        for (bool causal : {false, true})
            check_forward<std::uint16_t>(kFlashWgmma, Case{{2, 2, T, 64}, causal}, rng);
}

TEST_F(FlashWgmma, LongSequence) {
    auto rng = test_rng();
    long_sequence<std::uint16_t>(kFlashWgmma, rng);
}

TEST_F(FlashWgmma, LargeScores) {
    auto rng = test_rng();
    large_scores<std::uint16_t>(kFlashWgmma, rng);
}

TEST_F(FlashWgmma, MostHeads) {
    auto rng = test_rng();
    most_heads<std::uint16_t>(kFlashWgmma, rng);
}

// One head whose T x T scores would not fit in this GPU's memory even in bf16 (T about 200000 on
// an 80 GB GPU): a kernel that keeps them in a scratch buffer cannot allocate it. Causal, for
// half the work.
TEST_F(FlashWgmma, NoScoresBuffer) {
    ATTENTION_SKIP_UNDER_SANITIZER("one head of T ~ 200k");
    auto rng = test_rng();
    no_scores_buffer<std::uint16_t>(kFlashWgmma, true, rng);
}

void rate(const Case& c, course::Rng& rng) {
    COURSE_REQUIRE_MEMORY(2 * scores_bytes(c) + timed_forward_bytes(c));
    time_forward<std::uint16_t>(kFlashWgmma, kBaselines, c, rng);
}

TEST_F(FlashWgmma, RateD64) {
    auto rng = test_rng();
    rate(timed_case(64, false), rng);
}
TEST_F(FlashWgmma, RateD64Causal) {
    auto rng = test_rng();
    rate(timed_case(64, true), rng);
}
TEST_F(FlashWgmma, RateD128) {
    auto rng = test_rng();
    rate(timed_case(128, false), rng);
}
TEST_F(FlashWgmma, RateD128Causal) {
    auto rng = test_rng();
    rate(timed_case(128, true), rng);
}

// The GPT trainer's attention (GPT-2 124M at its batch: 12 heads of 64, T 1024, causal): short
// rows, so a tile of 128 queries visits 1 to 8 key tiles, and what a kernel does once per query
// tile (its barriers, the Q tile's and first K/V tile's latency, the output's stores) weighs more
// than at T 4096. Shown beside the judged cases (module.toml's case_targets leave it out).
TEST_F(FlashWgmma, RateTrainerShape) {
    auto rng = test_rng();
    rate(Case{{16, 12, 1024, 64}, true}, rng);
}

// ---- flash_wgmma_packed (flash_wgmma_packed.h), the trainer's layouts, where the file has it ----
//
// The case's Q, K, V ([B][H][T][D]) packed into the trainer's qkv ([B][T][3][H][D]) on the host,
// the kernel's token-major O ([B][T][H][D]) put back into O's layout for the same checks.
const ForwardRun<std::uint16_t> kPacked = [](const auto& Q, const auto& K, const auto& V, auto& O,
                                             auto& L, const Case& c) {
    const std::size_t B = c.shape.batch, H = c.shape.heads, T = c.shape.T, D = c.shape.D;
    const std::vector<std::uint16_t> tensors[3] = {Q.download(), K.download(), V.download()};
    std::vector<std::uint16_t> qkv(3 * tensors[0].size()), heads(tensors[0].size());
    // Element (b, h, t, d) of the contract's layout, and of the trainer's (of its q, k or v).
    const auto contract = [&](std::size_t b, std::size_t h, std::size_t t) {
        return ((b * H + h) * T + t) * D;
    };
    const auto trainer = [&](std::size_t b, std::size_t h, std::size_t t, std::size_t which) {
        return ((b * T + t) * 3 + which) * H * D + h * D;
    };
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t t = 0; t < T; ++t)
                for (std::size_t which = 0; which < 3; ++which)
                    std::copy_n(tensors[which].begin() + contract(b, h, t), D,
                                qkv.begin() + trainer(b, h, t, which));
    const course::DeviceBuffer<std::uint16_t> packed("qkv", qkv);
    course::DeviceBuffer<std::uint16_t> out("O (token-major)", heads.size());
    flash_wgmma_packed(course::as_bf16(packed), course::as_bf16(out), L.data(), static_cast<int>(B),
                       static_cast<int>(H), static_cast<int>(T), static_cast<int>(D), c.scale(),
                       c.causal);
    const std::vector<std::uint16_t> o = out.download();
    // O's row (b, t) of the trainer's is H heads of D side by side.
    for (std::size_t b = 0; b < B; ++b)
        for (std::size_t h = 0; h < H; ++h)
            for (std::size_t t = 0; t < T; ++t)
                std::copy_n(o.begin() + (b * T + t) * H * D + h * D, D,
                            heads.begin() + contract(b, h, t));
    O.upload(heads);
};

TEST_F(FlashWgmma, PackedEdgeShapes) {
    COURSE_REQUIRE_ENTRY_POINT(flash_wgmma_packed);
    auto rng = test_rng();
    edge_shapes<std::uint16_t>(kPacked, rng);
}

TEST_F(FlashWgmma, PackedLargeScores) {
    COURSE_REQUIRE_ENTRY_POINT(flash_wgmma_packed);
    auto rng = test_rng();
    large_scores<std::uint16_t>(kPacked, rng);
}

}  // namespace
