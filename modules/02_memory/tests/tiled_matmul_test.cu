// Checker of 02_memory/tiled_matmul: C = A * B against a double-precision CPU product on shapes
// around the 32-wide tiles (partial tiles along M, N and K, single rows and columns, K smaller
// than a tile), then on a product of many blocks and many K tiles, then the rate at 4096^3
// against cuBLAS SGEMM timed in the same run.
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/linalg.h"
#include "course/testing.h"
#include "tiled_matmul.h"

namespace {

class TiledMatmul : public course::GpuTest {};

// Each element of C is a float32 dot product of K terms a * b with a, b uniform in [-1, 1):
// |a * b| is 0.25 on average.
course::Tolerance dot_tolerance(int K) { return course::Tolerance::float32(K, 0.25); }

std::string describe_shape(int M, int N, int K) {
    return "M = " + std::to_string(M) + ", N = " + std::to_string(N) +
           ", K = " + std::to_string(K) + " (A is M x K, B is K x N, C is M x N)";
}

void check_shape(int M, int N, int K, course::Rng& rng) {
    SCOPED_TRACE(describe_shape(M, N, K));
    const auto A = course::random_floats(static_cast<std::size_t>(M) * K, -1.0f, 1.0f, rng);
    const auto B = course::random_floats(static_cast<std::size_t>(K) * N, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_A("A", A), d_B("B", B);
    course::DeviceBuffer<float> d_C("C", static_cast<std::size_t>(M) * N);

    tiled_matmul(d_A.data(), d_B.data(), d_C.data(), M, N, K);

    EXPECT_TRUE(course::expect_close(
        d_C.download(), course::reference::matmul(A, B, M, N, K), dot_tolerance(K),
        {"C", course::Matrix{static_cast<std::size_t>(M), static_cast<std::size_t>(N)}}));
}

TEST_F(TiledMatmul, EdgeShapes) {
    auto rng = test_rng();
    // {M, N, K}: a single product; K = 33, one whole K tile and one element; every dimension
    // just under, at and just over a tile (31, 32, 33); K = 1 and K = 17, less than one tile;
    // several tiles with partial ones along all three; a single row and a single column of C.
    const int shapes[][3] = {{1, 1, 1},    {1, 1, 33},    {31, 33, 17},   {32, 32, 32},
                             {33, 31, 65}, {64, 96, 128}, {100, 37, 129}, {37, 100, 1},
                             {1, 1000, 3}, {1000, 1, 3}};
    for (const auto& s : shapes) check_shape(s[0], s[1], s[2], rng);
}

TEST_F(TiledMatmul, ExtentsAtTheirLimit) {
    auto rng = test_rng();
    // M, N and K each at the contract's 2^20, the others small: 2^20 rows of C are 32768 tiles
    // of 32 along grid.y (65535 at most: a block of 16 rows or fewer would need more); 2^20
    // columns along grid.x; K = 2^20, 32768 K tiles.
    const int shapes[][3] = {{1 << 20, 3, 5}, {3, 1 << 20, 5}, {5, 3, 1 << 20}};
    for (const auto& s : shapes) check_shape(s[0], s[1], s[2], rng);
}

TEST_F(TiledMatmul, ManyBlocksAndKTiles) {
    auto rng = test_rng();
    // 47 x 33 = 1551 blocks (more than an H100 holds at once, so SMs are full and warps drift
    // apart), 10 K tiles, the last one partial: a tile overwritten while another warp still
    // reads it (a missing __syncthreads()) shows up here.
    check_shape(1500, 1031, 300, rng);
}

TEST_F(TiledMatmul, Throughput) {
    const int n = 4096;
    const std::size_t count = static_cast<std::size_t>(n) * n;
    // A, B, C, cuBLAS's C and the harness's two copies of C: 64 MiB each, plus the timer's L2
    // flush buffer.
    COURSE_REQUIRE_MEMORY(6 * count * sizeof(float) + (256u << 20));
    auto rng = test_rng();
    const auto A = course::random_floats(count, -1.0f, 1.0f, rng);
    const auto B = course::random_floats(count, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_A("A", A), d_B("B", B), d_C("C", count),
        d_C_cublas("cuBLAS's C", count);

    const auto timing = course::time_against(
        [&] { tiled_matmul(d_A.data(), d_B.data(), d_C.data(), n, n, n); },
        [&] { course::baseline::cublas_sgemm(n, n, n, d_A.data(), d_B.data(), d_C_cublas.data()); },
        {course::TimedOutput(d_C, dot_tolerance(n))}, {course::TimedInput(d_A)});

    // The timed output must be right too. The full CPU product would take minutes: check whole
    // lines of C instead, a random row and the last one, a random column and the last one (the
    // last row and column are where a tail bug would show, if there were one at this size).
    SCOPED_TRACE(describe_shape(n, n, n));
    const auto C = d_C.download();
    const int some_line = static_cast<int>(rng.uniform_int(0, n - 2));
    for (int row : {some_line, n - 1}) {
        std::vector<float> got(C.begin() + static_cast<std::size_t>(row) * n,
                               C.begin() + static_cast<std::size_t>(row + 1) * n);
        std::vector<double> want(n);
        for (int col = 0; col < n; ++col)
            want[col] = course::reference::matmul_element(A, B, n, n, row, col);
        EXPECT_TRUE(course::expect_close(got, want, dot_tolerance(n),
                                         {"C row " + std::to_string(row) + " (index = column)"}));
    }
    for (int col : {some_line, n - 1}) {
        std::vector<float> got(n);
        std::vector<double> want(n);
        for (int row = 0; row < n; ++row) {
            got[row] = C[static_cast<std::size_t>(row) * n + col];
            want[row] = course::reference::matmul_element(A, B, n, n, row, col);
        }
        EXPECT_TRUE(course::expect_close(got, want, dot_tolerance(n),
                                         {"C column " + std::to_string(col) + " (index = row)"}));
    }
    // C = A * B does n^3 multiply-adds: 2 * n^3 floating-point operations, for both.
    const double flops = 2.0 * n * n * n;
    course::record_flops("4096x4096x4096", timing, flops, "cublas_sgemm", flops);
}

}  // namespace
