// Checker of 06_softmax_norms/layernorm_backward: row lengths around a warp, the float4 width and
// the block; many rows (the column sums); extreme rows (a large mean, equal values, one large
// gradient in the last column); the same bits on a second call; then the bandwidth at
// 16384 x 4096 against a device-to-device copy; then the optional bf16 entry point
// (layernorm_backward_bf16.h), where the file defines it: the same cases in bf16, its outputs
// added into values that are not zero, each view one element off a 16-byte boundary, more row
// chunks than a grid holds along y, and its bandwidth at GPT-2's 16384 x 768 and at 16384 x 4096
// (its limit of 2^26 values); then more than 2^31 elements.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/entry_point.h"
#include "course/reference/norms.h"
#include "course/testing.h"
#include "course/view.h"
#include "layernorm.h"  // kLayerNormEps: the statistics come from the forward's definition
#include "layernorm_backward.h"
#include "layernorm_backward_bf16.h"

// Weak: a file without the optional entry point still links (course/entry_point.h).
__attribute__((weak)) decltype(layernorm_backward_bf16) layernorm_backward_bf16;

namespace {

class LayerNormBackward : public course::GpuTest {};

enum class Rows { kRandom, kLargeMean, kEqualValues, kGradientOutlierAtEnd };

std::string describe(Rows kind) {
    switch (kind) {
        case Rows::kRandom:
            return "random rows";
        case Rows::kLargeMean:
            return "x with mean 1000, spread +-1";
        case Rows::kEqualValues:
            return "x rows of equal values (variance 0)";
        case Rows::kGradientOutlierAtEnd:
            return "one large dy (1000) in the last column";
    }
    return "";
}

// The inputs of a backward call: x, dy, gamma, and the forward's mean and rstd (the double
// reference's, rounded to float as a float32 forward would store them).
struct Inputs {
    std::vector<float> x, dy, gamma, mean, rstd;
};

Inputs make_inputs(Rows kind, int rows, int cols, course::Rng& rng) {
    Inputs in;
    in.x.reserve(std::size_t(rows) * cols);
    in.dy.reserve(std::size_t(rows) * cols);
    for (int r = 0; r < rows; ++r) {
        const float offset = rng.uniform(-2.0f, 2.0f);
        for (int c = 0; c < cols; ++c) {
            switch (kind) {
                case Rows::kRandom:
                case Rows::kGradientOutlierAtEnd:
                    in.x.push_back(offset + rng.uniform(-1.0f, 1.0f));
                    break;
                case Rows::kLargeMean:
                    in.x.push_back(1000.0f + rng.uniform(-1.0f, 1.0f));
                    break;
                case Rows::kEqualValues:
                    in.x.push_back(offset);
                    break;
            }
            // The outlier dominates both row sums of dx: a kernel whose sums skip the last
            // column (a tail bug) is far off, which a random row cannot show.
            const bool outlier = kind == Rows::kGradientOutlierAtEnd && c == cols - 1;
            in.dy.push_back(outlier ? 1000.0f : rng.uniform(-1.0f, 1.0f));
        }
    }
    in.gamma = course::random_floats(cols, 0.5f, 1.5f, rng);
    const std::vector<float> beta(cols, 0.0f);  // the backward does not depend on beta
    const auto forward =
        course::reference::layernorm(in.x, in.gamma, beta, rows, cols, kLayerNormEps);
    in.mean.assign(forward.mean.begin(), forward.mean.end());
    in.rstd.assign(forward.rstd.begin(), forward.rstd.end());
    return in;
}

struct Tolerances {
    course::Tolerance dx, dgamma, dbeta;
};

double rms(const std::vector<float>& values) {
    double squares = 0.0;
    for (float v : values) squares += double(v) * v;
    return std::sqrt(squares / values.size());
}

// Tolerances from the reduction lengths and the data (u = 2^-24, float32's unit roundoff):
//  dbeta: a sum of `rows` terms dy: the harness's Tolerance::float32(rows, rms(dy)).
//  dgamma: a sum of `rows` terms dy * xhat: Tolerance::float32(rows, rms(dy * xhat)) for the sum,
//      plus each term's own roundings, summed down the column: x - mean rounds at the scale of
//      |x| + |mean| (where x is close to the mean that is far more than 4u of the difference),
//      and dy then multiplies it: |dy| * (2u * rstd * (|x| + |mean|) + 4u * |xhat|). One large dy
//      in a column makes that column's bound the largest (seen: 1.5e-4 at dy = 1000).
//  dx = rstd * (g - a - xhat * b), with a, b the row means of g = dy * gamma and g * xhat. A mean
//      of cols terms is off by its sum's tolerance over cols (as in the forward's checker):
//      da = 8u * rms(g) + 8u * sqrt(cols) * |a|, and the same for db. dx then carries
//      rstd * (da + |xhat| * db), plus 4 roundings at the scale of the largest of |g|, |a| and
//      |xhat * b|. Taken per row, the largest over the rows.
Tolerances tolerances(const Inputs& in, int rows, int cols) {
    constexpr double u = 0x1.0p-24;
    std::vector<float> dy_xhat(in.dy.size());
    std::vector<double> term_errors(cols, 0.0);  // per column of dgamma
    Tolerances tol;
    tol.dx.rtol = 4 * u;
    for (int r = 0; r < rows; ++r) {
        double sum_g = 0, sum_gx = 0, squares_g = 0, squares_gx = 0, max_g = 0, max_xhat = 0;
        for (int c = 0; c < cols; ++c) {
            const std::size_t i = std::size_t(r) * cols + c;
            const double xhat = (double(in.x[i]) - in.mean[r]) * in.rstd[r];
            const double g = double(in.dy[i]) * in.gamma[c];
            dy_xhat[i] = float(in.dy[i] * xhat);
            term_errors[c] += std::fabs(in.dy[i]) *
                              (2 * u * in.rstd[r] * (std::fabs(in.x[i]) + std::fabs(in.mean[r])) +
                               4 * u * std::fabs(xhat));
            sum_g += g, sum_gx += g * xhat;
            squares_g += g * g, squares_gx += g * xhat * g * xhat;
            max_g = std::max(max_g, std::fabs(g));
            max_xhat = std::max(max_xhat, std::fabs(xhat));
        }
        const double a = sum_g / cols, b = sum_gx / cols;
        const double sqrt_cols = std::sqrt(double(cols));
        const double da = 8 * u * std::sqrt(squares_g / cols) + 8 * u * sqrt_cols * std::fabs(a);
        const double db = 8 * u * std::sqrt(squares_gx / cols) + 8 * u * sqrt_cols * std::fabs(b);
        const double scale = std::max({max_g, std::fabs(a), max_xhat * std::fabs(b)});
        const double row_atol = in.rstd[r] * (da + max_xhat * db + 4 * u * scale);
        tol.dx.atol = std::max(tol.dx.atol, row_atol);
    }
    tol.dgamma = course::Tolerance::float32(rows, rms(dy_xhat));
    tol.dgamma.atol += *std::max_element(term_errors.begin(), term_errors.end());
    tol.dbeta = course::Tolerance::float32(rows, rms(in.dy));
    return tol;
}

struct Outputs {
    course::DeviceBuffer<float> dx, dgamma, dbeta;
};

Outputs make_outputs(int rows, int cols) {
    return {{"dx", std::size_t(rows) * cols},
            {"dgamma", std::size_t(cols)},
            {"dbeta", std::size_t(cols)}};
}

struct DeviceInputs {
    course::DeviceBuffer<float> x, dy, gamma, mean, rstd;
};

DeviceInputs upload(const Inputs& in) {
    return {{"x", in.x}, {"dy", in.dy}, {"gamma", in.gamma}, {"mean", in.mean}, {"rstd", in.rstd}};
}

void run(DeviceInputs& d, Outputs& out, int rows, int cols) {
    layernorm_backward(d.x.data(), d.dy.data(), d.gamma.data(), d.mean.data(), d.rstd.data(),
                       out.dx.data(), out.dgamma.data(), out.dbeta.data(), rows, cols);
}

// dx, dgamma and dbeta against the double reference, as one verdict.
testing::AssertionResult matches_reference(Outputs& out, const Inputs& in, int rows, int cols) {
    const auto want =
        course::reference::layernorm_backward(in.x, in.dy, in.gamma, in.mean, in.rstd, rows, cols);
    const auto tol = tolerances(in, rows, cols);
    auto dx = course::expect_close(out.dx.download(), want.dx, tol.dx,
                                   {"dx", course::Matrix{std::size_t(rows), std::size_t(cols)}});
    if (!dx) return dx;
    auto dgamma = course::expect_close(out.dgamma.download(), want.dgamma, tol.dgamma, {"dgamma"});
    if (!dgamma) return dgamma;
    return course::expect_close(out.dbeta.download(), want.dbeta, tol.dbeta, {"dbeta"});
}

testing::AssertionResult case_result(Rows kind, int rows, int cols, course::Rng& rng) {
    const auto in = make_inputs(kind, rows, cols, rng);
    auto d = upload(in);
    auto out = make_outputs(rows, cols);
    run(d, out, rows, cols);
    return matches_reference(out, in, rows, cols);
}

void check_case(Rows kind, int rows, int cols, course::Rng& rng) {
    SCOPED_TRACE(describe(kind) + ", " + std::to_string(rows) + " x " + std::to_string(cols));
    EXPECT_TRUE(case_result(kind, rows, cols, rng));
}

std::string listed(const std::vector<int>& values) {
    std::string text;
    for (int value : values) text += (text.empty() ? "" : ", ") + std::to_string(value);
    return text;
}

// When some row lengths fail and others pass: what a launcher that sizes its block from the
// row length does wrong most often.
std::string row_lengths_diagnosis(const std::vector<int>& wrong, const std::vector<int>& right) {
    if (right.empty()) return "";
    return "rows of " + listed(wrong) + " columns are wrong, rows of " + listed(right) +
           " right: only some lengths. If the block size follows the row length, is it a power of "
           "two for the right ones and not for the wrong ones? A reduction tree that halves the "
           "count of threads (or of warps) drops the part above the largest power of two when "
           "that count is not one (544 threads = 17 warps); reduce every warp's sum (a loop, or "
           "a shuffle over the warp sums with 0 past the last)";
}

TEST_F(LayerNormBackward, RowLengths) {
    auto rng = test_rng();
    // 1: a single column (xhat = 0); 7, 31, 33: not a multiple of 4 (scalar path) or of a warp;
    // 32, 1024: exactly a warp / a block of float4s; 1023, 4097: one short of / past them; 1000:
    // a multiple of 4 but not of 32 * 4; 32768, 50304: long rows. Every length runs; the verdict
    // compares the wrong lengths with the right ones before the first failure's numbers.
    std::vector<int> wrong, right;
    std::string first_failure;
    for (int cols : {1, 7, 31, 32, 33, 1000, 1023, 1024, 4097, 32768, 50304}) {
        const int rows = cols <= 33 ? 37 : cols <= 4097 ? 11 : 3;
        const auto result = case_result(Rows::kRandom, rows, cols, rng);
        (result ? right : wrong).push_back(cols);
        if (!result && first_failure.empty())
            first_failure = "the first wrong case, " + describe(Rows::kRandom) + ", " +
                            std::to_string(rows) + " x " + std::to_string(cols) + ": " +
                            result.message();
    }
    if (wrong.empty()) return;
    const std::string diagnosis = row_lengths_diagnosis(wrong, right);
    ADD_FAILURE() << (diagnosis.empty() ? "" : diagnosis + "\n") << first_failure;
}

TEST_F(LayerNormBackward, ManyRows) {
    auto rng = test_rng();
    // The column sums run over all rows: rows that are not a multiple of anything, and a
    // number of columns that leaves a partial group of columns.
    check_case(Rows::kRandom, 4099, 33, rng);
    check_case(Rows::kRandom, 1001, 768, rng);
}

TEST_F(LayerNormBackward, ExtremeRows) {
    auto rng = test_rng();
    for (Rows kind : {Rows::kLargeMean, Rows::kEqualValues, Rows::kGradientOutlierAtEnd})
        for (int cols : {33, 1000, 4097, 50304}) check_case(kind, 3, cols, rng);
}

TEST_F(LayerNormBackward, SameBitsEveryCall) {
    SCOPED_TRACE(
        "a second call on the same inputs must return the same bits: are the column sums "
        "added in an order that changes between runs (atomicAdd)?");
    auto rng = test_rng();
    const int rows = 4099, cols = 1000;
    const auto in = make_inputs(Rows::kRandom, rows, cols, rng);
    auto d = upload(in);
    auto first = make_outputs(rows, cols), second = make_outputs(rows, cols);
    run(d, first, rows, cols);
    run(d, second, rows, cols);
    EXPECT_TRUE(
        course::expect_equal(second.dgamma.download(), first.dgamma.download(), {"dgamma"}));
    EXPECT_TRUE(course::expect_equal(second.dbeta.download(), first.dbeta.download(), {"dbeta"}));
    EXPECT_TRUE(course::expect_equal(second.dx.download(), first.dx.download(), {"dx"}));
}

TEST_F(LayerNormBackward, Bandwidth16384x4096) {
    const int rows = 16384, cols = 4096;
    const std::size_t n = std::size_t(rows) * cols;
    // x, dy, dx, the copy's destination and the harness's two copies of dx (256 MiB each), plus
    // room for the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(6 * n * sizeof(float) + (256u << 20));
    auto rng = test_rng();
    const auto in = make_inputs(Rows::kRandom, rows, cols, rng);
    auto d = upload(in);
    auto out = make_outputs(rows, cols);
    course::DeviceBuffer<float> d_copy("copy", n);
    const auto tol = tolerances(in, rows, cols);

    const auto timing = course::time_against(
        [&] { run(d, out, rows, cols); },
        [&] { course::baseline::device_copy(d_copy.data(), d.x.data(), n * sizeof(float)); },
        {course::TimedOutput(out.dx, tol.dx), course::TimedOutput(out.dgamma, tol.dgamma),
         course::TimedOutput(out.dbeta, tol.dbeta)},
        {course::TimedInput(d.dy)});  // dy negated: dx, dgamma and dbeta negate

    {
        SCOPED_TRACE("the timed run, 16384 x 4096");
        EXPECT_TRUE(matches_reference(out, in, rows, cols));
    }
    // Bytes that must move: read x and dy, write dx (4 bytes each per element); gamma, dgamma,
    // dbeta (4 * cols each) and mean, rstd (4 * rows each). A kernel that reads x and dy a
    // second time from device memory (for the column sums) moves 20 bytes per element instead
    // of 12, and shows it as a lower rate. The copy reads and writes 4 bytes per element.
    const double bytes = 3.0 * 4 * n + 3.0 * 4 * cols + 2.0 * 4 * rows;
    course::record_bandwidth("16384x4096", timing, bytes, "copy", 2.0 * 4 * n);
}

// ---- layernorm_backward_bf16 (layernorm_backward_bf16.h), the trainer's bf16 rows ----
//
// The same double reference and tolerances, from x, dy and gamma rounded to bf16 (the values the
// kernel reads), the outputs added into values that are not zero: dx is then rounded to bf16
// once more (course::kBf16Roundoff of the sum), dgamma and dbeta carry one more float rounding.

using bf16 = __nv_bfloat16;

std::vector<float> rounded_to_bf16(std::vector<float> values) {
    for (float& v : values) v = course::round_to_bf16(v);
    return values;
}

// Inputs as make_inputs draws them, x, dy and gamma rounded to bf16 and the forward's statistics
// computed from the rounded x.
Inputs make_bf16_inputs(Rows kind, int rows, int cols, course::Rng& rng) {
    Inputs in = make_inputs(kind, rows, cols, rng);
    in.x = rounded_to_bf16(in.x);
    in.dy = rounded_to_bf16(in.dy);
    in.gamma = rounded_to_bf16(in.gamma);
    const auto forward = course::reference::layernorm(
        in.x, in.gamma, std::vector<float>(cols, 0.0f), rows, cols, kLayerNormEps);
    in.mean.assign(forward.mean.begin(), forward.mean.end());
    in.rstd.assign(forward.rstd.begin(), forward.rstd.end());
    return in;
}

// Views of a bf16 case, each `offset` elements (2 bytes each) past a 16-byte boundary.
struct Bf16Offsets {
    int x = 0, dy = 0, gamma = 0, dx = 0;
    std::string describe() const {
        return x + dy + gamma + dx == 0
                   ? ""
                   : ", views starting (x, dy, gamma, dx) " + std::to_string(x) + ", " +
                         std::to_string(dy) + ", " + std::to_string(gamma) + ", " +
                         std::to_string(dx) + " elements past a 16-byte boundary";
    }
};

// One call on device buffers made from `in`, into outputs that start at dx0, dgamma0, dbeta0.
struct Bf16Run {
    course::View<bf16> x, dy, gamma, dx;
    course::DeviceBuffer<float> mean, rstd, dgamma, dbeta;

