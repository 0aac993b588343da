// Checker of every rung of the 04_sgemm ladder: they share the contract (sgemm.h) and this file
// (each rung's manifest entry names it). C = alpha * A B + beta * C against a double-precision
// CPU product, on shapes with partial tiles along M, N and K, a tall-skinny and a short-wide
// product, K = 1, and rows that do not start on a 16-byte boundary (all three matrices, one of A
// and B, or the rows of one of them only). Every shape runs twice: with
// beta != 0 and C prefilled (C must be read), then with beta = 0 and C holding NaN (C must not be
// read), three times, since a correct kernel gives the same bits every run. A failure names the
// mistake where the output shows one: beta * C or alpha left out, the last partial K tile
// dropped, C read although beta = 0, tiles never stored, results that change from run to run (a
// race; probed on a product of several blocks per SM when a small one is wrong the same way every
// run).
// Then the rate at 4096^3 against cuBLAS SGEMM in plain FP32 (no TF32), timed in the same run:
// the case the target is judged on. Then a sweep of square sizes from 256 to 2048 against the
// same cuBLAS call, for the ladder (`grader report 04`). Last, the contract's extremes: M = 2^20
// (a grid along y past 65535 blocks) and C past 2^30 elements (32-bit byte offsets wrap).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/linalg.h"
#include "course/testing.h"
#include "sgemm.h"

