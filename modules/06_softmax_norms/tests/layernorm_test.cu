// Checker of 06_softmax_norms/layernorm: row lengths around a warp, the float4 width and the
// block, extreme rows (large values, a large mean, equal values, one outlier in the last column),
// then the bandwidth at 16384 x 4096 and 4096 x 50304 against a device-to-device copy; then the
// optional bf16 entry point (layernorm_bf16.h), where the file defines it: row lengths around the
// 16-byte pack and the registers' share of a row, extreme rows, each view one element off a
// 16-byte boundary, and its bandwidth at GPT-2's 16384 x 768 and at 16384 x 4096 (its limit of
// 2^26 values); then more than 2^31 elements.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/entry_point.h"
#include "course/reference/norms.h"
#include "course/testing.h"
#include "course/view.h"
#include "layernorm.h"
#include "layernorm_bf16.h"

// Weak: a file without the optional entry point still links (course/entry_point.h).
__attribute__((weak)) decltype(layernorm_bf16) layernorm_bf16;

namespace {

class LayerNorm : public course::GpuTest {};

enum class Rows { kRandom, kLargeValues, kLargeMean, kEqualValues, kOutlierAtEnd };

std::string describe(Rows kind) {
    switch (kind) {
        case Rows::kRandom:
            return "random rows";
        case Rows::kLargeValues:
            return "values up to +-1e4";
        case Rows::kLargeMean:
            return "odd rows with mean 1e4, spread +-1; even rows random";
        case Rows::kEqualValues:
            return "rows of equal values (variance 0)";
        case Rows::kOutlierAtEnd:
            return "one outlier (300) in the last column";
    }
    return "";
}

std::vector<float> make_x(Rows kind, int rows, int cols, course::Rng& rng) {
    std::vector<float> x;
    x.reserve(std::size_t(rows) * cols);
    for (int r = 0; r < rows; ++r) {
        const float offset = rng.uniform(-2.0f, 2.0f);  // so that every row has its own mean
        for (int c = 0; c < cols; ++c) {
            switch (kind) {
                case Rows::kRandom:
                    x.push_back(offset + rng.uniform(-1.0f, 1.0f));
                    break;
                case Rows::kLargeValues:
                    x.push_back(rng.uniform(-1e4f, 1e4f));
                    break;
                // Beside random rows, which the same kernel gets right: a wrong variance in the
                // odd rows alone is the mark of E[x^2] - E[x]^2 (cancellation_diagnosis).
                case Rows::kLargeMean:
                    x.push_back((r % 2 ? 1e4f : offset) + rng.uniform(-1.0f, 1.0f));
                    break;
                case Rows::kEqualValues:
                    x.push_back(offset);
                    break;
                // The outlier dominates the row's mean and variance: a kernel whose statistics
                // skip the last column (a tail bug) is far off, which a random row cannot show.
                case Rows::kOutlierAtEnd:
                    x.push_back(c == cols - 1 ? 300.0f : rng.uniform(-1.0f, 1.0f));
                    break;
            }
        }
    }
    return x;
}

struct Tolerances {
    course::Tolerance y, mean, rstd;
};

// Tolerances from the row length and each row's statistics (u = 2^-24, float32's unit roundoff):
//  mean: a sum of cols floats divided by cols, so the harness's tolerance of such a sum,
//        Tolerance::float32(cols, rms(x)), divided by cols: atol 8u * rms(x), rtol 8u * sqrt(cols).
//  rstd: the variance is a sum of cols positive terms (relative error 8u * sqrt(cols)) of
//        deviations from a mean that is itself off by a few u * |mean|; relative to the spread
//        1 / rstd that is u * |mean| * rstd, doubled by the square. rstd's error is half the
//        variance's (the other half is margin), plus rsqrtf's 2 ulps (4u) and the roundings of
//        m2 / cols + eps: rtol 8u * sqrt(cols) + 16u * |mean| * rstd + 8u.
//  y = (x - mean) * rstd * gamma + beta: the mean's error, times rstd * |gamma|; rstd's relative
//        error times |(x - mean) * rstd * gamma| <= |y| + |beta|; and 4 more roundings.
// A bug that drops one column out of thousands moves a random row's statistics by less than
// this: the outlier rows are there to catch it.
Tolerances tolerances(const std::vector<float>& x, const std::vector<float>& gamma,
                      const std::vector<float>& beta,
                      const course::reference::LayerNormForward& want, int rows, int cols) {
    constexpr double u = 0x1.0p-24;
    double max_gamma = 0.0, max_beta = 0.0;
    for (int c = 0; c < cols; ++c) {
        max_gamma = std::max(max_gamma, std::fabs(double(gamma[c])));
        max_beta = std::max(max_beta, std::fabs(double(beta[c])));
    }
    Tolerances tol;
    for (int r = 0; r < rows; ++r) {
        double squares = 0.0;
        for (int c = 0; c < cols; ++c) {
            const double value = x[std::size_t(r) * cols + c];
            squares += value * value;
        }
        const auto sum = course::Tolerance::float32(cols, std::sqrt(squares / cols));
        const double mean_error = sum.atol / cols + sum.rtol * std::fabs(want.mean[r]);
        tol.mean.atol = std::max(tol.mean.atol, sum.atol / cols);
        tol.mean.rtol = sum.rtol;
        tol.rstd.rtol = std::max(
            tol.rstd.rtol, sum.rtol + 16 * u * std::fabs(want.mean[r]) * want.rstd[r] + 8 * u);
        tol.y.atol = std::max(tol.y.atol, want.rstd[r] * max_gamma * mean_error);
    }
    tol.y.rtol = tol.rstd.rtol + 4 * u;
    tol.y.atol += (tol.y.rtol + 4 * u) * max_beta;
    return tol;
}

struct Outputs {
    course::DeviceBuffer<float> y, mean, rstd;
};

// What wrong rows of a kLargeMean case say: when only the rows with a large mean are wrong.
// `per_row`: elements of `got` per row (1 for rstd, cols for y).
std::string cancellation_diagnosis(Rows kind, const std::vector<float>& got,
                                   const std::vector<double>& want, const course::Tolerance& tol,
                                   std::size_t per_row) {
    if (kind != Rows::kLargeMean) return "";
    // The worst relative error of the random (even) and the large-mean (odd) rows: a variance
    // from squares loses a few digits in the random rows too (their means reach 2 next to a
    // spread of 1), and nearly all of them in the large-mean ones.
    bool large_mean_wrong = false;
    double worst[2] = {0.0, 0.0};
    for (std::size_t i = 0; i < got.size(); ++i) {
        const std::size_t odd = i / per_row % 2;
        if (odd && !tol.accepts(got[i], want[i])) large_mean_wrong = true;
        const double error = std::fabs(got[i] - want[i]) / std::max(std::fabs(want[i]), 1e-30);
        worst[odd] =
            std::max(worst[odd], error != error ? std::numeric_limits<double>::infinity() : error);
    }
    if (!large_mean_wrong || !(worst[1] > 100.0 * worst[0])) return "";
    return "only the rows with a large mean next to their spread are wrong (the odd rows: mean "
           "1e4, spread +-1; the even, random rows are right): a variance computed as "
           "E[x^2] - E[x]^2 loses its digits there to catastrophic cancellation (two numbers "
           "near 1e8 subtracted to leave about 0.3). Accumulate deviations from the mean "
           "instead: Welford's updates, or a second pass over x - mean";
}

// The double reference and the tolerances of one case.
struct Expected {
    course::reference::LayerNormForward want;
    Tolerances tol;
};

Expected expected(const std::vector<float>& x, const std::vector<float>& gamma,
                  const std::vector<float>& beta, int rows, int cols) {
    auto want = course::reference::layernorm(x, gamma, beta, rows, cols, kLayerNormEps);
    const auto tol = tolerances(x, gamma, beta, want, rows, cols);
    return {std::move(want), tol};
}

void expect_matches_reference(Outputs& out, const Expected& e, int rows, int cols,
                              Rows kind = Rows::kRandom) {
    EXPECT_TRUE(course::expect_close(out.mean.download(), e.want.mean, e.tol.mean, {"mean"}));
    const auto rstd = out.rstd.download();
    course::CompareOptions rstd_options{"rstd"};
    rstd_options.diagnose = [&] {
        return cancellation_diagnosis(kind, rstd, e.want.rstd, e.tol.rstd, 1);
    };
    EXPECT_TRUE(course::expect_close(rstd, e.want.rstd, e.tol.rstd, rstd_options));
    const auto y = out.y.download();
    course::CompareOptions y_options{"y", course::Matrix{std::size_t(rows), std::size_t(cols)}};
    y_options.diagnose = [&] {
        return cancellation_diagnosis(kind, y, e.want.y, e.tol.y, std::size_t(cols));
    };
    EXPECT_TRUE(course::expect_close(y, e.want.y, e.tol.y, y_options));
}

void check_case(Rows kind, int rows, int cols, course::Rng& rng) {
    SCOPED_TRACE(describe(kind) + ", " + std::to_string(rows) + " x " + std::to_string(cols));
    const auto x = make_x(kind, rows, cols, rng);
    const auto gamma = course::random_floats(cols, 0.5f, 1.5f, rng);
    const auto beta = course::random_floats(cols, -0.5f, 0.5f, rng);
    course::DeviceBuffer<float> d_x("x", x), d_gamma("gamma", gamma), d_beta("beta", beta);
    Outputs out{{"y", x.size()}, {"mean", std::size_t(rows)}, {"rstd", std::size_t(rows)}};

    layernorm(d_x.data(), d_gamma.data(), d_beta.data(), out.y.data(), out.mean.data(),
              out.rstd.data(), rows, cols);

    expect_matches_reference(out, expected(x, gamma, beta, rows, cols), rows, cols, kind);
}

TEST_F(LayerNorm, RowLengths) {
    auto rng = test_rng();
    // 1: a single column (variance 0); 7, 31, 33: not a multiple of 4 (scalar path) or of a
    // warp; 32, 1024: exactly a warp / a block of float4s; 1023, 4097: one short of / past them;
    // 1000: a multiple of 4 but not of 32 * 4; 5000: a long row that fits in the registers that
    // the staged kernel holds (no shared memory); 32768, 50304 (GPT-2's padded vocab): long rows,
    // split over a cluster of blocks on Hopper; 50001: long and odd (scalar path, uneven slices);
    // 70001: a cluster of three on Hopper, more than one block's shared memory before it; 204803:
    // more than a cluster holds (what the registers do not hold is read twice).
    for (int cols :
         {1, 7, 31, 32, 33, 1000, 1023, 1024, 4097, 5000, 32768, 50304, 50001, 70001, 204803}) {
        const int rows = cols <= 33 ? 37 : cols <= 4097 ? 11 : 3;
        check_case(Rows::kRandom, rows, cols, rng);
    }
    check_case(Rows::kRandom, 1001, 768, rng);  // GPT-2 small's width, many rows
}

TEST_F(LayerNorm, ExtremeRows) {
    auto rng = test_rng();
    for (Rows kind :
         {Rows::kLargeValues, Rows::kLargeMean, Rows::kEqualValues, Rows::kOutlierAtEnd})
        for (int cols : {33, 1000, 4097, 50304}) check_case(kind, 3, cols, rng);
}

void time_case(int rows, int cols, course::Rng& rng) {
    const std::size_t n = std::size_t(rows) * cols;
    // x, y, the copy's destination and the harness's two copies of y, plus room for the L2 flush
    // buffer.
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(float) + (256u << 20));
    const auto x = make_x(Rows::kRandom, rows, cols, rng);
    const auto gamma = course::random_floats(cols, 0.5f, 1.5f, rng);
    const auto beta = course::random_floats(cols, -0.5f, 0.5f, rng);
    course::DeviceBuffer<float> d_x("x", x), d_gamma("gamma", gamma), d_beta("beta", beta),
        d_copy("copy", n);
    Outputs out{{"y", n}, {"mean", std::size_t(rows)}, {"rstd", std::size_t(rows)}};
    const auto e = expected(x, gamma, beta, rows, cols);