    Bf16Run(const Inputs& in, const std::vector<float>& dx0, const std::vector<float>& dgamma0,
            const std::vector<float>& dbeta0, const Bf16Offsets& offsets)
        : x("x", in.x, offsets.x),
          dy("dy", in.dy, offsets.dy),
          gamma("gamma", in.gamma, offsets.gamma),
          dx("dx", dx0.size(), offsets.dx),
          mean("mean", in.mean),
          rstd("rstd", in.rstd),
          dgamma("dgamma", dgamma0),
          dbeta("dbeta", dbeta0) {
        // dx starts at dx0; the elements before the view keep the poison (front_untouched).
        std::vector<std::uint16_t> bits(
            offsets.dx, static_cast<std::uint16_t>(course::poison_pattern<std::uint16_t>()));
        const auto values = course::bf16_bits(dx0);
        bits.insert(bits.end(), values.begin(), values.end());
        dx.buffer().upload(bits);
    }
    void call(int rows, int cols) {
        layernorm_backward_bf16(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(),
                                dx.data(), dgamma.data(), dbeta.data(), rows, cols);
    }
};

// The starting values of the outputs (dx in bf16): what the trainer's gradients already hold.
struct Bf16Start {
    std::vector<float> dx, dgamma, dbeta;
};

Bf16Start bf16_start(int rows, int cols, course::Rng& rng) {
    return {rounded_to_bf16(course::random_floats(std::size_t(rows) * cols, -1.0f, 1.0f, rng)),
            course::random_floats(cols, -1.0f, 1.0f, rng),
            course::random_floats(cols, -1.0f, 1.0f, rng)};
}

// start + `calls` x the reference, each output against its tolerance, widened for the additions.
// `calls` > 1 (the timed case): every call rounds the growing dx to bf16 again, so dx's tolerance
// grows with the sum (2^-9 of it per call); dgamma and dbeta's with the count.
testing::AssertionResult bf16_matches(Bf16Run& run, const Inputs& in, const Bf16Start& start,
                                      int rows, int cols, int calls = 1) {
    const auto want =
        course::reference::layernorm_backward(in.x, in.dy, in.gamma, in.mean, in.rstd, rows, cols);
    auto tol = tolerances(in, rows, cols);
    double largest_dx = 0.0;
    for (double d : want.dx) largest_dx = std::max(largest_dx, std::fabs(d));
    // Call k rounds a sum of up to 1 + k * largest_dx (the start is within +-1).
    tol.dx.atol = calls * tol.dx.atol +
                  (calls > 1 ? 0x1.0p-9 * calls * (1.0 + (calls + 1.0) / 2 * largest_dx) : 0.0);
    tol.dx.rtol += course::kBf16Roundoff;
    for (course::Tolerance* sum : {&tol.dgamma, &tol.dbeta}) {
        sum->atol = calls * sum->atol + 0x1.0p-23 * calls;
        sum->rtol += 0x1.0p-23;
    }
    std::vector<double> dx(want.dx.size()), dgamma(cols), dbeta(cols);
    std::vector<double> written_dx(want.dx.begin(), want.dx.end());
    for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = start.dx[i] + calls * want.dx[i];
    for (int c = 0; c < cols; ++c) {
        dgamma[c] = start.dgamma[c] + calls * want.dgamma[c];
        dbeta[c] = start.dbeta[c] + calls * want.dbeta[c];
    }
    const auto got_dx = run.dx.values();
    course::CompareOptions dx_options{"dx", course::Matrix{std::size_t(rows), std::size_t(cols)}};
    dx_options.diagnose = [&] {
        for (std::size_t i = 0; i < got_dx.size(); ++i)
            if (!tol.dx.accepts(got_dx[i], written_dx[i])) return std::string();
        return std::string(
            "likely cause: dx holds the gradient alone: it was written over the "
            "trainer's dx instead of added into it (this entry point adds)");
    };
    auto result = course::expect_close(got_dx, dx, tol.dx, dx_options);
    if (!result) return result;
    if (!(result = run.dx.front_untouched())) return result;
    const auto got_dgamma = run.dgamma.download();
    course::CompareOptions dgamma_options{"dgamma"};
    dgamma_options.diagnose = [&] {
        for (int c = 0; c < cols; ++c)
            if (!tol.dgamma.accepts(got_dgamma[c], calls * want.dgamma[c])) return std::string();
        return std::string(
            "likely cause: dgamma holds the column sums alone: written over the "
            "trainer's dgamma instead of added into it (this entry point adds)");
    };
    if (!(result = course::expect_close(got_dgamma, dgamma, tol.dgamma, dgamma_options)))
        return result;
    return course::expect_close(run.dbeta.download(), dbeta, tol.dbeta, {"dbeta"});
}

testing::AssertionResult bf16_case_result(Rows kind, int rows, int cols, const Bf16Offsets& offsets,
                                          course::Rng& rng) {
    const auto in = make_bf16_inputs(kind, rows, cols, rng);
    const auto start = bf16_start(rows, cols, rng);
    Bf16Run run(in, start.dx, start.dgamma, start.dbeta, offsets);
    run.call(rows, cols);
    return bf16_matches(run, in, start, rows, cols);
}

void check_bf16_case(Rows kind, int rows, int cols, const Bf16Offsets& offsets, course::Rng& rng) {
    SCOPED_TRACE("layernorm_backward_bf16, " + describe(kind) + ", " + std::to_string(rows) +
                 " x " + std::to_string(cols) + offsets.describe());
    EXPECT_TRUE(bf16_case_result(kind, rows, cols, offsets, rng));
}

TEST_F(LayerNormBackward, Bf16RowLengths) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    auto rng = test_rng();
    // 1, 7, 9, 33: not a multiple of the 8-value pack (one value at a time); 8: one pack; 768:
    // GPT-2's width; 1024: the most a warp keeps in registers; 1032: one pack past that; 1000: a
    // multiple of 8 but not of a warp's 256; 4097: long and odd.
    for (int cols : {1, 7, 8, 9, 33, 768, 1000, 1024, 1032, 4097}) {
        const int rows = cols <= 33 ? 37 : 11;
        check_bf16_case(Rows::kRandom, rows, cols, {}, rng);
    }
}

