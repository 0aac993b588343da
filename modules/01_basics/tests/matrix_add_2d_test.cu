// Checker of 01_basics/matrix_add_2d: shapes with partial blocks on both edges, non-square ones
// (for swapped x and y) and leading dimensions wider than the rows (for r * cols used in place of
// r * ld, and for writes into the padding), then the bandwidth on a 256 MiB+ problem against a
// device-to-device copy timed in the same run, then more than 2^31 elements (64-bit offsets) and
// a row of 2^30 floats (the contract's largest).
//
// C's padding starts as the poison (NaN) and must still be NaN afterwards. A's and B's padding
// hold random numbers, so a kernel that adds ld columns instead of cols leaves numbers there.
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/testing.h"
#include "matrix_add_2d.h"

namespace {

class MatrixAdd2d : public course::GpuTest {};

struct Shape {
    std::size_t rows, cols, ld;
};

std::string describe(const Shape& shape) {
    return std::to_string(shape.rows) + " x " + std::to_string(shape.cols) + ", ld " +
           std::to_string(shape.ld);
}

// Compares C (rows * ld floats, as downloaded) with A + B: the rows x cols elements against the
// sums, the padding against "never written".
void expect_sum_and_untouched_padding(const std::vector<float>& c, const std::vector<float>& a,
                                      const std::vector<float>& b, const Shape& shape) {
    std::vector<float> got, want, padding;
    got.reserve(shape.rows * shape.cols);
    want.reserve(shape.rows * shape.cols);
    padding.reserve(shape.rows * (shape.ld - shape.cols));
    for (std::size_t r = 0; r < shape.rows; ++r) {
        for (std::size_t col = 0; col < shape.cols; ++col) {
            const std::size_t i = r * shape.ld + col;
            got.push_back(c[i]);
            want.push_back(a[i] + b[i]);  // one rounding, as on the GPU
        }
        for (std::size_t col = shape.cols; col < shape.ld; ++col)
            padding.push_back(c[r * shape.ld + col]);
    }
    EXPECT_TRUE(course::expect_close(got, want, course::Tolerance::float32(),
                                     {"C", course::Matrix{shape.rows, shape.cols}}));
    // A NaN reference accepts only NaN: the poison that the padding held before the call.
    const std::vector<float> poison(padding.size(), std::numeric_limits<float>::quiet_NaN());
    EXPECT_TRUE(course::expect_close(
        padding, poison, course::Tolerance::exact(),
        {"C's padding (columns cols..ld-1 of each row, which must not be written)",
         course::Matrix{shape.rows, shape.ld - shape.cols}}));
}

TEST_F(MatrixAdd2d, EdgeShapes) {
    auto rng = test_rng();
    // 1 x 1 (alone and in a padded row); 31 x 33 and 33 x 31: partial blocks on both edges, not
    // square; 37 x 1000 in rows of 1024 and 1000 x 37 in rows of 64: padded, and swapped x/y or
    // rows/cols land far off; a single row and a single column; 65535 rows, the contract's
    // largest (a grid of one row per block along y just fits).
    for (const Shape shape : {Shape{1, 1, 1}, Shape{1, 1, 4}, Shape{31, 33, 33}, Shape{33, 31, 40},
                              Shape{37, 1000, 1024}, Shape{1000, 37, 64}, Shape{1, 1009, 1024},
                              Shape{1009, 1, 3}, Shape{65535, 3, 4}}) {
        SCOPED_TRACE(describe(shape));
        const std::size_t count = shape.rows * shape.ld;
        const auto a = course::random_floats(count, -1.0f, 1.0f, rng);
        const auto b = course::random_floats(count, -1.0f, 1.0f, rng);
        course::DeviceBuffer<float> d_a("A", a), d_b("B", b), d_c("C", count);

        matrix_add_2d(d_a.data(), d_b.data(), d_c.data(), static_cast<int>(shape.rows),
                      static_cast<int>(shape.cols), static_cast<int>(shape.ld));

        expect_sum_and_untouched_padding(d_c.download(), a, b, shape);
    }
}

TEST_F(MatrixAdd2d, Bandwidth) {
    // 8192 x 4096 floats, ld = cols (a plain matrix, so the rate compares directly with a copy):
    // A, B, C and the copy's destination are 128 MiB each (A, B, C together 384 MiB), far above
    // any L2, so this measures device memory.
    const Shape shape{8192, 4096, 4096};
    const std::size_t count = shape.rows * shape.ld;
    // A, B, C, the copy's destination and the harness's two copies of C (every timed call is
    // checked against the one of its input set), plus the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(6 * count * sizeof(float) + (256u << 20));
    SCOPED_TRACE(describe(shape));
    auto rng = test_rng();
    const auto a = course::random_floats(count, -1.0f, 1.0f, rng);
    const auto b = course::random_floats(count, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_a("A", a), d_b("B", b), d_c("C", count), d_copy("copy", count);

    const auto timing = course::time_against(
        [&] {
            matrix_add_2d(d_a.data(), d_b.data(), d_c.data(), static_cast<int>(shape.rows),
                          static_cast<int>(shape.cols), static_cast<int>(shape.ld));
        },
        [&] { course::baseline::device_copy(d_copy.data(), d_a.data(), count * sizeof(float)); },
        {course::TimedOutput(d_c, course::Tolerance::float32())}, {course::TimedInput(d_a)});

    // The timed output must be right too.
    expect_sum_and_untouched_padding(d_c.download(), a, b, shape);
    // C = A + B reads A and B and writes C: 3 * 4 * rows * cols bytes. The copy reads and writes
    // 4 * rows * cols bytes each.
    const double elements = static_cast<double>(shape.rows * shape.cols);
    course::record_bandwidth("8192x4096", timing, 3.0 * sizeof(float) * elements, "copy",
                             2.0 * sizeof(float) * elements);
}

// A large case: the inputs made on the device, C compared in windows (around 2^29, 2^30 and 2^31
// where C reaches them, and the ends), padding included.
void check_large(const Shape& shape, course::Rng& rng) {
    const std::size_t count = shape.rows * shape.ld;
    SCOPED_TRACE(describe(shape) + ", inputs made on the device");
    const std::uint64_t seed_a = rng.next_u64(), seed_b = rng.next_u64();
    course::DeviceBuffer<float> d_c("C", count), d_a("A", count), d_b("B", count);
    course::fill_uniform(d_a.data(), count, seed_a, -1.0f, 1.0f);
    course::fill_uniform(d_b.data(), count, seed_b, -1.0f, 1.0f);

    course::run_large_case([&] {
        matrix_add_2d(d_a.data(), d_b.data(), d_c.data(), static_cast<int>(shape.rows),
                      static_cast<int>(shape.cols), static_cast<int>(shape.ld));
    });

    // Flat indices of C's buffer: a sum in the rows' first cols floats, the untouched poison
    // (NaN) in their padding.
    const auto sums = [&](const course::Window& w) {
        std::vector<float> c(w.count);
        for (std::size_t k = 0; k < w.count; ++k) {
            const std::size_t i = w.first + k;
            c[k] = i % shape.ld < shape.cols ? course::hashed::uniform(i, seed_a, -1.0f, 1.0f) +
                                                   course::hashed::uniform(i, seed_b, -1.0f, 1.0f)
                                             : std::numeric_limits<float>::quiet_NaN();
        }
        return c;
    };
    EXPECT_TRUE(course::expect_windows_close(d_c, course::windows_past_int_range(count, rng), sums,
                                             course::Tolerance::float32(),
                                             {"C (flat index r * ld + c)"}));
}

TEST_F(MatrixAdd2d, MoreThan2To31Elements) {
    // 40000 rows of 53687 columns in rows of 53690 floats: rows * ld = 2147600000, just past
    // 2^31, where a row offset row * ld held in an int overflows. 8.6 GB per matrix.
    const Shape shape{40000, 53687, 53690};
    COURSE_LARGE_CASE(3 * shape.rows * shape.ld * sizeof(float) + (64u << 20));
    auto rng = test_rng();
    check_large(shape, rng);
}

TEST_F(MatrixAdd2d, RowOf2To30) {
    // One row of 2^30 - 5 columns in a row of 2^30 floats, the contract's largest: 4.3 GB per
    // matrix, past 2^29 where a byte offset held in an int wraps.
    const Shape shape{1, (std::size_t{1} << 30) - 5, std::size_t{1} << 30};
    COURSE_LARGE_CASE(3 * shape.rows * shape.ld * sizeof(float) + (64u << 20));
    auto rng = test_rng();
    check_large(shape, rng);
}

}  // namespace