    const auto timing = course::time_against(
        [&] {
            layernorm(d_x.data(), d_gamma.data(), d_beta.data(), out.y.data(), out.mean.data(),
                      out.rstd.data(), rows, cols);
        },
        [&] { course::baseline::device_copy(d_copy.data(), d_x.data(), n * sizeof(float)); },
        {course::TimedOutput(out.y, e.tol.y), course::TimedOutput(out.mean, e.tol.mean),
         course::TimedOutput(out.rstd, e.tol.rstd)},
        {course::TimedInput(d_x)});

    {
        SCOPED_TRACE("the timed run, " + std::to_string(rows) + " x " + std::to_string(cols));
        expect_matches_reference(out, e, rows, cols);
    }
    // Bytes that must move: read x and write y (4 bytes each per element); gamma and beta are
    // read once (2 * 4 * cols: every other read hits L2); mean and rstd written (2 * 4 * rows).
    // The second read of each row comes from the caches and is not counted. The copy reads and
    // writes 4 bytes per element.
    const double bytes = 2.0 * 4 * n + 2.0 * 4 * cols + 2.0 * 4 * rows;
    course::record_bandwidth(std::to_string(rows) + "x" + std::to_string(cols), timing, bytes,
                             "copy", 2.0 * 4 * n);
}