TEST_F(LayerNormBackward, Bf16ManyRows) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    auto rng = test_rng();
    // The column sums over chunks of 256 rows: 4099 rows end in a partial chunk; 33 columns in a
    // partial band of columns.
    check_bf16_case(Rows::kRandom, 4099, 33, {}, rng);
    check_bf16_case(Rows::kRandom, 1001, 768, {}, rng);
}

TEST_F(LayerNormBackward, Bf16ExtremeRows) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    auto rng = test_rng();
    for (Rows kind : {Rows::kEqualValues, Rows::kGradientOutlierAtEnd})
        for (int cols : {33, 768, 4097}) check_bf16_case(kind, 3, cols, {}, rng);
}

TEST_F(LayerNormBackward, Bf16ViewsOffA16ByteBoundary) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    auto rng = test_rng();
    // One view at a time one element (2 bytes) off, then all of them: the 16-byte path must be
    // chosen from every pointer's alignment.
    for (const Bf16Offsets& offsets :
         {Bf16Offsets{1, 0, 0, 0}, Bf16Offsets{0, 1, 0, 0}, Bf16Offsets{0, 0, 1, 0},
          Bf16Offsets{0, 0, 0, 1}, Bf16Offsets{1, 1, 1, 1}})
        check_bf16_case(Rows::kRandom, 37, 768, offsets, rng);
}

