// Checker of 01_basics/naive_matmul: small shapes against a full CPU product (non-square, so
// swapped rows and columns or swapped M and N show; not multiples of 32 or 8, so the partial
// blocks show), then the FLOP rate at 2048 x 2048 x 2048 against cuBLAS SGEMM timed in the same
// run, its output spot-checked.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/linalg.h"
#include "course/testing.h"
#include "naive_matmul.h"

namespace {

class NaiveMatmul : public course::GpuTest {};

struct Shape {
    std::size_t M, N, K;
};

std::string describe(const Shape& shape) {
    return std::to_string(shape.M) + "x" + std::to_string(shape.N) + "x" + std::to_string(shape.K) +
           " (M x N x K)";
}

// Inputs uniform in [-1, 1]: a product a_k * b_k has typical size E|a| E|b| = 1/4.
constexpr double kTypicalProduct = 0.25;

void run(const Shape& shape, course::DeviceBuffer<float>& A, course::DeviceBuffer<float>& B,
         course::DeviceBuffer<float>& C) {
    naive_matmul(static_cast<int>(shape.M), static_cast<int>(shape.N), static_cast<int>(shape.K),
                 A.data(), B.data(), C.data());
}

TEST_F(NaiveMatmul, SmallShapes) {
    auto rng = test_rng();
    // 1x1x1: one thread, the rest of its block must stay out; 31x33x17 and 127x129x131: nothing
    // is a multiple of anything and M != N; 64x64x64: whole blocks only; 1x300x7 and 300x1x7: a
    // row and a column vector (M and N swapped land far off); K = 1: a single product.
    // Then the contract's extents: M = 65535, its limit (a grid with one block row per row of C
    // just fits), and N and K of 2^20.
    for (const Shape shape :
         {Shape{1, 1, 1}, Shape{31, 33, 17}, Shape{64, 64, 64}, Shape{127, 129, 131},
          Shape{1, 300, 7}, Shape{300, 1, 7}, Shape{33, 31, 1}, Shape{65535, 3, 5},
          Shape{3, 1 << 20, 5}, Shape{5, 3, 1 << 20}}) {
        SCOPED_TRACE(describe(shape));
        const auto a = course::random_floats(shape.M * shape.K, -1.0f, 1.0f, rng);
        const auto b = course::random_floats(shape.K * shape.N, -1.0f, 1.0f, rng);
        course::DeviceBuffer<float> d_a("A", a), d_b("B", b), d_c("C", shape.M * shape.N);

        run(shape, d_a, d_b, d_c);

        // A sum of K products: the tolerance grows with K (see Tolerance::float32), while a
        // missing or doubled product (about 1/4) stays far outside it.
        EXPECT_TRUE(course::expect_close(d_c.download(),
                                         course::reference::matmul(a, b, shape.M, shape.N, shape.K),
                                         course::Tolerance::float32(shape.K, kTypicalProduct),
                                         {"C", course::Matrix{shape.M, shape.N}}));
    }
}

// `count` distinct indices in [0, extent), always including the last one, sorted.
std::vector<std::size_t> sample_indices(std::size_t count, std::size_t extent, course::Rng& rng) {
    std::vector<std::size_t> picked{extent - 1};
    while (picked.size() < count) {
        const auto index =
            static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(extent) - 2));
        if (std::find(picked.begin(), picked.end(), index) == picked.end()) picked.push_back(index);
    }
    std::sort(picked.begin(), picked.end());
    return picked;
}

std::string join(const std::vector<std::size_t>& values) {
    std::string text;
    for (std::size_t value : values) text += (text.empty() ? "" : " ") + std::to_string(value);
    return text;
}

TEST_F(NaiveMatmul, Throughput) {
    // 2048^3 is 17 GFLOP: 2.5 ms per call for this exercise's solution on an H100, and well under
    // a second for a slow first version (x along the rows reads B uncoalesced, several times
    // slower) or a small GPU, so the 25+ timed calls take seconds, not minutes (4096^3 would be 8x
    // that). Matmul is compute-bound: the 16 MiB per matrix need not exceed L2, what is measured
    // is the rate of the 2 * M * N * K FLOPs.
    const Shape shape{2048, 2048, 2048};
    // A, B, C, cuBLAS's C and the harness's two copies of C, plus the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(6 * shape.M * shape.N * sizeof(float) + (256u << 20));
    SCOPED_TRACE(describe(shape));
    auto rng = test_rng();
    const auto a = course::random_floats(shape.M * shape.K, -1.0f, 1.0f, rng);
    const auto b = course::random_floats(shape.K * shape.N, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_a("A", a), d_b("B", b), d_c("C", shape.M * shape.N),
        d_c_cublas("C of cuBLAS", shape.M * shape.N);

    const auto timing = course::time_against(
        [&] { run(shape, d_a, d_b, d_c); },
        [&] {
            course::baseline::cublas_sgemm(static_cast<int>(shape.M), static_cast<int>(shape.N),
                                           static_cast<int>(shape.K), d_a.data(), d_b.data(),
                                           d_c_cublas.data());
        },
        {course::TimedOutput(d_c, course::Tolerance::float32(shape.K, kTypicalProduct))},
        {course::TimedInput(d_a)});

    // The timed output must be right too. A full CPU product would take minutes: check a 16 x 32
    // grid of elements (random rows and columns, the last row and the last column among them).
    const auto rows = sample_indices(16, shape.M, rng);
    const auto cols = sample_indices(32, shape.N, rng);
    SCOPED_TRACE("spot-checked rows: " + join(rows) + "; columns: " + join(cols));
    const auto c = d_c.download();
    std::vector<float> got;
    std::vector<double> want;
    for (std::size_t row : rows) {
        for (std::size_t col : cols) {
            got.push_back(c[row * shape.N + col]);
            want.push_back(course::reference::matmul_element(a, b, shape.N, shape.K, row, col));
        }
    }
    EXPECT_TRUE(course::expect_close(
        got, want, course::Tolerance::float32(shape.K, kTypicalProduct),
        {"C, spot checks ((i, j) = i-th spot-checked row, j-th spot-checked column)",
         course::Matrix{rows.size(), cols.size()}}));
    // C = A * B: M * N dot products of length K, each K multiplies and K adds.
    const double flops = 2.0 * shape.M * shape.N * shape.K;
    course::record_flops("2048x2048x2048", timing, flops, "cublas_sgemm", flops);
}

}  // namespace
