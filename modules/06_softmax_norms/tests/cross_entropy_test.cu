// Checker of 06_softmax_norms/cross_entropy: vocabulary sizes around a warp, the float4 width and
// the block, targets at both ends of the row, extreme rows (logits up to +-1e4, one huge logit in
// the last column, equal logits, a masked (-inf) tail), then the bandwidth at 16384 x 4096 and
// 4096 x 50304 against a device-to-device copy, then more than 2^31 elements.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/norms.h"
#include "course/testing.h"
#include "cross_entropy.h"

namespace {

class CrossEntropy : public course::GpuTest {};

enum class Rows { kRandom, kLargeLogits, kHugeLogitAtEnd, kEqualLogits, kMaskedTail };

std::string describe(Rows kind) {
    switch (kind) {
        case Rows::kRandom:
            return "random logits";
        case Rows::kLargeLogits:
            return "logits up to +-1e4";
        case Rows::kHugeLogitAtEnd:
            return "one huge logit (1e4) in the last column";
        case Rows::kEqualLogits:
            return "rows of equal logits";
        case Rows::kMaskedTail:
            return "the last 40% of the classes masked (-inf)";
    }
    return "";
}

// How many classes at the end of each row are masked (-inf).
int masked_classes(Rows kind, int vocab) { return kind == Rows::kMaskedTail ? vocab * 2 / 5 : 0; }

struct Inputs {
    std::vector<float> logits;
    std::vector<int> targets;
};

Inputs make_inputs(Rows kind, int rows, int vocab, course::Rng& rng) {
    Inputs in;
    in.logits.reserve(std::size_t(rows) * vocab);
    const int live = vocab - masked_classes(kind, vocab);
    for (int r = 0; r < rows; ++r) {
        const float level = rng.uniform(-5.0f, 5.0f);  // each row its own offset
        for (int c = 0; c < vocab; ++c) {
            switch (kind) {
                case Rows::kRandom:
                    in.logits.push_back(level + rng.uniform(-8.0f, 8.0f));
                    break;
                case Rows::kLargeLogits:
                    in.logits.push_back(rng.uniform(-1e4f, 1e4f));
                    break;
                // Without the maximum subtracted, expf(1e4) is inf; and a kernel whose first
                // pass skips the last column misses the logit that decides the whole row.
                case Rows::kHugeLogitAtEnd:
                    in.logits.push_back(c == vocab - 1 ? 1e4f : rng.uniform(-8.0f, 8.0f));
                    break;
                case Rows::kEqualLogits:
                    in.logits.push_back(level);
                    break;
                case Rows::kMaskedTail:
                    in.logits.push_back(c < live ? level + rng.uniform(-8.0f, 8.0f) : -INFINITY);
                    break;
            }
        }
        // Targets at both ends of the row (the first and the last live class), then anywhere.
        const int target = r % 3 == 0   ? 0
                           : r % 3 == 1 ? live - 1
                                        : int(rng.uniform_int(0, live - 1));
        in.targets.push_back(target);
    }
    return in;
}

struct Tolerances {
    course::Tolerance losses, dlogits;
};

// Tolerances from the row length (u = 2^-24, float32's unit roundoff):
//  S = sum exp(x - max) has vocab positive terms: relative error 8u * sqrt(vocab)
//      (Tolerance::float32(vocab).rtol). Each term also carries expf's error (2 ulps, 4u) and the
//      rounding of its argument x - max, u * |x - max|, which the sum weighs by the term's
//      probability p: sum p * |x - max| <= log(vocab) (it is at most the softmax's entropy). So
//      rel_S = 8u * sqrt(vocab) + 4u * (1 + log(vocab)).
//  loss = (max - x[target]) + log(S): log turns rel_S into an absolute error, and the subtraction
//      and the addition round at the scale of the logits: atol rel_S + 4u * (max|x| + log(vocab)).
//  dlogit = (p - onehot) / rows with p = exp(x - max) / S: p has relative error rel_p = rel_S + 8u
//      (expf, 1/S, 1/rows and the products), and so has a dlogit away from the target. At the
//      target, p - 1 cancels: its error is still rel_p * p, which can be far more than rel_p
//      times the small |p - 1| (a target with p = 0.996 was seen off by 2.6u in p). So atol
//      (rel_p + 2u) / rows: p's error at p <= 1, plus p - 1 rounding at 1's scale and the
//      argument's rounding, p * u * |x - max| <= u / e.
// One dropped class changes a random row's loss by its probability, ~1/vocab: the huge-logit
// rows are there to catch a skipped tail.
Tolerances tolerances(const std::vector<float>& logits, int rows, int vocab) {
    constexpr double u = 0x1.0p-24;
    double max_logit = 0.0;
    for (float x : logits)
        if (std::isfinite(x)) max_logit = std::max(max_logit, std::fabs(double(x)));
    const double log_vocab = std::log(double(vocab));
    const double sum_rtol = course::Tolerance::float32(vocab).rtol + 4 * u * (1 + log_vocab);
    return {{sum_rtol + 4 * u * (max_logit + log_vocab), 4 * u},
            {(sum_rtol + 10 * u) / rows, sum_rtol + 8 * u}};
}

struct Outputs {
    course::DeviceBuffer<float> losses, dlogits;
};

void expect_matches_reference(Outputs& out, const Inputs& in, int rows, int vocab) {
    const auto want = course::reference::cross_entropy(in.logits, in.targets, rows, vocab);
    const auto tol = tolerances(in.logits, rows, vocab);
    EXPECT_TRUE(course::expect_close(out.losses.download(), want.losses, tol.losses, {"losses"}));
    EXPECT_TRUE(
        course::expect_close(out.dlogits.download(), want.dlogits, tol.dlogits,
                             {"dlogits", course::Matrix{std::size_t(rows), std::size_t(vocab)}}));
}

void check_case(Rows kind, int rows, int vocab, course::Rng& rng) {
    SCOPED_TRACE(describe(kind) + ", " + std::to_string(rows) + " x " + std::to_string(vocab));
    const auto in = make_inputs(kind, rows, vocab, rng);
    course::DeviceBuffer<float> d_logits("logits", in.logits);
    course::DeviceBuffer<int> d_targets("targets", in.targets);
    Outputs out{{"losses", std::size_t(rows)}, {"dlogits", in.logits.size()}};

    cross_entropy(d_logits.data(), d_targets.data(), out.losses.data(), out.dlogits.data(), rows,
                  vocab);

    expect_matches_reference(out, in, rows, vocab);
}

TEST_F(CrossEntropy, VocabularySizes) {
    auto rng = test_rng();
    // 1: a single class (loss 0, gradient 0); 7, 31, 33: not a multiple of 4 (scalar path) or of a
    // warp; 32, 1024: exactly a warp / a block of float4s; 1023, 4097: one short of / past them;
    // 1000: a multiple of 4 but not of 32 * 4; 32768, 50304 (GPT-2's padded vocabulary): long rows,
    // split over a cluster of blocks on Hopper; 50001: long and odd (scalar path, uneven slices);
    // 70001: a cluster of three on Hopper, more than one block's shared memory before it; 204803:
    // more than a cluster holds (the logits are read twice).
    for (int vocab :
         {1, 7, 31, 32, 33, 1000, 1023, 1024, 4097, 32768, 50304, 50001, 70001, 204803}) {
        const int rows = vocab <= 33 ? 37 : vocab <= 4097 ? 11 : 5;
        check_case(Rows::kRandom, rows, vocab, rng);
    }
}

TEST_F(CrossEntropy, ManyRows) {
    COURSE_SKIP_ON_EMULATOR("2^20 rows");
    auto rng = test_rng();
    // 2^20 rows of 3 classes: more than the 65535 blocks a grid holds along y (a block per row
    // there fails); the case past 2^31 elements below has 42692 rows.
    check_case(Rows::kRandom, 1 << 20, 3, rng);
}

TEST_F(CrossEntropy, ExtremeRows) {
    auto rng = test_rng();
    for (Rows kind :
         {Rows::kLargeLogits, Rows::kHugeLogitAtEnd, Rows::kEqualLogits, Rows::kMaskedTail})
        for (int vocab : {33, 1000, 4097, 50304}) check_case(kind, 5, vocab, rng);
}

void time_case(int rows, int vocab, course::Rng& rng) {
    const std::size_t n = std::size_t(rows) * vocab;
    // logits, dlogits, the copy's destination and the harness's two copies of dlogits, plus room
    // for the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(float) + (256u << 20));
    const auto in = make_inputs(Rows::kRandom, rows, vocab, rng);
    course::DeviceBuffer<float> d_logits("logits", in.logits), d_copy("copy", n);
    course::DeviceBuffer<int> d_targets("targets", in.targets);
    Outputs out{{"losses", std::size_t(rows)}, {"dlogits", n}};
    const auto tol = tolerances(in.logits, rows, vocab);

    const auto timing = course::time_against(
        [&] {
            cross_entropy(d_logits.data(), d_targets.data(), out.losses.data(), out.dlogits.data(),
                          rows, vocab);
        },
        [&] { course::baseline::device_copy(d_copy.data(), d_logits.data(), n * sizeof(float)); },
        {course::TimedOutput(out.losses, tol.losses),
         course::TimedOutput(out.dlogits, tol.dlogits)},
        {course::TimedInput(d_logits)});

    {
        SCOPED_TRACE("the timed run, " + std::to_string(rows) + " x " + std::to_string(vocab));
        expect_matches_reference(out, in, rows, vocab);
    }
    // Bytes that must move: read the logits once and write dlogits once (4 bytes each per
    // element), read the targets and write the losses (4 bytes each per row). The first pass
    // reads the row from device memory; the second pass's read hits the caches and is not
    // counted. The copy reads and writes 4 bytes per element.
    const double bytes = 2.0 * 4 * n + 2.0 * 4 * rows;
    course::record_bandwidth(std::to_string(rows) + "x" + std::to_string(vocab), timing, bytes,
                             "copy", 2.0 * 4 * n);
}

// 16384 x 4096: rows of 16 KB; logits and dlogits 256 MiB each.
TEST_F(CrossEntropy, Bandwidth16384x4096) {
    auto rng = test_rng();
    time_case(16384, 4096, rng);
}

// 4096 x 50304: GPT-2's vocabulary (B * T = 4096 tokens); logits and dlogits 786 MiB each.
TEST_F(CrossEntropy, Bandwidth4096x50304) {
    auto rng = test_rng();
    time_case(4096, 50304, rng);
}

TEST_F(CrossEntropy, MoreThan2To31Elements) {
    // 42692 rows of GPT-2's 50304 classes: rows * vocab = 2147578368, past 2^31, where a row
    // offset row * vocab held in an int overflows (8.6 GB each for logits and dlogits). The
    // logits are made on the device; whole rows around element 2^31 and at the ends are compared
    // with the reference, which the host computes for those rows only.
    const int rows = 42692, vocab = 50304;
    const std::size_t n = std::size_t(rows) * vocab;
    COURSE_LARGE_CASE(2 * n * sizeof(float) + (64u << 20));
    SCOPED_TRACE("42692 x 50304 (rows x vocab = 2^31 + 94720), logits made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    std::vector<int> targets(rows);
    for (int& target : targets) target = static_cast<int>(rng.uniform_int(0, vocab - 1));
    course::DeviceBuffer<float> d_logits("logits", n);
    course::DeviceBuffer<int> d_targets("targets", targets);
    course::fill_uniform(d_logits.data(), n, seed, -8.0f, 8.0f);
    Outputs out{{"losses", std::size_t(rows)}, {"dlogits", n}};

    course::run_large_case([&] {
        cross_entropy(d_logits.data(), d_targets.data(), out.losses.data(), out.dlogits.data(),
                      rows, vocab);
    });

    // The compared rows as one small batch (a window holds one or more whole rows), logits
    // recomputed from the hashed formula. Its reference divides dlogits by the batch's rows:
    // scaled to the whole matrix's.
    const auto windows = course::rows_past_int_range(rows, vocab, rng);
    Inputs sample;
    std::vector<course::Window> loss_windows;
    for (const auto& w : windows) {
        for (std::size_t i = w.first; i < w.first + w.count; ++i)
            sample.logits.push_back(course::hashed::uniform(i, seed, -8.0f, 8.0f));
        for (std::size_t r = w.first / vocab; r < (w.first + w.count) / vocab; ++r)
            sample.targets.push_back(targets[r]);
        loss_windows.push_back({w.first / vocab, w.count / vocab});
    }
    const int sampled = static_cast<int>(sample.targets.size());
    auto want = course::reference::cross_entropy(sample.logits, sample.targets, sampled, vocab);
    for (double& d : want.dlogits) d *= double(sampled) / rows;
    const auto tol = tolerances(sample.logits, rows, vocab);
    EXPECT_TRUE(course::expect_windows_close(
        out.losses, loss_windows, course::consecutive_slices(want.losses), tol.losses, {"losses"}));
    EXPECT_TRUE(course::expect_windows_close(out.dlogits, windows,
                                             course::consecutive_slices(want.dlogits), tol.dlogits,
                                             {"dlogits (flat index row * vocab + c)"}));
}

}  // namespace