TEST_F(LayerNormBackward, Bf16SameBitsEveryCall) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    SCOPED_TRACE(
        "layernorm_backward_bf16: a second call on the same inputs, from the same starting "
        "values, must return the same bits: are the column sums added in an order that changes "
        "between runs (atomicAdd)?");
    auto rng = test_rng();
    const int rows = 4099, cols = 1000;
    const auto in = make_bf16_inputs(Rows::kRandom, rows, cols, rng);
    const auto start = bf16_start(rows, cols, rng);
    Bf16Run first(in, start.dx, start.dgamma, start.dbeta, {}),
        second(in, start.dx, start.dgamma, start.dbeta, {});
    first.call(rows, cols);
    second.call(rows, cols);
    EXPECT_TRUE(
        course::expect_equal(second.dgamma.download(), first.dgamma.download(), {"dgamma"}));
    EXPECT_TRUE(course::expect_equal(second.dbeta.download(), first.dbeta.download(), {"dbeta"}));
    EXPECT_TRUE(course::expect_equal(second.dx.values(), first.dx.values(), {"dx"}));
}

TEST_F(LayerNormBackward, Bf16MoreChunksThanGridY) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    COURSE_SKIP_ON_EMULATOR("2^24 rows");
    // 2^24 + 259 rows of 2 values (2^25 values, within the limit of 2^26): 65537 chunks of 256
    // rows, more than a grid holds along y (65535).
    auto rng = test_rng();
    check_bf16_case(Rows::kRandom, (1 << 24) + 259, 2, {}, rng);
}