namespace {

class Sgemm : public course::GpuTest {};

struct Shape {
    int M, N, K;
};

std::string label(const Shape& shape) {
    return std::to_string(shape.M) + "x" + std::to_string(shape.N) + "x" + std::to_string(shape.K);
}

std::string describe(const Shape& shape) {
    return label(shape) + " (M x N x K: A is M x K, B is K x N, C is M x N)";
}

std::size_t count(int rows, int cols) {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

// Neither 0 nor 1, so that a kernel that leaves out alpha, or beta * C, shows. (The messages
// below spell them out: keep them in step.)
constexpr float kAlpha = 0.75f;
constexpr float kBeta = -0.5f;
// Inputs uniform in [-1, 1): a product a_k * b_k has typical size E|a| E|b| = 1/4.
constexpr double kTypicalProduct = 0.25;
// Shapes up to this many multiply-adds get the partial-K-tile diagnosis (one CPU product per
// tile width tried); the larger ones only fail on their mismatches.
constexpr double kDiagnosedWork = 1 << 27;
// The sizes of the sweep, whose cuBLAS is recorded under another baseline name so that the target
// is judged on 4096^3 alone (modules/04_sgemm/README.md).
constexpr const char* kSweepBaseline = "cublas_sgemm_sweep";

// Each element of C is a sum of K products, scaled by alpha, plus beta * C: K + 1 terms. The
// tolerance grows with K (course::Tolerance::float32); a single missing or doubled product
// (about 1/4) stays far outside it.
course::Tolerance tolerance(int K) {
    return course::Tolerance::float32(static_cast<std::size_t>(K) + 1, kTypicalProduct);
}

// alpha * product + beta * c, element by element, in double.
std::vector<double> combine(const std::vector<double>& product, const std::vector<float>& c,
                            double alpha, double beta) {
    std::vector<double> out(product.size());
    for (std::size_t i = 0; i < out.size(); ++i)
        out[i] = alpha * product[i] + (beta == 0.0 ? 0.0 : beta * c[i]);
    return out;
}

bool agrees(const std::vector<float>& got, const std::vector<double>& want,
            const course::Tolerance& tol) {
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!tol.accepts(got[i], want[i])) return false;
    return true;
}

// A B over the first `kept` values of k only (what a kernel that drops the last partial K tile
// computes).
std::vector<double> product_over_first(const std::vector<float>& A, const std::vector<float>& B,
                                       const Shape& shape, int kept) {
    std::vector<float> a(count(shape.M, kept));
    for (int r = 0; r < shape.M; ++r)
        std::copy_n(A.begin() + count(r, shape.K), kept, a.begin() + count(r, kept));
    const std::vector<float> b(B.begin(), B.begin() + count(kept, shape.N));
    return course::reference::matmul(a, b, shape.M, shape.N, kept);
}

// The inputs of one shape and A B in double.
struct Problem {
    Shape shape;
    std::vector<float> A, B, C;  // C: its contents on entry when beta != 0
    std::vector<double> product;
};

Problem make_problem(const Shape& shape, course::Rng& rng) {
    Problem p{shape,
              course::random_floats(count(shape.M, shape.K), -1.0f, 1.0f, rng),
              course::random_floats(count(shape.K, shape.N), -1.0f, 1.0f, rng),
              course::random_floats(count(shape.M, shape.N), -1.0f, 1.0f, rng),
              {}};
    p.product = course::reference::matmul(p.A, p.B, shape.M, shape.N, shape.K);
    return p;
}

// What a wrong C (computed with beta = kBeta) looks like, when a known mistake explains it.
std::string diagnose_with_beta(const std::vector<float>& got, const Problem& p) {
    const auto tol = tolerance(p.shape.K);
    const auto want = combine(p.product, p.C, kAlpha, kBeta);
    // Every wrong element still holds the value C had on entry: no thread stored it.
    std::size_t wrong = 0, untouched = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        if (tol.accepts(got[i], want[i])) continue;
        ++wrong;
        if (std::memcmp(&got[i], &p.C[i], sizeof(float)) == 0) ++untouched;
    }
    if (wrong > 0 && untouched == wrong)
        return std::to_string(wrong) +
               " elements still hold the value C had on entry: they were never written. Does "
               "every block store its tile, the partial ones at the right and bottom edges too?";
    if (agrees(got, combine(p.product, p.C, kAlpha, 0.0), tol))
        return "C = alpha * A B, without beta * C: with beta != 0, C must be read and "
               "beta * C added";
    if (agrees(got, combine(p.product, p.C, 1.0, kBeta), tol))
        return "C = A B + beta * C: alpha does not multiply the product";
    if (static_cast<double>(p.shape.M) * p.shape.N * p.shape.K > kDiagnosedWork) return "";
    // The last, partial K tile dropped: the product over K rounded down to a tile width.
    std::set<int> kept_counts;
    for (int tile : {4, 8, 16, 32, 64, 128}) kept_counts.insert(p.shape.K / tile * tile);
    kept_counts.erase(p.shape.K);
    for (int kept : kept_counts) {
        if (agrees(got, combine(product_over_first(p.A, p.B, p.shape, kept), p.C, kAlpha, kBeta),
                   tol))
            return "C holds the product over the first " + std::to_string(kept) +
                   " of K = " + std::to_string(p.shape.K) +
                   " values of k only: the last, partial K tile (k = " + std::to_string(kept) +
                   " .. " + std::to_string(p.shape.K - 1) +
                   ") is dropped. Load it too, with zeros past K";
    }
    return "";
}

// What a wrong C computed with beta = 0 looks like, when a known mistake explains it.
// `with_beta_right`: the same shape with beta != 0 was right, so every element was written.
std::string diagnose_without_beta(const std::vector<float>& got, bool with_beta_right) {
    const auto nans =
        std::count_if(got.begin(), got.end(), [](float value) { return value != value; });
    if (!with_beta_right || nans == 0) return "";
    return std::to_string(nans) +
           " elements are NaN, where the run with beta != 0 was right: with beta = 0, C holds "
           "NaN on entry and must not be read (0 * NaN is NaN). Skip the read of C when "
           "beta == 0";
}

