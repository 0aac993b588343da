// Checker of 06_softmax_norms/rmsnorm: row lengths around a warp, the float4 width and the
// block, extreme rows (large values, values so small that eps dominates, one outlier in the last
// column), then the bandwidth at 16384 x 4096 and 4096 x 50304 against a device-to-device copy,
// then more than 2^31 elements.
#include <cmath>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/norms.h"
#include "course/testing.h"
#include "rmsnorm.h"

namespace {

class RmsNorm : public course::GpuTest {};

enum class Rows { kRandom, kLargeValues, kTinyValues, kOutlierAtEnd };

std::string describe(Rows kind) {
    switch (kind) {
        case Rows::kRandom:
            return "random rows";
        case Rows::kLargeValues:
            return "values up to +-1e4";
        case Rows::kTinyValues:
            return "values up to +-1e-3 (mean of squares below eps)";
        case Rows::kOutlierAtEnd:
            return "one outlier (300) in the last column";
    }
    return "";
}

std::vector<float> make_x(Rows kind, int rows, int cols, course::Rng& rng) {
    std::vector<float> x;
    x.reserve(std::size_t(rows) * cols);
    for (int r = 0; r < rows; ++r) {
        const float offset = rng.uniform(-2.0f, 2.0f);  // rows of different scales
        for (int c = 0; c < cols; ++c) {
            switch (kind) {
                case Rows::kRandom:
                    x.push_back(offset + rng.uniform(-1.0f, 1.0f));
                    break;
                case Rows::kLargeValues:
                    x.push_back(rng.uniform(-1e4f, 1e4f));
                    break;
                case Rows::kTinyValues:
                    x.push_back(rng.uniform(-1e-3f, 1e-3f));
                    break;
                // The outlier carries most of the row's sum of squares: a kernel that skips the
                // last column (a tail bug) is far off, which a random row cannot show.
                case Rows::kOutlierAtEnd:
                    x.push_back(c == cols - 1 ? 300.0f : rng.uniform(-1.0f, 1.0f));
                    break;
            }
        }
    }
    return x;
}

// y = x * scale * weight with scale = 1 / sqrt(sum(x^2) / cols + eps). The sum has cols positive
// terms: relative error up to Tolerance::float32(cols).rtol = 8u * sqrt(cols) (u = 2^-24), which
// the square root halves (the other half is margin). rsqrtf is accurate to 2 ulps (4u), and the
// division, eps and the two products round once each: 8u more. Every error is relative to the
// element, so there is no absolute part: y = 0 only for x = 0, and then exactly. (A dropped column
// moves a random row's scale by ~1 / (2 * cols): the outlier rows are there to catch that.)
course::Tolerance y_tolerance(int cols) {
    constexpr double u = 0x1.0p-24;
    return {0.0, course::Tolerance::float32(cols).rtol + 8 * u};
}

void expect_matches_reference(course::DeviceBuffer<float>& y, const std::vector<float>& x,
                              const std::vector<float>& weight, int rows, int cols) {
    const auto want = course::reference::rmsnorm(x, weight, rows, cols, kRmsNormEps);
    EXPECT_TRUE(course::expect_close(y.download(), want, y_tolerance(cols),
                                     {"y", course::Matrix{std::size_t(rows), std::size_t(cols)}}));
}

void check_case(Rows kind, int rows, int cols, course::Rng& rng) {
    SCOPED_TRACE(describe(kind) + ", " + std::to_string(rows) + " x " + std::to_string(cols));
    const auto x = make_x(kind, rows, cols, rng);
    const auto weight = course::random_floats(cols, 0.5f, 1.5f, rng);
    course::DeviceBuffer<float> d_x("x", x), d_weight("weight", weight), d_y("y", x.size());

    rmsnorm(d_x.data(), d_weight.data(), d_y.data(), rows, cols);

    expect_matches_reference(d_y, x, weight, rows, cols);
}

TEST_F(RmsNorm, RowLengths) {
    auto rng = test_rng();
    // 1: a single column; 7, 31, 33: not a multiple of 4 (scalar path) or of a warp; 32, 1024:
    // exactly a warp / a block of float4s; 1023, 4097: one short of / past them; 1000: a multiple
    // of 4 but not of 32 * 4; 32768, 50304: long rows, split over a cluster of blocks on Hopper;
    // 50001: long and odd (scalar path, uneven slices); 70001: a cluster of three on Hopper, more
    // than one block's shared memory before it; 204803: more than a cluster holds (x is read
    // twice).
    for (int cols :
         {1, 7, 31, 32, 33, 1000, 1023, 1024, 4097, 32768, 50304, 50001, 70001, 204803}) {
        const int rows = cols <= 33 ? 37 : cols <= 4097 ? 11 : 3;
        check_case(Rows::kRandom, rows, cols, rng);
    }
    check_case(Rows::kRandom, 1001, 4096, rng);  // Llama 7B's width, many rows
}

TEST_F(RmsNorm, ExtremeRows) {
    auto rng = test_rng();
    for (Rows kind : {Rows::kLargeValues, Rows::kTinyValues, Rows::kOutlierAtEnd})
        for (int cols : {33, 1000, 4097, 50304}) check_case(kind, 3, cols, rng);
}

void time_case(int rows, int cols, course::Rng& rng) {
    const std::size_t n = std::size_t(rows) * cols;
    // x, y, the copy's destination and the harness's two copies of y, plus room for the L2 flush
    // buffer.
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(float) + (256u << 20));
    const auto x = make_x(Rows::kRandom, rows, cols, rng);
    const auto weight = course::random_floats(cols, 0.5f, 1.5f, rng);
    course::DeviceBuffer<float> d_x("x", x), d_weight("weight", weight), d_y("y", n),
        d_copy("copy", n);

