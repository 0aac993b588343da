// Checker of 09_quantization/mxfp8_gemm: C = A^ B^T for MXFP8 A and B against a double-precision
// CPU product of the dequantized matrices (common/include/course/reference/quantize.h), their
// blocks of sizes 2^-8 .. 2^8 apart so that a scale from the wrong block, or none, is visibly
// wrong; shapes with partial tiles along M and N, K from one block to 8192 and K tails of every
// tile width. Every shape runs three times into a C full of NaN: a correct kernel writes every
// element and gives the same bits every run. A failure names the mistake where the output shows
// one: the block scales left out, E8M0's bias (C off by 2 or 4), a scale per 64 values of k
// instead of 32, the last partial K tile dropped, a race. Then the rate at 4096^3 against cuBLAS's
// bf16 GEMM on the same values in bf16 (dequantized, they are bf16 exactly): the judged case.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/linalg.h"
#include "course/reference/quantize.h"
#include "course/testing.h"
#include "mxfp8_gemm.h"
#include "quant_checks.h"

namespace {

namespace ref = course::reference;

class Mxfp8Gemm : public quant::TensorCoreTest {};

struct Shape {
    int M, N, K;
};

std::size_t count(int rows, int cols) {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

// An MXFP8 matrix: what the exercise gets, and its values for the references.
struct MxMatrix {
    ref::MxBlocks blocks;
    std::vector<float> values;  // dequantized
};

MxMatrix random_mx(int rows, int cols, course::Rng& rng) {
    auto blocks = ref::quantize_mxfp8(quant::weights(rows, cols, kMxBlock, rng, 8), rows, cols);
    auto values = ref::dequantize_mxfp8(blocks.elements, blocks.scales, rows, cols);
    return {std::move(blocks), std::move(values)};
}

// The values as a mistake reads them: `scale(row, k)` in place of the block's X.
template <class Scale>
std::vector<float> read_as(const MxMatrix& m, int rows, int cols, Scale scale) {
    std::vector<float> v(count(rows, cols));
    for (int r = 0; r < rows; ++r)
        for (int k = 0; k < cols; ++k) {
            const std::size_t i = count(r, cols) + k;
            v[i] = ref::e4m3_decode(m.blocks.elements[i]) * scale(r, k);
        }
    return v;
}

// float32 accumulation of K products of typical size `rms` (module 05's tolerance: the tensor
// cores add groups of products and truncate).
course::Tolerance tolerance(int K, double rms) {
    auto tol = course::Tolerance::float32(static_cast<std::size_t>(K), rms);
    tol.atol += 4.0 * 0x1.0p-23 * K * std::sqrt(static_cast<double>(K)) * rms;
    return tol;
}

double rms_of(const std::vector<float>& v) {
    double s = 0.0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s / v.size());
}

bool agrees(const std::vector<float>& got, const std::vector<double>& want,
            const course::Tolerance& tol) {
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!tol.accepts(got[i], want[i])) return false;
    return true;
}

