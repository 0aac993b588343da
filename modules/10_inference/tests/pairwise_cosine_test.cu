// Checker of 10_inference/pairwise_cosine: every distance of the packed upper triangle and the
// mean against the double CPU reference (course/reference/inference.h), on N from 2 to 1000 (1,
// 2 and 3 tiles of 128, and partial ones) and D from 64 to 4096, rows of very different norms (a
// distance that skips the normalization shows), rows close to one another (distances near 0)
// and opposite (near 2); a failure names the known mistakes (the pairs next to the diagonal or
// the diagonal tiles never written, a norm taken from the wrong row, the mean not divided by the
// pairs). N = 8192 is checked on whole rows of the triangle (the first, the last, the middle
// and 16 at random). Then the rate on the triangle's FLOPs, N (N - 1) D, against cuBLAS's bf16
// GEMM over the full square of the normalized embeddings, 2 N^2 D, at N 8192 (judged) and 4096
// (shown), D 768. A build whose device code is older than sm_80 skips, with the reason.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/bf16.h"
#include "course/launch.h"
#include "course/reference/inference.h"
#include "course/testing.h"
#include "pairwise_cosine.h"

namespace {

namespace ref = course::reference;

// float32 norms and distances from float32 sums of exact bf16 products: a few 1e-6 at D 4096.
constexpr double kDistanceTolerance = 1e-4;
constexpr double kMeanTolerance = 1e-4;  // relative: the blocks' shares add up in any order

// spread: uniform in [-1, 1); scaled: each row also times 2^e, e in [-8, 8]; clustered: every
// row a common direction plus 5% noise (distances near 0), every other one negated (near 2).
enum class Rows { spread, scaled, clustered };

struct Case {
    std::size_t N, D;
    Rows rows = Rows::spread;
    std::string describe() const {
        const char* kinds[] = {"spread", "norms from 2^-8 to 2^8", "clustered and opposite"};
        return "N " + std::to_string(N) + ", D " + std::to_string(D) + " (" +
               kinds[static_cast<int>(rows)] + ")";
    }
};

// bf16 values, as floats.
std::vector<float> make_rows(const Case& c, course::Rng& rng) {
    std::vector<float> X = course::random_floats(c.N * c.D, -1.0f, 1.0f, rng);
    const auto direction = course::random_floats(c.D, -1.0f, 1.0f, rng);
    for (std::size_t i = 0; i < c.N; ++i) {
        const float scale =
            c.rows == Rows::scaled ? std::ldexp(1.0f, int(rng.uniform_int(-8, 8))) : 1.0f;
        for (std::size_t k = 0; k < c.D; ++k) {
            float& x = X[i * c.D + k];
            if (c.rows == Rows::clustered) x = (i % 2 ? -1.0f : 1.0f) * direction[k] + 0.05f * x;
            x = course::round_to_bf16(x * scale);
        }
    }
    return X;
}

// What a mistake looks like in the checked pairs; "" when nothing fits.
std::string diagnose(const Case& c, const std::vector<float>& X, const std::vector<float>& got,
                     const std::vector<std::size_t>& rows_checked) {
    std::size_t k = 0, neighbours_unwritten = 0, neighbours = 0, other_unwritten = 0;
    bool wrong_row_norm = true, any_pair = false;
    for (std::size_t i : rows_checked)
        for (std::size_t j = i + 1; j < c.N; ++j, ++k) {
            const bool unwritten = course::is_poison(got[k]);
            if (j == i + 1)
                neighbours_unwritten += unwritten, ++neighbours;
            else
                other_unwritten += unwritten;
            // A norm taken from the wrong row: 1 - x_i . x_j / |x_i|^2.
            const float* x = &X[i * c.D];
            double dot = 0.0, xx = 0.0;
            for (std::size_t d = 0; d < c.D; ++d)
                dot += double(x[d]) * X[j * c.D + d], xx += double(x[d]) * x[d];
            // (relatively: with norms 2^16 apart the value is in the thousands)
            const double wrong = 1.0 - dot / xx;
            wrong_row_norm &= std::fabs(got[k] - wrong) <= 1e-3 * std::max(1.0, std::fabs(wrong));
            any_pair = true;
        }
    if (neighbours > 0 && neighbours_unwritten == neighbours && other_unwritten == 0)
        return "every pair (i, i + 1), next to the diagonal, was never written, and the others "
               "were: the triangle holds every i < j (triangle_index(i, i + 1, N) is row i's "
               "first place)";
    if (any_pair && wrong_row_norm && c.rows == Rows::scaled)
        return "the distances are 1 - x_i . x_j / |x_i|^2: each pair needs both rows' norms, "
               "1 / (|x_i| |x_j|)";
    return "";
}

// The rows of the triangle in `rows_checked` (all of them for small N), against the reference.
void check_output(const Case& c, const std::vector<float>& X, course::DeviceBuffer<float>& d_out,
                  course::DeviceBuffer<float>& d_mean, const std::vector<std::size_t>& rows) {
    std::vector<float> got;
    std::vector<double> want;
    for (std::size_t i : rows) {
        if (i + 1 >= c.N) continue;
        const auto row = d_out.download(triangle_index(i, i + 1, c.N), c.N - 1 - i);
        got.insert(got.end(), row.begin(), row.end());
        for (std::size_t j = i + 1; j < c.N; ++j)
            want.push_back(ref::cosine_distance(&X[i * c.D], &X[j * c.D], c.D));
    }
    course::CompareOptions options{"distances (the rows of the triangle checked, in order)"};
    options.diagnose = [&] { return diagnose(c, X, got, rows); };
    EXPECT_TRUE(course::expect_close(got, want, {kDistanceTolerance, 0.0}, options));

    const float mean = d_mean.download()[0];
    const double want_mean = ref::mean_cosine_distance(X, c.N, c.D);
    const double pairs = 0.5 * double(c.N) * double(c.N - 1);
    EXPECT_NEAR(mean, want_mean, kMeanTolerance * std::fabs(want_mean))
        << "the mean distance is wrong"
        << (std::fabs(mean - want_mean * pairs) < 1e-3 * pairs
                ? ": it is the SUM of the distances, not divided "
                  "by the N (N - 1) / 2 pairs"
                : "");
}

std::vector<std::size_t> all_rows(std::size_t N) {
    std::vector<std::size_t> rows(N);
    for (std::size_t i = 0; i < N; ++i) rows[i] = i;
    return rows;
}

void check_case(const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    const auto X = make_rows(c, rng);
    course::DeviceBuffer<std::uint16_t> d_X("X", course::bf16_bits(X));
    course::DeviceBuffer<float> distances("distances", c.N * (c.N - 1) / 2), mean("mean", 1),
        workspace("workspace", c.N);
    pairwise_cosine(course::as_bf16(d_X), distances.data(), mean.data(), workspace.data(), int(c.N),
                    int(c.D));
    check_output(c, X, distances, mean, all_rows(c.N));
}

// A kernel of this build, whose device code is compiled for the build's architecture.
__global__ void build_probe_kernel() {}

// Skips, with the reason, where the GPU has bf16 tensor cores but this build's device code is
// for an older architecture (a tree configured without a GPU: sm_75), whose mma.sync traps.
class PairwiseCosine : public course::GpuTest {
  protected:
    void SetUp() override {
        course::GpuTest::SetUp();
        if (IsSkipped()) return;
        const int built = course::compiled_arch(build_probe_kernel);
        if (built >= COURSE_MIN_SM) return;
        const std::string reason =
            "needs device code for sm_" + std::to_string(COURSE_MIN_SM) +
            " or newer (bf16 tensor cores, cp.async): this build is for sm_" +
            std::to_string(built) +
            ": rebuild the grader's tree for this GPU (cmake build/<tree> "
            "-DCMAKE_CUDA_ARCHITECTURES=" +
            std::to_string(course::gpu().sm) + ")";
        RecordProperty("skip_reason", reason);
        GTEST_SKIP() << reason;
    }
};

// Tiles of 128: one partial, one whole, two, three partial; the smallest N.
TEST_F(PairwiseCosine, EdgeSizes) {
    auto rng = test_rng();
    check_case({300, 64, Rows::scaled}, rng);
    check_case({2, 64}, rng);
    check_case({3, 128}, rng);
    check_case({31, 64}, rng);
    check_case({128, 64}, rng);
    check_case({129, 192}, rng);
    check_case({257, 64, Rows::clustered}, rng);
}

// GPT-2's width, and the contract's largest D.
TEST_F(PairwiseCosine, Widths) {
    auto rng = test_rng();
    check_case({200, 768, Rows::scaled}, rng);
    check_case({70, 4096}, rng);
}

TEST_F(PairwiseCosine, Thousand) {
    COURSE_SKIP_ON_EMULATOR("N 1000, D 768");
    auto rng = test_rng();
    check_case({1000, 768, Rows::clustered}, rng);
}

// ---- N = 8192: checked on rows of the triangle, and timed ----

void time_against_cublas(std::size_t N, course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const Case c{N, 768};
    COURSE_REQUIRE_MEMORY(4 * N * N + 2 * N * N + (512u << 20));
    const std::string label = "N" + std::to_string(N) + " D768";
    SCOPED_TRACE(label);
    const auto X = make_rows(c, rng);
    // The baseline's input: the rows normalized, in bf16 (the normalization is not timed).
    std::vector<float> normalized(X.size());
    for (std::size_t i = 0; i < N; ++i) {
        double norm = 0.0;
        for (std::size_t k = 0; k < c.D; ++k) norm += double(X[i * c.D + k]) * X[i * c.D + k];
        for (std::size_t k = 0; k < c.D; ++k)
            normalized[i * c.D + k] = float(X[i * c.D + k] / std::sqrt(norm));
    }
    course::DeviceBuffer<std::uint16_t> d_X("X", course::bf16_bits(X)),
        d_normalized("normalized", course::bf16_bits(normalized));
    course::DeviceBuffer<float> distances("distances", N * (N - 1) / 2), mean("mean", 1),
        workspace("workspace", N), square("square", N * N);

    const auto timing = course::time_against(
        [&] {
            pairwise_cosine(course::as_bf16(d_X), distances.data(), mean.data(), workspace.data(),
                            int(N), int(c.D));
        },
        [&] {
            course::baseline::cublas_gemm_bf16(int(N), int(N), int(c.D), d_normalized.data(),
                                               d_normalized.data(), square.data());
        },
        {course::TimedOutput(distances, {kDistanceTolerance, 0.0}),
         course::TimedOutput(mean, {0.0, kMeanTolerance})},
        // Not the sign, which leaves every cosine as it was: the second input set XORs the lowest
        // exponent bit of each bf16 element (each doubled or halved, finite), which turns every
        // embedding.
        {course::TimedInput(d_X, std::uint16_t{0x0080})});

    std::vector<std::size_t> rows{0, 1, N / 2, N - 2};
    for (int r = 0; r < 16; ++r)
        rows.push_back(std::size_t(rng.uniform_int(0, std::int64_t(N) - 2)));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    check_output(c, X, distances, mean, rows);
    // Yours: the triangle's pairs, 2 D FLOPs each; cuBLAS's: the full square.
    course::record_flops(label, timing, double(N) * double(N - 1) * c.D, "cublas_gemm_bf16",
                         2.0 * double(N) * double(N) * c.D, course::FlopUnits::bf16_tensor_cores);
}

TEST_F(PairwiseCosine, Time8192) { time_against_cublas(8192, test_rng()); }
TEST_F(PairwiseCosine, Time4096) { time_against_cublas(4096, test_rng()); }

}  // namespace