// C's elements (of `total`) that differ between runs on the same inputs, where `shape` says
// which run.
std::string race_diagnosis(std::size_t differing, std::size_t total, const std::string& where) {
    if (differing == 0) return "";
    return "C differs between runs on the same inputs at " + std::to_string(differing) + " of " +
           std::to_string(total) + " elements" + where +
           ": threads race on shared memory. Is there a __syncthreads() after the tile loads, and "
           "another before the next tiles overwrite them?";
}

// A small shape's wrong result can be the same wrong bits on every run even when threads race:
// with one block per SM or fewer, each SM runs its block alone, alike every time. The probe gives
// the schedule room to vary: 32 rows of C per SM, 2048 columns, so 4 blocks per SM of the
// ladder's largest tiles (128 x 128; 16 of 64 x 64), more than an SM holds at once: which SM
// takes which of the later blocks, and which blocks share an SM, depends on when the earlier ones
// finish. Five runs (9 GFLOP each on an H100's 132 SMs, 3 on a T4's 40), which a kernel without
// a race computes bit for bit the same: their diagnosis.
std::string race_probe(course::Rng& rng) {
    const Shape shape{32 * course::gpu().multiprocessors, 2048, 512};
    course::DeviceBuffer<float> d_A(
        "A", course::random_floats(count(shape.M, shape.K), -1.0f, 1.0f, rng));
    course::DeviceBuffer<float> d_B(
        "B", course::random_floats(count(shape.K, shape.N), -1.0f, 1.0f, rng));
    course::DeviceBuffer<float> d_C("C", count(shape.M, shape.N));
    const auto runs = course::outputs_of_runs(d_C, 5, [&] {
        sgemm(shape.M, shape.N, shape.K, kAlpha, d_A.data(), d_B.data(), 0.0f, d_C.data());
    });
    return race_diagnosis(course::differing_elements(runs), d_C.size(),
                          " of a " + label(shape) + " product");
}

// expect_close, with the diagnosis (if any) first, where the grader's lines show it.
testing::AssertionResult verdict(const std::vector<float>& got, const std::vector<double>& want,
                                 const Shape& shape, const std::string& diagnosis) {
    course::CompareOptions options{
        "C", course::Matrix{static_cast<std::size_t>(shape.M), static_cast<std::size_t>(shape.N)}};
    options.diagnose = [&] { return diagnosis.empty() ? "" : "likely cause: " + diagnosis; };
    return course::expect_close(got, want, tolerance(shape.K), options);
}

// `values` after `offset` floats of padding: a device copy of it, read from data() + offset,
// starts `offset` floats past a 16-byte boundary (the harness's buffers start on one).
std::vector<float> padded(const std::vector<float>& values, int offset) {
    std::vector<float> out(offset, 0.0f);
    out.insert(out.end(), values.begin(), values.end());
    return out;
}

// How many floats past a 16-byte boundary A, B and C start.
struct Offsets {
    int a = 0, b = 0, c = 0;
    std::string describe() const {
        if (a == 0 && b == 0 && c == 0) return "";
        const auto one = [](const char* name, int offset) {
            return std::string(name) +
                   (offset ? " one float past a 16-byte boundary" : " on a 16-byte boundary");
        };
        return ", " + one("A", a) + ", " + one("B", b) + ", " + one("C", c);
    }
};

