// Checker of 02_memory/transpose: exact results on the shapes around the 32 x 32 tile (one
// element, a single row or column, partial tiles on the right and bottom edges, many blocks),
// then the bandwidth on 16384 x 16384 against a device-to-device copy and against the naive
// transpose of naive_transpose.cuh, both timed in the same run. The contract's extremes too:
// 2^20 rows or columns, and (last) 2^31 - 41708 elements.
#include <memory>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/linalg.h"
#include "course/testing.h"
#include "naive_transpose.cuh"
#include "transpose.h"

namespace {

// out is cols x rows: messages name (row, col) of out.
course::CompareOptions out_options(int rows, int cols) {
    return {"out", course::Matrix{static_cast<std::size_t>(cols), static_cast<std::size_t>(rows)}};
}

std::string describe_shape(int rows, int cols) {
    return "in is " + std::to_string(rows) + " x " + std::to_string(cols) + ", out is " +
           std::to_string(cols) + " x " + std::to_string(rows);
}

// 16384 x 16384 floats: 1 GiB in and 1 GiB out, far above any L2. Made once for both timed
// tests. The input is made on the device, and the reference is written in out's order with each
// value recomputed from its index in `in`: no gigabyte upload, no cache-hostile host transpose.
struct LargeCase {
    static constexpr int kSize = 16384;
    static constexpr std::size_t kCount = std::size_t{kSize} * kSize;
    static constexpr std::size_t kBytes = kCount * sizeof(float);
    // in, out, the baseline's out and the harness's two copies of out (every timed call is
    // checked against the one of its input set), plus room for the timer's L2 flush buffer.
    static constexpr std::size_t kDeviceBytes = 5 * kBytes + (256u << 20);

    explicit LargeCase(std::uint64_t seed)
        : d_in("in", kCount),
          d_out("out", kCount),
          d_other("baseline's out", kCount),
          want(kCount) {
        course::fill_uniform(d_in.data(), kCount, seed, -1.0f, 1.0f);
        const std::size_t n = kSize;
        for (std::size_t c = 0; c < n; ++c)  // out[c][r] = in[r][c]
            for (std::size_t r = 0; r < n; ++r)
                want[c * n + r] = course::hashed::uniform(r * n + c, seed, -1.0f, 1.0f);
    }

    // The timed output must be right too.
    void check_out() {
        SCOPED_TRACE(describe_shape(kSize, kSize));
        EXPECT_TRUE(course::expect_equal(d_out.download(), want, out_options(kSize, kSize)));
    }

    course::DeviceBuffer<float> d_in, d_out, d_other;
    std::vector<float> want;
};

class Transpose : public course::GpuTest {
  protected:
    // The large case, made by the first test that needs it, with `out` poisoned again. Its
    // inputs come from a stream of their own, whichever test comes first.
    static LargeCase& large_case() {
        if (!large_)
            large_ = std::make_unique<LargeCase>(course::rng_for("Transpose.LargeCase").next_u64());
        large_->d_out.poison();
        return *large_;
    }
    // Device memory the large case still has to allocate (none once it exists).
    static std::size_t large_case_bytes_needed() { return large_ ? 0 : LargeCase::kDeviceBytes; }
    static void TearDownTestSuite() { large_.reset(); }
    // Its memory back, for the case past 2^30 elements.
    static void drop_large_case() { large_.reset(); }