    const auto timing = course::time_against(
        [&] { rmsnorm(d_x.data(), d_weight.data(), d_y.data(), rows, cols); },
        [&] { course::baseline::device_copy(d_copy.data(), d_x.data(), n * sizeof(float)); },
        {course::TimedOutput(d_y, y_tolerance(cols))}, {course::TimedInput(d_x)});

    {
        SCOPED_TRACE("the timed run, " + std::to_string(rows) + " x " + std::to_string(cols));
        expect_matches_reference(d_y, x, weight, rows, cols);
    }
    // Bytes that must move: read x and write y (4 bytes each per element), weight read once
    // (4 * cols: every other read hits L2). The second read of each row comes from the caches
    // and is not counted. The copy reads and writes 4 bytes per element.
    const double bytes = 2.0 * 4 * n + 4.0 * cols;
    course::record_bandwidth(std::to_string(rows) + "x" + std::to_string(cols), timing, bytes,
                             "copy", 2.0 * 4 * n);
}

// 16384 x 4096: rows of 16 KB; x and y 256 MiB each.
TEST_F(RmsNorm, Bandwidth16384x4096) {
    auto rng = test_rng();
    time_case(16384, 4096, rng);
}

// 4096 x 50304: rows of 196 KB, far fewer rows in flight per SM; x and y 786 MiB each.
TEST_F(RmsNorm, Bandwidth4096x50304) {
    auto rng = test_rng();
    time_case(4096, 50304, rng);
}

TEST_F(RmsNorm, MoreThan2To31Elements) {
    // 536872 rows of 4000 floats: the last row starts at element 2147484000, just past 2^31, where
    // a row offset row * cols held in an int overflows (8.6 GB each for x and y). x is made on the
    // device; whole rows around element 2^31 and at the ends are compared with the reference, which
    // the host computes for those rows only.
    const int rows = 536872, cols = 4000;
    const std::size_t n = std::size_t(rows) * cols;
    COURSE_LARGE_CASE(2 * n * sizeof(float) + (64u << 20));
    SCOPED_TRACE("536872 x 4000 (the last row starts at element 2^31 + 352), x made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    const auto weight = course::random_floats(cols, 0.5f, 1.5f, rng);
    course::DeviceBuffer<float> d_x("x", n), d_weight("weight", weight), d_y("y", n);
    course::fill_uniform(d_x.data(), n, seed, -1.0f, 1.0f);

    course::run_large_case([&] { rmsnorm(d_x.data(), d_weight.data(), d_y.data(), rows, cols); });

    // Each window is whole rows: their reference from x recomputed by the hashed formula.
    const auto normalized = [&](const course::Window& w) {
        std::vector<float> x(w.count);
        for (std::size_t k = 0; k < w.count; ++k)
            x[k] = course::hashed::uniform(w.first + k, seed, -1.0f, 1.0f);
        return course::reference::rmsnorm(x, weight, static_cast<int>(w.count / cols), cols,
                                          kRmsNormEps);
    };
    EXPECT_TRUE(course::expect_windows_close(d_y, course::rows_past_int_range(rows, cols, rng),
                                             normalized, y_tolerance(cols),
                                             {"y (flat index row * cols + col)"}));
}

}  // namespace