// Checks one shape. Offsets other than 0 make A, B or C start that many floats past a 16-byte
// boundary (float4 loads of them must not be assumed).
void check_shape(const Shape& shape, course::Rng& rng, Offsets offsets = {}) {
    SCOPED_TRACE(describe(shape) + offsets.describe());
    const Problem p = make_problem(shape, rng);
    const std::size_t c_count = count(shape.M, shape.N);
    course::DeviceBuffer<float> d_A("A", padded(p.A, offsets.a)), d_B("B", padded(p.B, offsets.b));
    course::DeviceBuffer<float> d_C("C", c_count + offsets.c);
    const auto run = [&](float beta) {
        sgemm(shape.M, shape.N, shape.K, kAlpha, d_A.data() + offsets.a, d_B.data() + offsets.b,
              beta, d_C.data() + offsets.c);
    };

    // beta != 0: C holds data, which the kernel must read.
    d_C.upload(padded(p.C, offsets.c));
    run(kBeta);
    const auto with_beta = d_C.download(offsets.c, c_count);
    // beta = 0: C holds NaN, which the kernel must overwrite without reading; three runs, which
    // must agree bit for bit.
    auto without_beta = course::outputs_of_runs(d_C, 3, [&] { run(0.0f); });
    for (auto& c : without_beta) c.erase(c.begin(), c.begin() + offsets.c);
    std::string race = race_diagnosis(course::differing_elements(without_beta), c_count, "");

    const auto want_with_beta = combine(p.product, p.C, kAlpha, kBeta);
    const bool with_beta_right = agrees(with_beta, want_with_beta, tolerance(shape.K));
    const bool without_beta_right =
        agrees(without_beta[0], combine(p.product, p.C, kAlpha, 0.0), tolerance(shape.K));
    // Wrong, and no mistake the output shows explains it: was it a race after all?
    if (race.empty() && !(with_beta_right && without_beta_right) &&
        diagnose_with_beta(with_beta, p).empty() &&
        diagnose_without_beta(without_beta[0], with_beta_right).empty())
        race = race_probe(rng);
    {
        SCOPED_TRACE("alpha = 0.75, beta = -0.5: C = alpha * A B + beta * C, C prefilled");
        EXPECT_TRUE(verdict(with_beta, want_with_beta, shape,
                            race.empty() ? diagnose_with_beta(with_beta, p) : race));
    }
    {
        SCOPED_TRACE("alpha = 0.75, beta = 0: C = alpha * A B, C holding NaN on entry");
        EXPECT_TRUE(
            verdict(without_beta[0], combine(p.product, p.C, kAlpha, 0.0), shape,
                    race.empty() ? diagnose_without_beta(without_beta[0], with_beta_right) : race));
    }
    // A race can also stay within the tolerance on every run (rarely): still a bug.
    EXPECT_TRUE(race.empty()) << race;
}

TEST_F(Sgemm, SmallShapes) {
    auto rng = test_rng();
    // 1x1x1: one thread, the rest of its block must stay out; 7x13x5 and 17x33x65: nothing is a
    // multiple of anything (of 4 either: no row is 16-byte aligned), K smaller than a K tile and
    // K one past two; 33x36x20: rows that may be read as float4s, with partial tiles along N
    // and K all the same; 128^3: whole tiles only; K = 1: a single product per element.
    for (const Shape shape : {Shape{1, 1, 1}, Shape{7, 13, 5}, Shape{17, 33, 65}, Shape{33, 36, 20},
                              Shape{128, 128, 128}, Shape{100, 130, 1}}) {
        check_shape(shape, rng);
    }
}

TEST_F(Sgemm, LargeShapes) {
    auto rng = test_rng();
    // 1000x999x1001: partial tiles along all three, 8 x 8 blocks of 128 x 128 or far more of
    // smaller tiles (SMs full, warps drift apart: a missing barrier shows), 126 K tiles of 8;
    // 4096x64x4096: tall and skinny (one column of blocks, long K loops); 64x4096x4096: short
    // and wide (one row of blocks).
    for (const Shape shape : {Shape{1000, 999, 1001}, Shape{4096, 64, 4096}, Shape{64, 4096, 4096}})
        check_shape(shape, rng);
}

TEST_F(Sgemm, ExtentsAtTheirLimit) {
    auto rng = test_rng();
    // M, N and K each at the contract's 2^20, the others small: 2^20 rows need more than 65535
    // blocks along grid.y when a block covers 16 rows or fewer; 2^20 columns, the same along
    // grid.x (which has 2^31 - 1); K = 2^20, one long K loop.
    for (const Shape shape : {Shape{1 << 20, 3, 5}, Shape{3, 1 << 20, 5}, Shape{5, 3, 1 << 20}})
        check_shape(shape, rng);
}