void time_bf16_case(int rows, int cols, course::Rng& rng) {
    const std::size_t n = std::size_t(rows) * cols;
    // x, dy, dx and the copy's destination (2 bytes each), plus room for the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(4 * n * 2 + (256u << 20));
    const auto in = make_bf16_inputs(Rows::kRandom, rows, cols, rng);
    const auto start = bf16_start(rows, cols, rng);
    Bf16Run run(in, start.dx, start.dgamma, start.dbeta, {});
    course::DeviceBuffer<std::uint16_t> d_copy("copy", n);
    int calls = 0;

    // The outputs are added into, so the harness cannot poison them between calls: the calls are
    // counted, and each output must end as its start plus that many gradients (saxpy_vec4's way;
    // dgamma and dbeta, in float, prove every call's work closely, dx in bf16 loosely).
    const auto timing = course::time_against(
        [&] {
            run.call(rows, cols);
            ++calls;
        },
        [&] { course::baseline::device_copy(d_copy.data(), run.x.buffer().data(), n * 2); });

    const std::string label = std::to_string(rows) + "x" + std::to_string(cols) + " bf16";
    {
        SCOPED_TRACE("the timed run, layernorm_backward_bf16 " + label + ", " +
                     std::to_string(calls) + " calls, each adding into the outputs");
        EXPECT_TRUE(bf16_matches(run, in, start, rows, cols, calls));
    }
    // Bytes that must move: read x and dy, read and write dx (2 bytes each per element); gamma,
    // dgamma, dbeta per column and mean, rstd per row. The column sums' second read of x and dy
    // is not counted. The copy reads and writes 2 bytes per element. Shown, not judged.
    const double bytes = 4.0 * 2 * n + 2.0 * cols + 2.0 * 2 * 4 * cols + 2.0 * 4 * rows;
    course::record_bandwidth(label, timing, bytes, "copy", 2.0 * 2 * n);
}