// 16384 x 4096: rows of 16 KB (GPT-style B*T = 16384, C = 4096); x and y 256 MiB each.
TEST_F(LayerNorm, Bandwidth16384x4096) {
    auto rng = test_rng();
    time_case(16384, 4096, rng);
}

// 4096 x 50304: rows of 196 KB, far fewer rows in flight per SM; x and y 786 MiB each.
TEST_F(LayerNorm, Bandwidth4096x50304) {
    auto rng = test_rng();
    time_case(4096, 50304, rng);
}

// ---- layernorm_bf16 (layernorm_bf16.h), the trainer's bf16 rows: where the file defines it ----
//
// The same double reference and tolerances, from x, gamma and beta rounded to bf16 (the values
// the kernel reads); y is rounded once more when stored, course::kBf16Roundoff relatively.

using bf16 = __nv_bfloat16;

// Views of a bf16 case, each `offset` elements (2 bytes each) past a 16-byte boundary.
struct Bf16Offsets {
    int x = 0, gamma = 0, beta = 0, y = 0;
    bool any() const { return x + gamma + beta + y > 0; }
    std::string describe() const {
        return any() ? ", views starting (x, gamma, beta, y) " + std::to_string(x) + ", " +
                           std::to_string(gamma) + ", " + std::to_string(beta) + ", " +
                           std::to_string(y) + " elements past a 16-byte boundary"
                     : "";
    }
};

