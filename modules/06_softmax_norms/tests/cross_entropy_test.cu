// Checker of 06_softmax_norms/cross_entropy: vocabulary sizes around a warp, the float4 width and
// the block, targets at both ends of the row, extreme rows (logits up to +-1e4, one huge logit in
// the last column, equal logits, a masked (-inf) tail), then the bandwidth at 16384 x 4096 and
// 4096 x 50304 against a device-to-device copy; then the optional bf16 entry point
// (cross_entropy_bf16.h), where the file defines it: vocabularies and padded rows around the
// 16-byte pack, padding that would dominate the row if it were read as classes, the gradient in
// place and none at all, views one element off a 16-byte boundary, and its bandwidth on the
// trainer's chunk of GPT-2's logits (1334 x 50304: its limit of 2^26 values); then more than 2^31
// elements.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "course/baselines.h"
#include "course/entry_point.h"
#include "course/reference/norms.h"
#include "course/testing.h"
#include "course/view.h"
#include "cross_entropy.h"
#include "cross_entropy_bf16.h"

// Weak: a file without the optional entry point still links (course/entry_point.h).
__attribute__((weak)) decltype(cross_entropy_bf16) cross_entropy_bf16;

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

// ---- cross_entropy_bf16 (cross_entropy_bf16.h), the trainer's bf16 logits ----
//
// Rows of `stride` bf16 values, the first `vocab` the classes' logits (drawn as make_inputs draws
// them, rounded to bf16), the rest padding that holds kPadding: a logit that would take nearly all
// of a row's probability if the padding were read as classes. The reference is the float one on
// the classes alone; its dlogits (of the mean loss: / rows) times rows * scale, 0 in the padding,
// rounded to bf16 once more (course::kBf16Roundoff).

using bf16 = __nv_bfloat16;

constexpr float kPadding = 40.0f;

struct Bf16Case {
    Rows kind;
    int rows, vocab, stride;
    float scale = 1.0f / 1024;
    enum class Gradient { kSeparate, kInPlace, kNone } gradient = Gradient::kSeparate;
    int logits_offset = 0, dlogits_offset = 0;  // elements past a 16-byte boundary

    std::string describe() const {
        std::string text = "cross_entropy_bf16, " + ::describe(kind) + ", " + std::to_string(rows) +
                           " rows of " + std::to_string(vocab) + " classes in " +
                           std::to_string(stride) + " values";
        if (gradient == Gradient::kInPlace) text += ", dlogits over the logits (in place)";
        if (gradient == Gradient::kNone) text += ", no dlogits (losses only)";
        if (logits_offset + dlogits_offset > 0)
            text += ", views starting (logits, dlogits) " + std::to_string(logits_offset) + ", " +
                    std::to_string(dlogits_offset) + " elements past a 16-byte boundary";
        return text;
    }
};

// The classes' logits, rounded to bf16, and the rows as stored: padded to `stride`.
struct Bf16Inputs {
    Inputs classes;
    std::vector<float> padded;
};

Bf16Inputs make_bf16_inputs(const Bf16Case& c, course::Rng& rng) {
    Bf16Inputs in{make_inputs(c.kind, c.rows, c.vocab, rng), {}};
    for (float& x : in.classes.logits) x = course::round_to_bf16(x);
    for (int r = 0; r < c.rows; ++r) {
        const auto row = in.classes.logits.begin() + std::ptrdiff_t(r) * c.vocab;
        in.padded.insert(in.padded.end(), row, row + c.vocab);
        in.padded.insert(in.padded.end(), c.stride - c.vocab, kPadding);
    }
    return in;
}

struct Bf16Expected {
    std::vector<double> losses, dlogits;  // dlogits: rows x stride, 0 in the padding
    Tolerances tol;
};

Bf16Expected bf16_expected(const Bf16Case& c, const Bf16Inputs& in) {
    const auto want =
        course::reference::cross_entropy(in.classes.logits, in.classes.targets, c.rows, c.vocab);
    Bf16Expected e{std::vector<double>(want.losses.begin(), want.losses.end()),
                   std::vector<double>(std::size_t(c.rows) * c.stride, 0.0),
                   tolerances(in.classes.logits, c.rows, c.vocab)};
    const double factor = double(c.rows) * c.scale;
    for (int r = 0; r < c.rows; ++r)
        for (int k = 0; k < c.vocab; ++k)
            e.dlogits[std::size_t(r) * c.stride + k] =
                want.dlogits[std::size_t(r) * c.vocab + k] * factor;
    e.tol.dlogits.atol *= std::fabs(factor);
    e.tol.dlogits.rtol += course::kBf16Roundoff;
    return e;
}

