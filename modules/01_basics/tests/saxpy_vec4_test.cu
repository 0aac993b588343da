// Checker of 01_basics/saxpy_vec4: arrays that start 0, 1, 2 or 3 floats past a 16-byte boundary
// (so the head is 0, 3, 2 or 1 floats long) times lengths that leave every tail length, then the
// bandwidth on 2^25 floats against a device-to-device copy timed in the same run, then more than
// 2^31 floats (64-bit indices).
//
// y is updated in place, so an element that is skipped keeps its old value and one that is
// updated twice gains a * x[i] twice: both are far outside the tolerance, because a and x are
// kept away from zero.
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/testing.h"
#include "saxpy_vec4.h"

namespace {

class SaxpyVec4 : public course::GpuTest {};

// The elements [first, first + count) of a host vector.
std::vector<float> slice(const std::vector<float>& values, std::size_t first, std::size_t count) {
    return {values.begin() + static_cast<std::ptrdiff_t>(first),
            values.begin() + static_cast<std::ptrdiff_t>(first + count)};
}

// One call on arrays that start `offset` floats into their buffers. The buffers themselves are
// 16-byte aligned (cudaMalloc gives 256), so x and y start `offset` floats past a 16-byte
// boundary. The `offset` floats before y[0] are data of someone else: they must keep their values.
void check_case(std::size_t offset, std::size_t n, course::Rng& rng) {
    SCOPED_TRACE("n = " + std::to_string(n) + ", x and y start " + std::to_string(offset) +
                 " floats past a 16-byte boundary");
    // |a| in [0.5, 2] and x in [0.5, 1.5]: every element moves by at least 0.25.
    const float a = rng.uniform(0.5f, 2.0f) * (rng.uniform01() < 0.5 ? -1.0f : 1.0f);
    const auto x_all = course::random_floats(offset + n, 0.5f, 1.5f, rng);
    const auto y_all = course::random_floats(offset + n, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_x("x", x_all), d_y("y", y_all);

    saxpy_vec4(a, d_x.data() + offset, d_y.data() + offset, n);

    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i)
        want[i] = static_cast<double>(a) * x_all[offset + i] + y_all[offset + i];
    const auto got = d_y.download();
    // Two terms, a * x[i] (about |a|) and y[i]: one rounding with a fused multiply-add, two
    // without; float32(2, |a|) holds both and stays far below the 0.25 of a skipped element.
    EXPECT_TRUE(course::expect_close(slice(got, offset, n), want,
                                     course::Tolerance::float32(2, std::fabs(a)), {"y"}));
    EXPECT_TRUE(course::expect_equal(slice(got, 0, offset), slice(y_all, 0, offset),
                                     {"the floats just before y[0] (not part of y)"}));
}

TEST_F(SaxpyVec4, EdgeSizesAndOffsets) {
    auto rng = test_rng();
    // 1, 3: shorter than a float4 (a head, or a tail, and nothing else); 4, 5: one float4 when
    // aligned; 31, 33: around a warp; 1009: prime; 2^24 + 3: many blocks and a 3-float tail.
    // With the 4 offsets this covers every head length (0..3) and every tail length (0..3).
    for (std::size_t offset = 0; offset < 4; ++offset) {
        for (std::size_t n :
             {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{5}, std::size_t{31},
              std::size_t{33}, std::size_t{1009}, (std::size_t{1} << 24) + 3}) {
            check_case(offset, n, rng);
        }
    }
}

TEST_F(SaxpyVec4, Bandwidth) {
    // 2^25 floats: x, y and the copy's destination are 128 MiB each, x and y together 256 MiB,
    // far above any L2, so this measures device memory.
    const std::size_t n = std::size_t{1} << 25;
    COURSE_REQUIRE_MEMORY(3 * n * sizeof(float) + (256u << 20));
    auto rng = test_rng();
    // The timing calls saxpy_vec4 many times on the same y, so y ends up as y0 + calls * a * x.
    // These inputs make that exact: a = 3/2, x = m/16 with m in 8..24, y0 = j/32 with j in
    // -32..32. Every a * x[i] is 3m/32 and every partial sum a multiple of 1/32 whose numerator
    // stays below 2^15 (a few hundred calls), so each float operation is exact, in any order,
    // with or without fused multiply-adds, and the result can be compared exactly.
    const float a = 1.5f;
    std::vector<float> x(n), y(n);
    const auto x_sixteenths = course::random_ints(n, 8, 24, rng);
    const auto y_thirty_seconds = course::random_ints(n, -32, 32, rng);
    for (std::size_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(x_sixteenths[i]) / 16.0f;
        y[i] = static_cast<float>(y_thirty_seconds[i]) / 32.0f;
    }
    course::DeviceBuffer<float> d_x("x", x), d_y("y", y), d_copy("copy", n);

    int calls = 0;
    const auto timing = course::time_against(
        [&] {
            saxpy_vec4(a, d_x.data(), d_y.data(), n);
            ++calls;
        },
        [&] { course::baseline::device_copy(d_copy.data(), d_x.data(), n * sizeof(float)); });

    // The timed output must be right too: every call added a * x[i] once.
    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = y[i] + calls * (static_cast<double>(a) * x[i]);
    EXPECT_TRUE(course::expect_close(d_y.download(), want, course::Tolerance::exact(), {"y"}));
    // saxpy reads x and y and writes y: 3 * 4n bytes. The copy reads and writes 4n bytes each.
    course::record_bandwidth("n=2^25", timing, 3.0 * sizeof(float) * n, "copy",
                             2.0 * sizeof(float) * n);
}

TEST_F(SaxpyVec4, MoreThan2To31Elements) {
    // 2^31 + 2^20 + 6 floats (8.6 GB per array), x and y one float past a 16-byte boundary: a
    // head of 3, float4s across 2^31, a tail of 3 past it. An index held in an int overflows at
    // 2^31.
    const std::size_t n = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 6, offset = 1;
    COURSE_LARGE_CASE(2 * (n + offset) * sizeof(float) + (64u << 20));
    SCOPED_TRACE(
        "n = 2^31 + 2^20 + 6, x and y 1 float past a 16-byte boundary, inputs made on "
        "the device");
    auto rng = test_rng();
    const std::uint64_t seed_x = rng.next_u64(), seed_y = rng.next_u64();
    const float a = 1.5f;
    course::DeviceBuffer<float> d_x("x", n + offset), d_y("y", n + offset);
    // Element i of x and y is the hashed value of i + offset: the buffers' first float is padding.
    course::fill_uniform(d_x.data(), n + offset, seed_x, 0.5f, 1.5f);
    course::fill_uniform(d_y.data(), n + offset, seed_y, -1.0f, 1.0f);

    course::run_large_case([&] { saxpy_vec4(a, d_x.data() + offset, d_y.data() + offset, n); });

    // The windows are of the whole buffer y (index = element + 1); the padding float must keep
    // its value.
    const auto updated = [&](const course::Window& w) {
        std::vector<double> y(w.count);
        for (std::size_t k = 0; k < w.count; ++k) {
            const std::size_t i = w.first + k;
            const double y0 = course::hashed::uniform(i, seed_y, -1.0f, 1.0f);
            y[k] =
                i < offset ? y0 : a * double(course::hashed::uniform(i, seed_x, 0.5f, 1.5f)) + y0;
        }
        return y;
    };
    EXPECT_TRUE(course::expect_windows_close(d_y, course::windows_past_int_range(n + offset, rng),
                                             updated, course::Tolerance::float32(2, a),
                                             {"y's buffer (y[i] at index i + 1)"}));
}

}  // namespace