TEST_F(Sgemm, MisalignedStarts) {
    auto rng = test_rng();
    // K and N multiples of 4, but A, B and C start 1 float past a 16-byte boundary: no row of A
    // or B may be read as float4s.
    check_shape(Shape{64, 68, 36}, rng, {1, 1, 1});
    // One of A and B aligned, the other not: a launcher that decides B's float4 path from A's
    // pointer (or A's from B's) reads the other as float4s from a misaligned address.
    check_shape(Shape{64, 68, 36}, rng, {0, 1, 0});
    check_shape(Shape{64, 68, 36}, rng, {1, 0, 0});
}

TEST_F(Sgemm, RowsOfOnlyOneMatrixAligned) {
    auto rng = test_rng();
    // K a multiple of 4 and N not: every row of A starts on a 16-byte boundary, the rows of B
    // after the first do not (and C's neither); then N a multiple of 4 and K not. A launcher
    // that decides B's float4 path from K (or A's from N) reads misaligned rows.
    check_shape(Shape{64, 66, 36}, rng);
    check_shape(Shape{64, 68, 34}, rng);
}

// Two lines of an extent: a random one and the last one, where a tail bug would show.
std::vector<int> sample_lines(int extent, course::Rng& rng) {
    const int some = static_cast<int>(rng.uniform_int(0, extent - 2));
    return {some, extent - 1};
}

// Whole rows and columns (`lines`) of an n x n x n product against the CPU: the full product
// would take minutes.
void check_lines(const std::vector<float>& got, const std::vector<float>& A,
                 const std::vector<float>& B, int n, const std::vector<int>& lines,
                 const std::string& name) {
    for (int row : lines) {
        std::vector<float> values(got.begin() + count(row, n), got.begin() + count(row + 1, n));
        std::vector<double> want(n);
        for (int col = 0; col < n; ++col)
            want[col] = course::reference::matmul_element(A, B, n, n, row, col);
        EXPECT_TRUE(
            course::expect_close(values, want, tolerance(n),
                                 {name + " row " + std::to_string(row) + " (index = column)"}));
    }
    for (int col : lines) {
        std::vector<float> values(n);
        std::vector<double> want(n);
        for (int row = 0; row < n; ++row) {
            values[row] = got[count(row, n) + col];
            want[row] = course::reference::matmul_element(A, B, n, n, row, col);
        }
        EXPECT_TRUE(
            course::expect_close(values, want, tolerance(n),
                                 {name + " column " + std::to_string(col) + " (index = row)"}));
    }
}