std::vector<float> rounded_to_bf16(std::vector<float> values) {
    for (float& v : values) v = course::round_to_bf16(v);
    return values;
}

void check_bf16_case(Rows kind, int rows, int cols, const Bf16Offsets& offsets, course::Rng& rng) {
    SCOPED_TRACE("layernorm_bf16, " + describe(kind) + ", " + std::to_string(rows) + " x " +
                 std::to_string(cols) + offsets.describe());
    const auto x = rounded_to_bf16(make_x(kind, rows, cols, rng));
    const auto gamma = rounded_to_bf16(course::random_floats(cols, 0.5f, 1.5f, rng));
    const auto beta = rounded_to_bf16(course::random_floats(cols, -0.5f, 0.5f, rng));
    course::View<bf16> d_x("x", x, offsets.x), d_gamma("gamma", gamma, offsets.gamma),
        d_beta("beta", beta, offsets.beta), y("y", x.size(), offsets.y);
    course::DeviceBuffer<float> mean("mean", rows), rstd("rstd", rows);

    layernorm_bf16(d_x.data(), d_gamma.data(), d_beta.data(), y.data(), mean.data(), rstd.data(),
                   rows, cols);

    auto e = expected(x, gamma, beta, rows, cols);
    e.tol.y.rtol += course::kBf16Roundoff;
    EXPECT_TRUE(course::expect_close(mean.download(), e.want.mean, e.tol.mean, {"mean"}));
    EXPECT_TRUE(course::expect_close(rstd.download(), e.want.rstd, e.tol.rstd, {"rstd"}));
    EXPECT_TRUE(course::expect_close(y.values(), e.want.y, e.tol.y,
                                     {"y", course::Matrix{std::size_t(rows), std::size_t(cols)}}));
    EXPECT_TRUE(y.front_untouched());
}