std::string diagnose(const std::vector<float>& got, const MxMatrix& A, const MxMatrix& B,
                     const Shape& s, const course::Tolerance& tol) {
    if (static_cast<double>(s.M) * s.N * s.K > (1 << 27)) return "";
    const auto product = [&](const std::vector<float>& a, const std::vector<float>& b) {
        return ref::matmul_abt(a, b, s.M, s.N, s.K);
    };
    const auto one = [](int, int) { return 1.0f; };
    if (agrees(got, product(read_as(A, s.M, s.K, one), read_as(B, s.N, s.K, one)), tol))
        return "C is the product of the E4M3 values without their block scales: each element is "
               "decode(P) * 2^(scale - 127)";
    const auto want = product(A.values, B.values);
    for (double factor : {2.0, 4.0, 0.5, 0.25}) {
        std::vector<double> scaled(want);
        for (double& v : scaled) v *= factor;
        if (agrees(got, scaled, tol))
            return "C is the product times " + std::to_string(factor).substr(0, 4) +
                   ": X = 2^(scale - 127), E8M0's bias is 127 (in A's scales, B's, or both)";
    }
    const auto first_of_64 = [](const MxMatrix& m, int cols) {
        return [&m, cols](int r, int k) {
            return ref::e8m0_decode(m.blocks.scales[count(r, cols / kMxBlock) + k / 64 * 2]);
        };
    };
    if (agrees(got,
               product(read_as(A, s.M, s.K, first_of_64(A, s.K)),
                       read_as(B, s.N, s.K, first_of_64(B, s.K))),
               tol))
        return "the second 32 values of each 64-wide tile of k take the first 32's scale: a scale "
               "covers one block of 32, scales[row * (K / 32) + k / 32]";
    // The last, partial K tile dropped (K a multiple of 32, not of the tile).
    std::set<int> kept_counts;
    for (int step : {32, 64, 128}) kept_counts.insert(s.K / step * step);
    kept_counts.erase(s.K);
    for (int kept : kept_counts) {
        std::vector<float> a(count(s.M, s.K), 0.0f), b(count(s.N, s.K), 0.0f);
        for (int r = 0; r < s.M; ++r)
            for (int k = 0; k < kept; ++k) a[count(r, s.K) + k] = A.values[count(r, s.K) + k];
        for (int r = 0; r < s.N; ++r)
            for (int k = 0; k < kept; ++k) b[count(r, s.K) + k] = B.values[count(r, s.K) + k];
        if (agrees(got, product(a, b), tol))
            return "C holds the product over the first " + std::to_string(kept) +
                   " of K = " + std::to_string(s.K) +
                   " values of k only: the last, partial K tile is dropped";
    }
    return "";
}

void check_shape(const Shape& s, course::Rng& rng) {
    SCOPED_TRACE(quant::shape_label(s.M, s.N, s.K) + " (M x N x K: A is M x K, B is N x K)");
    const MxMatrix A = random_mx(s.M, s.K, rng), B = random_mx(s.N, s.K, rng);
    const auto want = ref::matmul_abt(A.values, B.values, s.M, s.N, s.K);
    const auto tol = tolerance(s.K, rms_of(A.values) * rms_of(B.values));
    course::DeviceBuffer<std::uint8_t> d_a("A's elements", A.blocks.elements),
        d_as("A's scales", A.blocks.scales), d_b("B's elements", B.blocks.elements),
        d_bs("B's scales", B.blocks.scales);
    course::DeviceBuffer<float> d_C("C", count(s.M, s.N));

    std::vector<std::vector<float>> runs;
    for (int attempt = 0; attempt < 3; ++attempt) {
        d_C.poison();
        mxfp8_gemm(s.M, s.N, s.K, d_a.data(), d_as.data(), d_b.data(), d_bs.data(), d_C.data());
        runs.push_back(d_C.download());
    }
    std::size_t differing = 0;
    for (std::size_t i = 0; i < runs[0].size(); ++i)
        if (std::memcmp(&runs[0][i], &runs[1][i], 4) != 0 ||
            std::memcmp(&runs[0][i], &runs[2][i], 4) != 0)
            ++differing;
    const std::string race =
        differing == 0
            ? ""
            : "C differs between runs on the same inputs at " + std::to_string(differing) +
                  " elements: a race (a tile read before every thread has written "
                  "it, or overwritten while a warp still reads it: a __syncthreads())";
    course::CompareOptions options{
        "C", course::Matrix{static_cast<std::size_t>(s.M), static_cast<std::size_t>(s.N)}};
    options.diagnose = [&] {
        const std::string cause = race.empty() ? diagnose(runs[0], A, B, s, tol) : race;
        return cause.empty() ? "" : "likely cause: " + cause;
    };
    EXPECT_TRUE(course::expect_close(runs[0], want, tol, options));
    EXPECT_TRUE(race.empty()) << race;
}