// Times sgemm on n x n x n against cuBLAS SGEMM, samples interleaved, with alpha = 1 and beta = 0
// (what the baseline computes); then checks both outputs on whole lines. cuBLAS's too: with TF32
// tensor cores it would be off by about 1e-2 at n = 4096, far outside the float32 tolerance, so
// this also proves the baseline ran in plain FP32.
void time_square(int n, const char* baseline_name, course::Rng rng) {
    const std::size_t elements = count(n, n);
    // A, B, C, cuBLAS's C and the harness's two copies of C, plus the timer's L2 flush buffer.
    COURSE_REQUIRE_MEMORY(6 * elements * sizeof(float) + (256u << 20));
    const Shape shape{n, n, n};
    SCOPED_TRACE(describe(shape));
    const auto A = course::random_floats(elements, -1.0f, 1.0f, rng);
    const auto B = course::random_floats(elements, -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> d_A("A", A), d_B("B", B), d_C("C", elements),
        d_C_cublas("cuBLAS's C", elements);

    const auto timing = course::time_against(
        [&] { sgemm(n, n, n, 1.0f, d_A.data(), d_B.data(), 0.0f, d_C.data()); },
        [&] { course::baseline::cublas_sgemm(n, n, n, d_A.data(), d_B.data(), d_C_cublas.data()); },
        {course::TimedOutput(d_C, tolerance(n))}, {course::TimedInput(d_A)});

    const auto lines = sample_lines(n, rng);
    check_lines(d_C.download(), A, B, n, lines, "C");
    check_lines(d_C_cublas.download(), A, B, n, lines, "cuBLAS's C");
    // C = A B: n^2 dot products of length n, each n multiplies and n adds; the same for both.
    const double flops = 2.0 * n * n * n;
    course::record_flops(label(shape), timing, flops, baseline_name, flops);
}

// The judged case (the manifest's baseline and target): 4096^3 is 137 GFLOP, about 3 ms for
// cuBLAS on an H100; A, B and C (64 MiB each) are larger than the L2.
TEST_F(Sgemm, Rate4096) { time_square(4096, "cublas_sgemm", test_rng()); }

// The size sweep, for the ladder's plot: small sizes leave most SMs idle with big tiles, which
// cuBLAS answers with other kernels; that is part of what the plot shows.
TEST_F(Sgemm, SweepRate256) { time_square(256, kSweepBaseline, test_rng()); }
TEST_F(Sgemm, SweepRate512) { time_square(512, kSweepBaseline, test_rng()); }
TEST_F(Sgemm, SweepRate1024) { time_square(1024, kSweepBaseline, test_rng()); }
TEST_F(Sgemm, SweepRate2048) { time_square(2048, kSweepBaseline, test_rng()); }

// The contract's extremes in one product: M = 2^20 rows, so a launcher that gives a block 16
// rows or fewer along grid.y asks for more than its 65535 blocks; and C of 2^20 x 2047 =
// 2^31 - 2^20 elements, past 2^30: 4 bytes each make 2^33 bytes, where a byte offset held in
// 32 bits wraps (at element 2^29 when signed). K = 9: a partial K tile as well. A and B are
// small (uploaded); C is made on the device (beta != 0: it is read too). Last in the file, as
// every large case: an illegal address there is sticky.
TEST_F(Sgemm, TallPastGridYAndByteOffsets) {
    const Shape shape{1 << 20, 2047, 9};
    const std::size_t c_count = count(shape.M, shape.N);
    COURSE_LARGE_CASE((c_count + count(shape.M, shape.K) + count(shape.K, shape.N)) *
                          sizeof(float) +
                      (64u << 20));
    SCOPED_TRACE(describe(shape) + ": M = 2^20, C past 2^30 elements (made on the device)");
    auto rng = test_rng();
    const auto A = course::random_floats(count(shape.M, shape.K), -1.0f, 1.0f, rng);
    const auto B = course::random_floats(count(shape.K, shape.N), -1.0f, 1.0f, rng);
    const std::uint64_t c_seed = rng.next_u64();
    course::DeviceBuffer<float> d_A("A", A), d_B("B", B), d_C("C", c_count);
    course::fill_uniform(d_C.data(), c_count, c_seed, -1.0f, 1.0f);

    course::run_large_case([&] {
        sgemm(shape.M, shape.N, shape.K, kAlpha, d_A.data(), d_B.data(), kBeta, d_C.data());
    });

    // Whole rows of C: the first and last, those around elements 2^29 and 2^30, and random
    // ones; a message names the byte offset that wrapped when only rows past it are wrong.
    const auto element = [&](std::size_t e) {
        return kAlpha * course::reference::matmul_element(A, B, shape.N, shape.K, e / shape.N,
                                                          e % shape.N) +
               kBeta * course::hashed::uniform(e, c_seed, -1.0f, 1.0f);
    };
    EXPECT_TRUE(course::expect_windows_close(
        d_C, course::rows_past_int_range(shape.M, shape.N, rng),
        course::element_by_element(element), tolerance(shape.K), {"C"}));
}

}  // namespace