TEST_F(LayerNorm, Bf16RowLengths) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_bf16);
    auto rng = test_rng();
    // 1, 7, 9, 33: not a multiple of the 8-value pack (one value at a time); 8: one pack; 768:
    // GPT-2's width, three packs a lane; 1024: the most a warp keeps in registers (4 packs a
    // lane); 1032: one pack past that, read twice; 1000: a multiple of 8 but not of a warp's 256;
    // 4097, 50304: long rows. Then many rows of GPT-2's width.
    for (int cols : {1, 7, 8, 9, 33, 768, 1000, 1024, 1032, 4097, 50304}) {
        const int rows = cols <= 33 ? 37 : cols <= 4097 ? 11 : 3;
        check_bf16_case(Rows::kRandom, rows, cols, {}, rng);
    }
    check_bf16_case(Rows::kRandom, 1001, 768, {}, rng);
}

TEST_F(LayerNorm, Bf16ExtremeRows) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_bf16);
    auto rng = test_rng();
    // (No large-mean rows: bf16 keeps 8 significant bits, so a spread of 1 around 1e4 rounds away.)
    for (Rows kind : {Rows::kLargeValues, Rows::kEqualValues, Rows::kOutlierAtEnd})
        for (int cols : {33, 768, 4097}) check_bf16_case(kind, 3, cols, {}, rng);
}

TEST_F(LayerNorm, Bf16ViewsOffA16ByteBoundary) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_bf16);
    auto rng = test_rng();
    // One view at a time one element (2 bytes) off: a kernel that picks its 16-byte packs from
    // some of the pointers' alignment and not all makes a misaligned access. Then all of them.
    for (const Bf16Offsets& offsets :
         {Bf16Offsets{1, 0, 0, 0}, Bf16Offsets{0, 1, 0, 0}, Bf16Offsets{0, 0, 1, 0},
          Bf16Offsets{0, 0, 0, 1}, Bf16Offsets{1, 1, 1, 1}})
        check_bf16_case(Rows::kRandom, 37, 768, offsets, rng);
}

void time_bf16_case(int rows, int cols, course::Rng& rng) {
    const std::size_t n = std::size_t(rows) * cols;
    // x, y, the copy's destination and the harness's two copies of y (2 bytes each), plus room
    // for the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(5 * n * 2 + (256u << 20));
    const auto x = rounded_to_bf16(make_x(Rows::kRandom, rows, cols, rng));
    const auto gamma = rounded_to_bf16(course::random_floats(cols, 0.5f, 1.5f, rng));
    const auto beta = rounded_to_bf16(course::random_floats(cols, -0.5f, 0.5f, rng));
    course::View<bf16> d_x("x", x, 0), d_gamma("gamma", gamma, 0), d_beta("beta", beta, 0),
        y("y", n, 0);
    course::DeviceBuffer<float> mean("mean", rows), rstd("rstd", rows);
    course::DeviceBuffer<std::uint16_t> d_copy("copy", n);
    auto e = expected(x, gamma, beta, rows, cols);
    e.tol.y.rtol += course::kBf16Roundoff;

    const auto timing = course::time_against(
        [&] {
            layernorm_bf16(d_x.data(), d_gamma.data(), d_beta.data(), y.data(), mean.data(),
                           rstd.data(), rows, cols);
        },
        [&] { course::baseline::device_copy(d_copy.data(), d_x.buffer().data(), n * 2); },
        {course::TimedOutput(y.buffer()), course::TimedOutput(mean, e.tol.mean),
         course::TimedOutput(rstd, e.tol.rstd)},
        {course::sign_flipped(d_x.buffer())});

    const std::string label = std::to_string(rows) + "x" + std::to_string(cols) + " bf16";
    {
        SCOPED_TRACE("the timed run, layernorm_bf16 " + label);
        EXPECT_TRUE(course::expect_close(y.values(), e.want.y, e.tol.y, {"y"}));
        EXPECT_TRUE(course::expect_close(rstd.download(), e.want.rstd, e.tol.rstd, {"rstd"}));
    }
    // Read x and write y (2 bytes each per element), gamma and beta once, mean and rstd written;
    // the copy reads and writes 2 bytes per element. Shown, not judged (the target's cases are
    // the float ones).
    const double bytes = 2.0 * 2 * n + 2.0 * 2 * cols + 2.0 * 4 * rows;
    course::record_bandwidth(label, timing, bytes, "copy", 2.0 * 2 * n);
}