  private:
    static inline std::unique_ptr<LargeCase> large_;
};

void check_shape(int rows, int cols, course::Rng& rng) {
    SCOPED_TRACE(describe_shape(rows, cols));
    const auto in = course::random_floats(static_cast<std::size_t>(rows) * cols, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_in("in", in), d_out("out", in.size());

    transpose(d_in.data(), d_out.data(), rows, cols);

    // A transpose moves values without arithmetic: they must match bit for bit.
    EXPECT_TRUE(course::expect_equal(d_out.download(), course::reference::transpose(in, rows, cols),
                                     out_options(rows, cols)));
}

TEST_F(Transpose, EdgeShapes) {
    auto rng = test_rng();
    // One element; a single row and a single column (33: one full tile and one element); around
    // the 32 x 32 tile (partial tiles on the right, at the bottom, both); 100 x 37 and 37 x 100:
    // several tiles, non-square, both edges partial; 1000 x 1 and 1 x 1000: long thin.
    const int shapes[][2] = {{1, 1},   {1, 33},   {33, 1},   {31, 33},  {32, 32},
                             {33, 31}, {100, 37}, {37, 100}, {1000, 1}, {1, 1000}};
    for (const auto& shape : shapes) check_shape(shape[0], shape[1], rng);
}

TEST_F(Transpose, ExtentsAtTheirLimit) {
    auto rng = test_rng();
    // rows and cols at the contract's 2^20, the other small: 2^20 / 32 = 32768 tiles along one
    // axis (a block of 16 rows or fewer along grid.y would need more than its 65535).
    check_shape(1 << 20, 3, rng);
    check_shape(3, 1 << 20, rng);
}

TEST_F(Transpose, ManyBlocks) {
    auto rng = test_rng();
    // Thousands of blocks of random data: a block that reads its tile before every warp has
    // written it (a missing __syncthreads()) gets another block's values, or garbage, somewhere.
    // 1999 and 1531 are primes: partial tiles on both edges, and rows != cols.
    check_shape(1999, 1531, rng);
    check_shape(2048, 4096, rng);
}

TEST_F(Transpose, BandwidthAgainstCopy) {
    COURSE_REQUIRE_MEMORY(large_case_bytes_needed());
    LargeCase& large = large_case();
    const int n = LargeCase::kSize;

    const auto timing =
        course::time_against([&] { transpose(large.d_in.data(), large.d_out.data(), n, n); },
                             [&] {
                                 course::baseline::device_copy(
                                     large.d_other.data(), large.d_in.data(), LargeCase::kBytes);
                             },
                             {course::TimedOutput(large.d_out)}, {course::TimedInput(large.d_in)});

    large.check_out();
    // The transpose reads 4 * n^2 bytes and writes as many; so does the copy.
    course::record_bandwidth("16384x16384", timing, 2.0 * LargeCase::kBytes, "copy",
                             2.0 * LargeCase::kBytes);
}

TEST_F(Transpose, BandwidthAgainstNaive) {
    COURSE_REQUIRE_MEMORY(large_case_bytes_needed());
    LargeCase& large = large_case();
    const int n = LargeCase::kSize;

    // A naive sample takes about 7 times as long as a good transpose: 50 ms of the learner's
    // samples (and at least 25 of each) pin the ratio down well enough, in a fraction of the time.
    course::BenchOptions options;
    options.min_time_ms = 50;
    const auto timing = course::time_against(
        [&] { transpose(large.d_in.data(), large.d_out.data(), n, n); },
        [&] { naive_transpose(large.d_in.data(), large.d_other.data(), n, n); },
        {course::TimedOutput(large.d_out)}, {course::TimedInput(large.d_in)}, options);

    large.check_out();
    // Both transposes read 4 * n^2 bytes and write as many.
    course::record_bandwidth("16384x16384 vs naive", timing, 2.0 * LargeCase::kBytes,
                             "naive_transpose", 2.0 * LargeCase::kBytes);
}

// The contract's rows * cols < 2^31 at its end: 46340 x 46341 = 2^31 - 41708 floats, past 2^30
// (4 bytes each: a byte offset held in 32 bits wraps, at element 2^29 when signed). The input is
// made on the device; the output is compared in windows around 2^29, 2^30, the ends and random
// places, each value recomputed from its index in `in`. Last, as every large case.
TEST_F(Transpose, PastTwoTo30Elements) {
    drop_large_case();
    const int rows = 46340, cols = 46341;
    const std::size_t n = std::size_t{rows} * cols;
    COURSE_LARGE_CASE(2 * n * sizeof(float) + (64u << 20));
    SCOPED_TRACE(describe_shape(rows, cols) + ", in made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> d_in("in", n), d_out("out", n);
    course::fill_uniform(d_in.data(), n, seed, -1.0f, 1.0f);

    course::run_large_case([&] { transpose(d_in.data(), d_out.data(), rows, cols); });

    const auto moved = [&](const course::Window& w) {  // out[c][r] = in[r][c]
        std::vector<float> values(w.count);
        for (std::size_t k = 0; k < w.count; ++k) {
            const std::size_t c = (w.first + k) / rows, r = (w.first + k) % rows;
            values[k] = course::hashed::uniform(r * cols + c, seed, -1.0f, 1.0f);
        }
        return values;
    };
    EXPECT_TRUE(course::expect_windows_close(d_out, course::windows_past_int_range(n, rng), moved,
                                             course::Tolerance::exact(), {"out"}));
}

}  // namespace