TEST_F(Mxfp8Gemm, Shapes) {
    auto rng = test_rng();
    // 8x8x32: one partial tile everywhere, one block of K; 24x40x64; 72x56x96: K one and a half
    // tiles; 136x264x160: one row band past 128, K 2.5 tiles; 256x256x128: whole tiles; 200x120x
    // 1056: a partial K tile (1056 = 16 x 64 + 32); 1000x1032x288 and 264x136x8192.
    for (const Shape s : {Shape{8, 8, 32}, Shape{24, 40, 64}, Shape{72, 56, 96},
                          Shape{136, 264, 160}, Shape{256, 256, 128}, Shape{200, 120, 1056},
                          Shape{1000, 1032, 288}, Shape{264, 136, 8192}})
        check_shape(s, rng);
}

// Whole rows and columns of the product against the CPU (the full one at 4096^3 would take
// minutes).
void check_lines(const std::vector<float>& got, const std::vector<float>& a,
                 const std::vector<float>& b, int n, const std::vector<int>& lines,
                 const course::Tolerance& tol, const std::string& name) {
    for (int row : lines) {
        std::vector<float> values(got.begin() + count(row, n), got.begin() + count(row + 1, n));
        std::vector<double> want(n);
        for (int col = 0; col < n; ++col) want[col] = ref::matmul_abt_element(a, b, n, row, col);
        EXPECT_TRUE(course::expect_close(
            values, want, tol, {name + " row " + std::to_string(row) + " (index = column)"}));
    }
    for (int col : lines) {
        std::vector<float> values(n);
        std::vector<double> want(n);
        for (int row = 0; row < n; ++row) {
            values[row] = got[count(row, n) + col];
            want[row] = ref::matmul_abt_element(a, b, n, row, col);
        }
        EXPECT_TRUE(course::expect_close(
            values, want, tol, {name + " column " + std::to_string(col) + " (index = row)"}));
    }
}

// The judged case: 4096^3 against cuBLAS's bf16 GEMM on A^ and B^ in bf16 (exact: the same
// values), samples interleaved; the rate's ceiling is the bf16 tensor cores' peak.
TEST_F(Mxfp8Gemm, Rate4096) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const int n = 4096;
    const std::size_t elements = count(n, n);
    // A and B as MXFP8 (1 byte an element) and bf16 (2), C, cuBLAS's C, the harness's two copies
    // of C (one per input set).
    COURSE_REQUIRE_MEMORY(elements * (2 * 1 + 2 * 2 + 4 * 4) + (256u << 20));
    SCOPED_TRACE("4096x4096x4096");
    auto rng = test_rng();
    const MxMatrix A = random_mx(n, n, rng), B = random_mx(n, n, rng);
    const quant::Bf16Matrix A16 = quant::to_bf16(A.values), B16 = quant::to_bf16(B.values);
    course::DeviceBuffer<std::uint8_t> d_a("A's elements", A.blocks.elements),
        d_as("A's scales", A.blocks.scales), d_b("B's elements", B.blocks.elements),
        d_bs("B's scales", B.blocks.scales);
    course::DeviceBuffer<std::uint16_t> d_a16("A^ (bf16)", A16.bits), d_b16("B^ (bf16)", B16.bits);
    course::DeviceBuffer<float> d_C("C", elements), d_C_cublas("cuBLAS's C", elements);
    const auto tol = tolerance(n, rms_of(A.values) * rms_of(B.values));

    // The second input set: A's elements with every sign flipped (E4M3's bit 7), which negates C.
    const auto timing = course::time_against(
        [&] { mxfp8_gemm(n, n, n, d_a.data(), d_as.data(), d_b.data(), d_bs.data(), d_C.data()); },
        [&] {
            course::baseline::cublas_gemm_bf16(n, n, n, d_a16.data(), d_b16.data(),
                                               d_C_cublas.data());
        },
        {course::TimedOutput(d_C, tol)}, {course::TimedInput(d_a, std::uint8_t{0x80})});
    const std::vector<int> lines{static_cast<int>(rng.uniform_int(0, n - 2)), n - 1};
    check_lines(d_C.download(), A.values, B.values, n, lines, tol, "C");
    check_lines(d_C_cublas.download(), A.values, B.values, n, lines, tol, "cuBLAS's C");
    const double flops = 2.0 * n * n * n;
    course::record_flops("4096x4096x4096", timing, flops, "cublas_gemm_bf16", flops,
                         course::FlopUnits::bf16_tensor_cores);
}

}  // namespace