// GPT-2's LayerNorm at 16 x 1024 tokens: rows of 1.5 KB, 24 MiB in all.
TEST_F(LayerNorm, Bf16Bandwidth16384x768) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_bf16);
    COURSE_SKIP_ON_EMULATOR("a timed case");
    auto rng = test_rng();
    time_bf16_case(16384, 768, rng);
}

// 2^26 values, the contract's limit: rows of 8 KB, read partly twice (past the registers' 1024).
TEST_F(LayerNorm, Bf16Bandwidth16384x4096) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_bf16);
    COURSE_SKIP_ON_EMULATOR("a timed case");
    auto rng = test_rng();
    time_bf16_case(16384, 4096, rng);
}

TEST_F(LayerNorm, MoreThan2To31Elements) {
    // 429498 rows of 5000 floats: the last row starts at element 2147485000, just past 2^31, where
    // a row offset row * cols held in an int overflows (8.6 GB each for x and y). x is made on the
    // device; whole rows around element 2^31 and at the ends are compared with the reference, which
    // the host computes for those rows only.
    const int rows = 429498, cols = 5000;
    const std::size_t n = std::size_t(rows) * cols;
    COURSE_LARGE_CASE(2 * n * sizeof(float) + (64u << 20));
    SCOPED_TRACE(
        "429498 x 5000 (the last row starts at element 2^31 + 1352), x made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    const auto gamma = course::random_floats(cols, 0.5f, 1.5f, rng);
    const auto beta = course::random_floats(cols, -0.5f, 0.5f, rng);
    course::DeviceBuffer<float> d_x("x", n), d_gamma("gamma", gamma), d_beta("beta", beta);
    course::fill_uniform(d_x.data(), n, seed, -1.0f, 1.0f);
    Outputs out{{"y", n}, {"mean", std::size_t(rows)}, {"rstd", std::size_t(rows)}};

    course::run_large_case([&] {
        layernorm(d_x.data(), d_gamma.data(), d_beta.data(), out.y.data(), out.mean.data(),
                  out.rstd.data(), rows, cols);
    });

    // The compared rows as one small matrix (a window holds one or more whole rows), x
    // recomputed from the hashed formula; each window's reference is its slice of it.
    const auto windows = course::rows_past_int_range(rows, cols, rng);
    std::vector<float> x;
    std::vector<course::Window> stats_windows;
    for (const auto& w : windows) {
        for (std::size_t i = w.first; i < w.first + w.count; ++i)
            x.push_back(course::hashed::uniform(i, seed, -1.0f, 1.0f));
        stats_windows.push_back({w.first / cols, w.count / cols});
    }
    const auto e = expected(x, gamma, beta, static_cast<int>(x.size() / cols), cols);
    EXPECT_TRUE(course::expect_windows_close(out.y, windows, course::consecutive_slices(e.want.y),
                                             e.tol.y, {"y (flat index row * cols + col)"}));
    EXPECT_TRUE(course::expect_windows_close(
        out.rstd, stats_windows, course::consecutive_slices(e.want.rstd), e.tol.rstd, {"rstd"}));
}

}  // namespace