// What wrong dlogits show: the padding read as classes (the row's probability gone to it).
std::string padding_diagnosis(const Bf16Case& c, const std::vector<float>& got,
                              const Bf16Expected& e) {
    if (c.stride == c.vocab) return "";
    std::size_t padding_wrong = 0, classes_wrong = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const bool padding = int(i % c.stride) >= c.vocab;
        if (!e.tol.dlogits.accepts(got[i], e.dlogits[i]))
            ++(padding ? padding_wrong : classes_wrong);
    }
    if (padding_wrong > 0)
        return "the padding columns (vocab .. stride - 1) hold a gradient: they are not classes, "
               "their dlogits are 0";
    return "";
}

void check_bf16_case(const Bf16Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    const auto in = make_bf16_inputs(c, rng);
    const std::size_t n = in.padded.size();
    course::View<bf16> logits("logits", in.padded, c.logits_offset);
    std::optional<course::View<bf16>> dlogits;
    if (c.gradient == Bf16Case::Gradient::kSeparate)
        dlogits.emplace("dlogits", n, c.dlogits_offset);
    course::DeviceBuffer<int> targets("targets", in.classes.targets);
    course::DeviceBuffer<float> losses("losses", c.rows);
    bf16* gradient = dlogits                                      ? dlogits->data()
                     : c.gradient == Bf16Case::Gradient::kInPlace ? logits.data()
                                                                  : nullptr;

    cross_entropy_bf16(logits.data(), targets.data(), losses.data(), gradient, c.scale, c.rows,
                       c.vocab, c.stride);

    const auto e = bf16_expected(c, in);
    course::CompareOptions loss_options{"losses"};
    loss_options.diagnose = [&] {
        return c.stride > c.vocab ? "if every loss is off: are the padding columns (vocab .. "
                                    "stride - 1) counted as classes in the logsumexp?"
                                  : "";
    };
    EXPECT_TRUE(course::expect_close(losses.download(), e.losses, e.tol.losses, loss_options));
    if (c.gradient == Bf16Case::Gradient::kNone) {
        // The logits are unchanged: nothing was written where no gradient was asked for.
        EXPECT_TRUE(course::expect_close(logits.values(),
                                         std::vector<double>(in.padded.begin(), in.padded.end()),
                                         course::Tolerance::exact(), {"logits"}));
        return;
    }
    const auto got = dlogits ? dlogits->values() : logits.values();
    course::CompareOptions options{"dlogits",
                                   course::Matrix{std::size_t(c.rows), std::size_t(c.stride)}};
    options.diagnose = [&] { return padding_diagnosis(c, got, e); };
    EXPECT_TRUE(course::expect_close(got, e.dlogits, e.tol.dlogits, options));
    if (dlogits) EXPECT_TRUE(dlogits->front_untouched());
}

TEST_F(CrossEntropy, Bf16Vocabularies) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(cross_entropy_bf16);
    auto rng = test_rng();
    // (vocab, stride): 1 class; 7 in 8 (the pack's last value padding); 8 in 8; 9 in 16 (a pack
    // of one class and seven of padding); 33 in 40; 1000 unpadded; 1000 in 1008; 4097 in 4104;
    // GPT-2's 50257 in 50304 (the trainer's); 50001 unpadded and odd (one value at a time).
    for (const auto& [vocab, stride] :
         {std::pair{1, 1}, std::pair{7, 8}, std::pair{8, 8}, std::pair{9, 16}, std::pair{33, 40},
          std::pair{1000, 1000}, std::pair{1000, 1008}, std::pair{4097, 4104},
          std::pair{50257, 50304}, std::pair{50001, 50001}}) {
        const int rows = stride <= 40 ? 37 : stride <= 4104 ? 11 : 5;
        check_bf16_case({Rows::kRandom, rows, vocab, stride}, rng);
    }
}