// GPT-2's LayerNorm at 16 x 1024 tokens: rows of 1.5 KB.
TEST_F(LayerNormBackward, Bf16Bandwidth16384x768) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    COURSE_SKIP_ON_EMULATOR("a timed case");
    auto rng = test_rng();
    time_bf16_case(16384, 768, rng);
}

// 2^26 values, the contract's limit.
TEST_F(LayerNormBackward, Bf16Bandwidth16384x4096) {
    COURSE_REQUIRE_BF16();
    COURSE_REQUIRE_ENTRY_POINT(layernorm_backward_bf16);
    COURSE_SKIP_ON_EMULATOR("a timed case");
    auto rng = test_rng();
    time_bf16_case(16384, 4096, rng);
}

TEST_F(LayerNormBackward, MoreThan2To31Elements) {
    // 524163 rows of 4097 floats: the last row starts at element 2147491714, past 2^31, where a row
    // offset row * cols held in an int overflows (8.6 GB each for x, dy and dx). x and dy are made
    // on the device and repeat every kPeriod rows, so the column sums over all rows are (rows /
    // kPeriod) times a period's plus the first rows % kPeriod rows': the host computes kPeriod
    // rows.
    constexpr int kPeriod = 97;
    const int rows = 524163, cols = 4097;
    const std::size_t n = std::size_t(rows) * cols, period = std::size_t(kPeriod) * cols;
    COURSE_LARGE_CASE(3 * n * sizeof(float) + (64u << 20));
    SCOPED_TRACE(
        "524163 x 4097 (the last row starts at element 2^31 + 8066), x and dy made on the device, "
        "repeating every 97 rows");
    auto rng = test_rng();
    const std::uint64_t seed_x = rng.next_u64(), seed_dy = rng.next_u64();
    // One period of rows on the host, with the forward's statistics.
    Inputs one;
    for (std::size_t i = 0; i < period; ++i) {
        one.x.push_back(course::hashed::uniform(i, seed_x, -1.0f, 1.0f));
        one.dy.push_back(course::hashed::uniform(i, seed_dy, -1.0f, 1.0f));
    }
    one.gamma = course::random_floats(cols, 0.5f, 1.5f, rng);
    const auto forward = course::reference::layernorm(
        one.x, one.gamma, std::vector<float>(cols, 0.0f), kPeriod, cols, kLayerNormEps);
    one.mean.assign(forward.mean.begin(), forward.mean.end());
    one.rstd.assign(forward.rstd.begin(), forward.rstd.end());
    std::vector<float> mean(rows), rstd(rows);
    for (int r = 0; r < rows; ++r) mean[r] = one.mean[r % kPeriod], rstd[r] = one.rstd[r % kPeriod];
    DeviceInputs d{{"x", n}, {"dy", n}, {"gamma", one.gamma}, {"mean", mean}, {"rstd", rstd}};
    course::fill_uniform(d.x.data(), n, seed_x, -1.0f, 1.0f, period);
    course::fill_uniform(d.dy.data(), n, seed_dy, -1.0f, 1.0f, period);
    auto out = make_outputs(rows, cols);

    course::run_large_case([&] { run(d, out, rows, cols); });

    const auto want = course::reference::layernorm_backward(one.x, one.dy, one.gamma, one.mean,
                                                            one.rstd, kPeriod, cols);
    // The first rows % kPeriod rows of a period, for the column sums' remainder.
    const int rest = rows % kPeriod;
    const auto head = [&](const std::vector<float>& v, std::size_t count) {
        return std::vector<float>(v.begin(), v.begin() + std::ptrdiff_t(count));
    };
    const auto partial = course::reference::layernorm_backward(
        head(one.x, std::size_t(rest) * cols), head(one.dy, std::size_t(rest) * cols), one.gamma,
        head(one.mean, rest), head(one.rstd, rest), rest, cols);
    std::vector<double> dgamma(cols), dbeta(cols);
    for (int c = 0; c < cols; ++c) {
        dgamma[c] = (rows / kPeriod) * want.dgamma[c] + partial.dgamma[c];
        dbeta[c] = (rows / kPeriod) * want.dbeta[c] + partial.dbeta[c];
    }
    // The period's tolerances, the column sums' grown from kPeriod rows to all of them: a sum's
    // atol grows with its length, its rtol with the square root (course::Tolerance::float32).
    auto tol = tolerances(one, kPeriod, cols);
    const double growth = double(rows) / kPeriod;
    for (course::Tolerance* sum : {&tol.dgamma, &tol.dbeta}) {
        sum->atol *= growth;
        sum->rtol *= std::sqrt(growth);
    }
    const auto dx_rows = [&](const course::Window& w) {
        std::vector<double> dx(w.count);
        for (std::size_t k = 0; k < w.count; ++k) dx[k] = want.dx[(w.first + k) % period];
        return dx;
    };
    EXPECT_TRUE(course::expect_windows_close(out.dx, course::rows_past_int_range(rows, cols, rng),
                                             dx_rows, tol.dx,
                                             {"dx (flat index row * cols + col)"}));
    EXPECT_TRUE(course::expect_close(out.dgamma.download(), dgamma, tol.dgamma, {"dgamma"}));
    EXPECT_TRUE(course::expect_close(out.dbeta.download(), dbeta, tol.dbeta, {"dbeta"}));
}

}  // namespace