TEST_F(CrossEntropy, Bf16ExtremeRows) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(cross_entropy_bf16);
    auto rng = test_rng();
    for (Rows kind : {Rows::kLargeLogits, Rows::kHugeLogitAtEnd, Rows::kEqualLogits})
        for (const auto& [vocab, stride] :
             {std::pair{33, 40}, std::pair{4097, 4104}, std::pair{50257, 50304}})
            check_bf16_case({kind, 5, vocab, stride}, rng);
}

TEST_F(CrossEntropy, Bf16InPlaceAndLossesOnly) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(cross_entropy_bf16);
    auto rng = test_rng();
    // The trainer's calls: the gradient written over the logits (training), and the losses alone
    // (validation), on its padded rows and on a short odd one; a negative scale too.
    for (const auto& [vocab, stride] : {std::pair{50257, 50304}, std::pair{33, 33}}) {
        Bf16Case c{Rows::kRandom, 5, vocab, stride, -1.0f / 4096};
        c.gradient = Bf16Case::Gradient::kInPlace;
        check_bf16_case(c, rng);
        c.gradient = Bf16Case::Gradient::kNone;
        check_bf16_case(c, rng);
    }
}

TEST_F(CrossEntropy, Bf16ViewsOffA16ByteBoundary) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(cross_entropy_bf16);
    auto rng = test_rng();
    // The logits, then dlogits, one element (2 bytes) off: the 16-byte path must be chosen from
    // both pointers' alignment; then both, and in place.
    for (const auto& [logits_offset, dlogits_offset] :
         {std::pair{1, 0}, std::pair{0, 1}, std::pair{1, 1}}) {
        Bf16Case c{Rows::kRandom, 7, 1000, 1008};
        c.logits_offset = logits_offset;
        c.dlogits_offset = dlogits_offset;
        check_bf16_case(c, rng);
    }
    Bf16Case in_place{Rows::kRandom, 7, 1000, 1008};
    in_place.gradient = Bf16Case::Gradient::kInPlace;
    in_place.logits_offset = 1;
    check_bf16_case(in_place, rng);
}

// The trainer's chunk of GPT-2's logits: 1334 rows of 50304 (50257 classes), 2^26 values less
// 3328, the contract's limit; the gradient into its own buffer, so that every timed call's can be
// poisoned and checked (the trainer's call in place moves the same bytes).
TEST_F(CrossEntropy, Bf16BandwidthTrainerChunk) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(cross_entropy_bf16);
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const Bf16Case c{Rows::kRandom, 1334, 50257, 50304, 1.0f / 16384};
    const std::size_t n = std::size_t(c.rows) * c.stride;
    // logits, dlogits, the copy's destination and the harness's two copies of dlogits (2 bytes
    // each), plus room for the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(5 * n * 2 + (256u << 20));
    auto rng = test_rng();
    const auto in = make_bf16_inputs(c, rng);
    course::View<bf16> logits("logits", in.padded, 0), dlogits("dlogits", n, 0);
    course::DeviceBuffer<int> targets("targets", in.classes.targets);
    course::DeviceBuffer<float> losses("losses", c.rows);
    course::DeviceBuffer<std::uint16_t> d_copy("copy", n);
    const auto e = bf16_expected(c, in);

    const auto timing = course::time_against(
        [&] {
            cross_entropy_bf16(logits.data(), targets.data(), losses.data(), dlogits.data(),
                               c.scale, c.rows, c.vocab, c.stride);
        },
        [&] { course::baseline::device_copy(d_copy.data(), logits.buffer().data(), n * 2); },
        {course::TimedOutput(losses, e.tol.losses), course::TimedOutput(dlogits.buffer())},
        {course::sign_flipped(logits.buffer())});

    {
        SCOPED_TRACE("the timed run, " + c.describe());
        EXPECT_TRUE(course::expect_close(losses.download(), e.losses, e.tol.losses, {"losses"}));
        EXPECT_TRUE(course::expect_close(
            dlogits.values(), e.dlogits, e.tol.dlogits,
            {"dlogits", course::Matrix{std::size_t(c.rows), std::size_t(c.stride)}}));
    }
    // Read the logits and write dlogits (2 bytes each per value; the second read of a row hits
    // the caches), read the targets and write the losses. The copy reads and writes 2 bytes per
    // value. Shown, not judged.
    const double bytes = 2.0 * 2 * n + 2.0 * 4 * c.rows;
    course::record_bandwidth("1334x50304 bf16", timing, bytes, "copy", 2.0 * 2 * n);
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
