// The cases of gemm_bf16_epilogue (gemm_bf16_epilogue.h), the optional entry point beside
// gemm_bf16: included by gemm_bf16_test.cu, whose GemmBf16 fixture and tolerance(K) they use, so
// that they run in its suite before its large case. They run where the file under test defines
// the entry point (wgmma_gemm's fast reference) and skip, naming it, where not: the four rungs'
// stubs and readable solutions need not have it.
//
// Against a double-precision CPU product of the same bf16 inputs: each pair of operand layouts on
// shapes with partial tiles and K tails, run twice (the same bits); the bias, the GELU with its
// input kept, the GELU's derivative; the float accumulation, from a C that is not zero, with K
// split over several blocks where the output has few tiles (a K of 16384 over one tile), run
// twice from the same C (the same bits: the partial tiles added in a fixed order); the extents at
// the contract's 2^16. Then GPT-2's MLP at 16384 tokens, as module 08's trainer multiplies it:
// the first layer's forward (bias, GELU), the second's input gradient (a transposed weight,
// GELU'), the first's weight gradient (both operands transposed, added into float), each timed
// against cuBLAS bf16 computing the same product into float from copies in its "TN" layout
// (baseline cublas_gemm_bf16_trainer: shown, not judged). Last, an output past 2^30 elements.
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "course/baselines.h"
#include "course/bf16.h"
#include "course/entry_point.h"
#include "course/large.h"
#include "course/reference/linalg.h"
#include "course/testing.h"
#include "gemm_bf16_epilogue.h"

// Weak: a file without the entry point still links (course/entry_point.h).
__attribute__((weak)) decltype(gemm_bf16_epilogue) gemm_bf16_epilogue;

namespace {

const char* major_name(GemmMajor major) { return major == GemmMajor::kK ? "K-major" : "MN-major"; }

std::size_t elements(int rows, int cols) {
    return static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
}

// n values uniform in [lo, hi), rounded to bf16 (exact as floats).
std::vector<float> random_bf16_values(std::size_t n, float lo, float hi, course::Rng& rng) {
    auto values = course::random_floats(n, lo, hi, rng);
    for (float& v : values) v = course::round_to_bf16(v);
    return values;
}

// An operand: its values as the product reads them (rows x K, k contiguous: what the CPU
// reference multiplies), uniform in [-1, 1) and rounded to bf16, and on the device as `major`
// stores it (those values, or their transpose).
struct Operand {
    std::vector<float> values;
    course::DeviceBuffer<std::uint16_t> device;
    const __nv_bfloat16* data() const { return course::as_bf16(device); }
};

Operand random_operand(const char* name, int rows, int K, GemmMajor major, course::Rng& rng) {
    const auto values = random_bf16_values(elements(rows, K), -1.0f, 1.0f, rng);
    const auto stored =
        major == GemmMajor::kK ? values : course::reference::transpose(values, rows, K);
    return {values, course::DeviceBuffer<std::uint16_t>(name, course::bf16_bits(stored))};
}

// GPT-2's GELU and its derivative in double, from the float constants the kernels use.
double gelu_of(double x) {
    const double inner = double(0.7978845608028654f) * (x + double(0.044715f) * x * x * x);
    return 0.5 * x * (1.0 + std::tanh(inner));
}
double gelu_derivative_of(double x) {
    const double scale = double(0.7978845608028654f), cubic = double(0.044715f);
    const double t = std::tanh(scale * (x + cubic * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * scale * (1.0 + 3.0 * cubic * x * x);
}

// What the epilogue of one case does.
enum class Kind { kStore, kBias, kGelu, kGeluBackward, kAccumulate };

const char* kind_name(Kind kind) {
    switch (kind) {
        case Kind::kStore:
            return "out = P";
        case Kind::kBias:
            return "out = P + bias";
        case Kind::kGelu:
            return "gelu_input = P + bias, out = GELU(gelu_input)";
        case Kind::kGeluBackward:
            return "out = P * GELU'(gelu_backward_input)";
        case Kind::kAccumulate:
            return "accumulate += P";
    }
    return "";
}

struct EpilogueShape {
    int M, N, K;
    GemmMajor a, b;
    Kind kind;

    std::string describe() const {
        return "gemm_bf16_epilogue " + std::to_string(M) + "x" + std::to_string(N) + "x" +
               std::to_string(K) + " (M x N x K), A " + major_name(a) + ", B " + major_name(b) +
               ", " + kind_name(kind);
    }
};

// An absolute bound on the product's error over a case: tolerance(K) (the float32 accumulation of
// K products) at the case's largest |P|.
double product_error(int K, double largest) {
    const course::Tolerance t = tolerance(K);
    return t.atol + t.rtol * largest;
}

double largest_magnitude(const std::vector<double>& values) {
    double largest = 0.0;
    for (double v : values) largest = std::max(largest, std::fabs(v));
    return largest;
}

bool agrees_with(const std::vector<float>& got, const std::vector<double>& want,
                 const course::Tolerance& tol) {
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!tol.accepts(got[i], want[i])) return false;
    return true;
}

// How many elements of two runs' outputs differ in their bits.
std::size_t differing_bits(const std::vector<float>& first, const std::vector<float>& second) {
    std::size_t differing = 0;
    for (std::size_t i = 0; i < first.size(); ++i)
        differing += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
    return differing;
}

// The bf16 outputs of a case, each with what it should hold and how close.
struct Expected {
    std::string name;
    course::DeviceBuffer<std::uint16_t>* device;
    std::vector<double> want;
    course::Tolerance tol;
    std::vector<std::pair<std::vector<double>, std::string>> mistakes;  // (what, diagnosis)
};

testing::AssertionResult compare_bf16(const Expected& e, const std::vector<float>& got, int M,
                                      int N) {
    course::CompareOptions options{
        e.name, course::Matrix{static_cast<std::size_t>(M), static_cast<std::size_t>(N)}};
    options.diagnose = [&] {
        for (const auto& [wrong, why] : e.mistakes)
            if (agrees_with(got, wrong, e.tol)) return "likely cause: " + why;
        return std::string();
    };
    return course::expect_close(got, e.want, e.tol, options);
}

// One case against the CPU product: run twice on the same inputs (into poisoned outputs, or from
// the same C), both compared with the reference, then with each other bit for bit.
void check_epilogue(const EpilogueShape& s, course::Rng& rng) {
    SCOPED_TRACE(s.describe());
    const Operand A = random_operand("A", s.M, s.K, s.a, rng);
    const Operand B = random_operand("B", s.N, s.K, s.b, rng);
    const auto P = course::reference::matmul_abt(A.values, B.values, s.M, s.N, s.K);
    const std::size_t n = elements(s.M, s.N);
    const double e_p = product_error(s.K, largest_magnitude(P));

    if (s.kind == Kind::kAccumulate) {
        const auto c0 = course::random_floats(n, -1.0f, 1.0f, rng);
        course::DeviceBuffer<float> C("accumulate", n);
        std::vector<double> want(n), written(P), unchanged(c0.begin(), c0.end()), twice(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = c0[i] + P[i], twice[i] = c0[i] + 2 * P[i];
        const course::Tolerance tol{e_p, 0x1.0p-22};
        std::vector<std::vector<float>> runs;
        for (int run = 0; run < 2; ++run) {
            C.upload(c0);
            GemmEpilogue epilogue;
            epilogue.accumulate = C.data();
            gemm_bf16_epilogue(s.M, s.N, s.K, A.data(), s.a, B.data(), s.b, epilogue);
            runs.push_back(C.download());
        }
        course::CompareOptions options{"accumulate", course::Matrix{static_cast<std::size_t>(s.M),
                                                                    static_cast<std::size_t>(s.N)}};
        options.diagnose = [&] {
            if (agrees_with(runs[0], written, tol))
                return std::string(
                    "likely cause: accumulate holds P alone: the product was "
                    "written over C instead of added into it");
            if (agrees_with(runs[0], unchanged, tol))
                return std::string("likely cause: accumulate still holds C: nothing was added");
            if (agrees_with(runs[0], twice, tol))
                return std::string(
                    "likely cause: accumulate holds C + 2 P: the product was "
                    "added twice (a split of K added by more than one block?)");
            return std::string();
        };
        EXPECT_TRUE(course::expect_close(runs[0], want, tol, options));
        const std::size_t differing = differing_bits(runs[0], runs[1]);
        EXPECT_EQ(differing, 0u)
            << "accumulate differs between two runs from the same C at " << differing << " of " << n
            << " elements: not deterministic. Are the partial tiles of a split K added in "
               "the order their blocks finish (atomics, or the last block adding its own first) "
               "instead of in split order?";
        return;
    }

    // bf16 outputs: out, and gelu_input where the GELU keeps its input.
    std::vector<float> bias_values, g_values;
    std::optional<course::DeviceBuffer<std::uint16_t>> bias, g;
    if (s.kind == Kind::kBias || s.kind == Kind::kGelu) {
        bias_values = random_bf16_values(s.N, -1.0f, 1.0f, rng);
        bias.emplace("bias", course::bf16_bits(bias_values));
    }
    if (s.kind == Kind::kGeluBackward) {
        g_values = random_bf16_values(n, -5.0f, 5.0f, rng);
        g.emplace("gelu_backward_input", course::bf16_bits(g_values));
    }
    course::DeviceBuffer<std::uint16_t> out("out", n), gelu_input("gelu_input", n);

    std::vector<double> v(P), no_bias(P);  // P + bias, and what a kernel without the bias gives
    if (!bias_values.empty())
        for (int i = 0; i < s.M; ++i)
            for (int j = 0; j < s.N; ++j) v[elements(i, s.N) + j] += bias_values[j];
    const double largest_v = largest_magnitude(v);
    const course::Tolerance stored{e_p, course::kBf16Roundoff};
    std::vector<Expected> expected;
    switch (s.kind) {
        case Kind::kStore:
            expected.push_back({"out", &out, P, stored, {}});
            break;
        case Kind::kBias:
            expected.push_back(
                {"out",
                 &out,
                 v,
                 stored,
                 {{no_bias, "out is P without the bias (bias[j], one per column)"}}});
            break;
        case Kind::kGelu: {
            // GELU's slope is at most 1.13: v's error grows by that much; tanhf adds about 1e-7
            // of |v| (a float evaluation of the formula, 4x headroom).
            std::vector<double> activated(n), of_no_bias(n);
            for (std::size_t i = 0; i < n; ++i)
                activated[i] = gelu_of(v[i]), of_no_bias[i] = gelu_of(no_bias[i]);
            const course::Tolerance gelu_tol{1.13 * e_p + 1e-6 * largest_v, course::kBf16Roundoff};
            expected.push_back({"out",
                                &out,
                                activated,
                                gelu_tol,
                                {{v, "out holds P + bias, not its GELU"},
                                 {of_no_bias, "out is the GELU of P without the bias"}}});
            expected.push_back({"gelu_input",
                                &gelu_input,
                                v,
                                stored,
                                {{activated,
                                  "gelu_input holds the GELU: it keeps the GELU's "
                                  "input, P + bias, which the backward needs"}}});
            break;
        }
        case Kind::kGeluBackward: {
            std::vector<double> want(n);
            for (std::size_t i = 0; i < n; ++i) want[i] = P[i] * gelu_derivative_of(g_values[i]);
            // GELU' is at most 1.13; a float GELU' is within 1.5e-5 for |g| <= 5 (08's gelu
            // checker derives it).
            const course::Tolerance tol{1.13 * e_p + 1.5e-5 * largest_magnitude(P),
                                        course::kBf16Roundoff};
            expected.push_back(
                {"out",
                 &out,
                 want,
                 tol,
                 {{P, "out is P alone: the factor GELU'(gelu_backward_input) is missing"}}});
            break;
        }
        case Kind::kAccumulate:
            break;
    }

    std::vector<std::vector<std::vector<float>>> runs;
    for (int run = 0; run < 2; ++run) {
        out.poison();
        gelu_input.poison();
        GemmEpilogue epilogue;
        epilogue.out = course::as_bf16(out);
        if (bias) epilogue.bias = course::as_bf16(*bias);
        if (s.kind == Kind::kGelu) epilogue.gelu_input = course::as_bf16(gelu_input);
        if (g) epilogue.gelu_backward_input = course::as_bf16(*g);
        gemm_bf16_epilogue(s.M, s.N, s.K, A.data(), s.a, B.data(), s.b, epilogue);
        std::vector<std::vector<float>> outputs;
        for (const Expected& e : expected)
            outputs.push_back(course::bf16_values(e.device->download()));
        runs.push_back(outputs);
    }
    for (std::size_t k = 0; k < expected.size(); ++k) {
        EXPECT_TRUE(compare_bf16(expected[k], runs[0][k], s.M, s.N));
        const std::size_t differing = differing_bits(runs[0][k], runs[1][k]);
        EXPECT_EQ(differing, 0u) << "`" << expected[k].name
                                 << "` differs between two runs on the same inputs at " << differing
                                 << " elements: a race (a stage read before its copies landed, or "
                                    "refilled while still read)";
    }
}

TEST_F(GemmBf16, EpilogueEveryLayoutPair) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    auto rng = test_rng();
    // 8x8x8: one partial tile every way, and an MN-major box wholly past M (N); 72x56x24: K one
    // and a half k16 steps; 136x264x72: one row band past 128, one column band past 256, K = 64
    // + 8; 200x120x1000: a partial K tile (1000 = 15 x 64 + 40); 1000x1032x264: many tiles, both
    // edges partial.
    for (GemmMajor a : {GemmMajor::kK, GemmMajor::kMN})
        for (GemmMajor b : {GemmMajor::kK, GemmMajor::kMN})
            for (const auto& [M, N, K] :
                 {std::tuple{8, 8, 8}, std::tuple{72, 56, 24}, std::tuple{136, 264, 72},
                  std::tuple{200, 120, 1000}, std::tuple{1000, 1032, 264}})
                check_epilogue({M, N, K, a, b, Kind::kStore}, rng);
}

TEST_F(GemmBf16, EpilogueBiasAndGelu) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    auto rng = test_rng();
    // The layouts of the trainer's products: the forward (both K-major) with the bias and with the
    // GELU, the input gradient (B, the weight, MN-major) with GELU'.
    for (const auto& [M, N, K] : {std::tuple{136, 264, 72}, std::tuple{1000, 1032, 264}}) {
        check_epilogue({M, N, K, GemmMajor::kK, GemmMajor::kK, Kind::kBias}, rng);
        check_epilogue({M, N, K, GemmMajor::kK, GemmMajor::kK, Kind::kGelu}, rng);
        check_epilogue({M, N, K, GemmMajor::kK, GemmMajor::kMN, Kind::kGeluBackward}, rng);
    }
}

TEST_F(GemmBf16, EpilogueAccumulateWithKSplit) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    auto rng = test_rng();
    // The weight gradient's layouts (both MN-major): 136x264x72, two tiles and a short K (not
    // split); 128x256x16384, one tile and the trainer's K, split over several blocks; 200x520x3000,
    // 6 tiles, a K split unevenly with a partial last k tile (3000 = 46 x 64 + 56); then the other
    // layouts once each.
    for (const auto& [M, N, K] :
         {std::tuple{136, 264, 72}, std::tuple{128, 256, 16384}, std::tuple{200, 520, 3000}})
        check_epilogue({M, N, K, GemmMajor::kMN, GemmMajor::kMN, Kind::kAccumulate}, rng);
    check_epilogue({200, 520, 3000, GemmMajor::kK, GemmMajor::kK, Kind::kAccumulate}, rng);
    check_epilogue({200, 520, 3000, GemmMajor::kMN, GemmMajor::kK, Kind::kAccumulate}, rng);
    check_epilogue({200, 520, 3000, GemmMajor::kK, GemmMajor::kMN, Kind::kAccumulate}, rng);
}

TEST_F(GemmBf16, EpilogueExtentsAtTheirLimit) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    auto rng = test_rng();
    // M, N and K each at the contract's 2^16, along an MN-major operand's contiguous side where
    // it has one: 512 row bands of 128; 256 column bands of 256; 1024 k tiles, split.
    check_epilogue({65536, 8, 16, GemmMajor::kMN, GemmMajor::kK, Kind::kStore}, rng);
    check_epilogue({8, 65536, 16, GemmMajor::kK, GemmMajor::kMN, Kind::kStore}, rng);
    check_epilogue({8, 8, 65536, GemmMajor::kMN, GemmMajor::kMN, Kind::kAccumulate}, rng);
}

// ---- The trainer's products, timed: GPT-2's MLP at 16384 tokens (768 channels, 3072 hidden) ----

constexpr int kTokens = 16384, kChannels = 768, kHidden = 3072;
constexpr const char* kTrainerBaseline = "cublas_gemm_bf16_trainer";

// Rows `lines` and columns `lines` of an M x N output (`got`, floats) against element(i, j).
template <class Element>
void check_output_lines(const std::vector<float>& got, int M, int N, const std::vector<int>& rows,
                        const std::vector<int>& cols, const std::string& name,
                        const course::Tolerance& tol, Element element) {
    for (int row : rows) {
        std::vector<float> values(got.begin() + elements(row, N),
                                  got.begin() + elements(row + 1, N));
        std::vector<double> want(N);
        for (int col = 0; col < N; ++col) want[col] = element(row, col);
        EXPECT_TRUE(course::expect_close(
            values, want, tol, {name + " row " + std::to_string(row) + " (index = column)"}));
    }
    for (int col : cols) {
        std::vector<float> values(M);
        std::vector<double> want(M);
        for (int row = 0; row < M; ++row)
            values[row] = got[elements(row, N) + col], want[row] = element(row, col);
        EXPECT_TRUE(course::expect_close(
            values, want, tol, {name + " column " + std::to_string(col) + " (index = row)"}));
    }
}

std::vector<int> some_lines(int extent, course::Rng& rng) {
    return {static_cast<int>(rng.uniform_int(0, extent - 2)), extent - 1};
}

// P[i][j] of operands held K-major on the host.
double product_at(const Operand& A, const Operand& B, int K, int i, int j) {
    return course::reference::matmul_abt_element(A.values, B.values, K, i, j);
}

TEST_F(GemmBf16, EpilogueTrainerForwardWithGelu) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    // The MLP's first layer: out = GELU(inp W^T + bias), its input kept. A (the activations) and B
    // (the weight, out x in) K-major, as gemm_bf16 takes them: cuBLAS multiplies the same
    // buffers. inp, W, bias, out, gelu_input, the harness's two copies of each, cuBLAS's float C.
    const int M = kTokens, N = kHidden, K = kChannels;
    const std::size_t n = elements(M, N);
    COURSE_REQUIRE_MEMORY(2 * (elements(M, K) + elements(N, K)) + 2 * 3 * 2 * n + 4 * n +
                          (256u << 20));
    const EpilogueShape shape{M, N, K, GemmMajor::kK, GemmMajor::kK, Kind::kGelu};
    SCOPED_TRACE("GPT-2's fc forward, 16384 tokens: " + shape.describe());
    auto rng = test_rng();
    Operand A = random_operand("inp", M, K, GemmMajor::kK, rng);
    const Operand B = random_operand("W", N, K, GemmMajor::kK, rng);
    const auto bias_values = random_bf16_values(N, -1.0f, 1.0f, rng);
    const course::DeviceBuffer<std::uint16_t> bias("bias", course::bf16_bits(bias_values));
    course::DeviceBuffer<std::uint16_t> out("out", n), gelu_input("gelu_input", n);
    course::DeviceBuffer<float> c_cublas("cuBLAS's C", n);
    GemmEpilogue epilogue;
    epilogue.out = course::as_bf16(out);
    epilogue.bias = course::as_bf16(bias);
    epilogue.gelu_input = course::as_bf16(gelu_input);
    // Products of 768 terms of mean square 1/9: about 9.2 typically (sqrt(768 / 9)), under 60
    // over 50 million of them, the bias included.
    const double e_p = product_error(K, 60.0);

    const auto timing = course::time_against(
        [&] {
            gemm_bf16_epilogue(M, N, K, A.data(), GemmMajor::kK, B.data(), GemmMajor::kK, epilogue);
        },
        [&] {
            course::baseline::cublas_gemm_bf16(M, N, K, A.device.data(), B.device.data(),
                                               c_cublas.data());
        },
        {course::TimedOutput(out), course::TimedOutput(gelu_input)},
        {course::TimedInput(A.device, std::uint16_t{0x8000})});  // every sign of inp

    const auto v = [&](int i, int j) { return product_at(A, B, K, i, j) + bias_values[j]; };
    const auto rows = some_lines(M, rng), cols = some_lines(N, rng);
    check_output_lines(course::bf16_values(gelu_input.download()), M, N, rows, cols, "gelu_input",
                       {e_p, course::kBf16Roundoff}, v);
    check_output_lines(course::bf16_values(out.download()), M, N, rows, cols, "out",
                       {1.13 * e_p + 1e-6 * 60.0, course::kBf16Roundoff},
                       [&](int i, int j) { return gelu_of(v(i, j)); });
    const double flops = 2.0 * M * N * K;  // the same product on both sides
    course::record_flops("fc forward 16384x3072x768", timing, flops, kTrainerBaseline, flops,
                         course::FlopUnits::bf16_tensor_cores);
}

TEST_F(GemmBf16, EpilogueTrainerInputGradientThroughGelu) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    // The MLP's second layer, backward: dinp = (dout W) * GELU'(its forward's input), W (768 out x
    // 3072 in) read as it is stored, K x N: MN-major. cuBLAS multiplies a transposed copy.
    const int M = kTokens, N = kHidden, K = kChannels;
    const std::size_t n = elements(M, N);
    COURSE_REQUIRE_MEMORY(2 * (elements(M, K) + 2 * elements(N, K)) + 2 * 4 * n + 4 * n +
                          (256u << 20));
    const EpilogueShape shape{M, N, K, GemmMajor::kK, GemmMajor::kMN, Kind::kGeluBackward};
    SCOPED_TRACE("GPT-2's fc projection, input gradient, 16384 tokens: " + shape.describe());
    auto rng = test_rng();
    Operand A = random_operand("dout", M, K, GemmMajor::kK, rng);
    const Operand B = random_operand("W", N, K, GemmMajor::kMN, rng);
    const course::DeviceBuffer<std::uint16_t> b_tn("W^T for cuBLAS", course::bf16_bits(B.values));
    const auto g_values = random_bf16_values(n, -5.0f, 5.0f, rng);
    const course::DeviceBuffer<std::uint16_t> g("gelu_backward_input", course::bf16_bits(g_values));
    course::DeviceBuffer<std::uint16_t> out("out", n);
    course::DeviceBuffer<float> c_cublas("cuBLAS's C", n);
    GemmEpilogue epilogue;
    epilogue.out = course::as_bf16(out);
    epilogue.gelu_backward_input = course::as_bf16(g);
    const double e_p = product_error(K, 60.0);  // as the forward's: under 60

    const auto timing = course::time_against(
        [&] {
            gemm_bf16_epilogue(M, N, K, A.data(), GemmMajor::kK, B.data(), GemmMajor::kMN,
                               epilogue);
        },
        [&] {
            course::baseline::cublas_gemm_bf16(M, N, K, A.device.data(), b_tn.data(),
                                               c_cublas.data());
        },
        {course::TimedOutput(out)}, {course::TimedInput(A.device, std::uint16_t{0x8000})});

    check_output_lines(
        course::bf16_values(out.download()), M, N, some_lines(M, rng), some_lines(N, rng), "out",
        {1.13 * e_p + 1.5e-5 * 60.0, course::kBf16Roundoff}, [&](int i, int j) {
            return product_at(A, B, K, i, j) * gelu_derivative_of(g_values[elements(i, N) + j]);
        });
    const double flops = 2.0 * M * N * K;
    course::record_flops("fc projection input gradient 16384x3072x768", timing, flops,
                         kTrainerBaseline, flops, course::FlopUnits::bf16_tensor_cores);
}

TEST_F(GemmBf16, EpilogueTrainerWeightGradient) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    // The MLP's first layer, backward: dW (3072 x 768) += dout^T inp over 16384 tokens, both
    // operands stored tokens x features (K x M, K x N: MN-major), added into float. 72 output
    // tiles for 132 SMs on an H100: K is split. C is also an input, so the harness cannot poison
    // it: the calls are counted, and C must end as C0 + calls x P (saxpy_vec4's way).
    const int M = kHidden, N = kChannels, K = kTokens;
    COURSE_REQUIRE_MEMORY(2 * 2 * (elements(M, K) + elements(N, K)) + 2 * 4 * elements(M, N) +
                          (256u << 20));
    const EpilogueShape shape{M, N, K, GemmMajor::kMN, GemmMajor::kMN, Kind::kAccumulate};
    SCOPED_TRACE("GPT-2's fc weight gradient, 16384 tokens: " + shape.describe());
    auto rng = test_rng();
    const Operand A = random_operand("dout", M, K, GemmMajor::kMN, rng);
    const Operand B = random_operand("inp", N, K, GemmMajor::kMN, rng);
    const course::DeviceBuffer<std::uint16_t> a_tn("dout^T for cuBLAS",
                                                   course::bf16_bits(A.values));
    const course::DeviceBuffer<std::uint16_t> b_tn("inp^T for cuBLAS", course::bf16_bits(B.values));
    const auto c0 = course::random_floats(elements(M, N), -1.0f, 1.0f, rng);
    course::DeviceBuffer<float> C("accumulate", c0), c_cublas("cuBLAS's C", elements(M, N));
    GemmEpilogue epilogue;
    epilogue.accumulate = C.data();
    int calls = 0;

    const auto timing = course::time_against(
        [&] {
            gemm_bf16_epilogue(M, N, K, A.data(), GemmMajor::kMN, B.data(), GemmMajor::kMN,
                               epilogue);
            ++calls;
        },
        [&] {
            course::baseline::cublas_gemm_bf16(M, N, K, a_tn.data(), b_tn.data(), c_cublas.data());
        });

    // |P| about sqrt(16384 / 9) = 43 typically, under 250 over 2.4 million of them; every call
    // adds a product's error and a float rounding of the growing sum.
    const double largest = calls * 250.0 + 1.0;
    const course::Tolerance tol{calls * (product_error(K, 250.0) + 0x1.0p-23 * largest), 0.0};
    SCOPED_TRACE(std::to_string(calls) + " calls, each adding P into C");
    check_output_lines(
        C.download(), M, N, some_lines(M, rng), some_lines(N, rng), "accumulate", tol,
        [&](int i, int j) { return c0[elements(i, N) + j] + calls * product_at(A, B, K, i, j); });
    const double flops = 2.0 * M * N * K;
    course::record_flops("fc weight gradient 3072x768x16384", timing, flops, kTrainerBaseline,
                         flops, course::FlopUnits::bf16_tensor_cores);
}

// An output of 65536 x 32760 = 2^31 - 2^19 bf16 values, past 2^30: at 2 bytes each, a byte offset
// held in 32 bits wraps there (2^31 bytes). Whole rows around it are compared. A large case: last.
TEST_F(GemmBf16, EpilogueOutPastTwoTo30Elements) {
    COURSE_REQUIRE_ENTRY_POINT(gemm_bf16_epilogue);
    const int M = 65536, N = 32760, K = 64;
    const std::size_t n = elements(M, N);
    COURSE_LARGE_CASE(n * 2 + (elements(M, K) + elements(N, K) + N) * 2 + (64u << 20));
    const EpilogueShape shape{M, N, K, GemmMajor::kK, GemmMajor::kK, Kind::kBias};
    SCOPED_TRACE(shape.describe() + ": out past 2^30 elements");
    auto rng = test_rng();
    const Operand A = random_operand("A", M, K, GemmMajor::kK, rng);
    const Operand B = random_operand("B", N, K, GemmMajor::kK, rng);
    const auto bias_values = random_bf16_values(N, -1.0f, 1.0f, rng);
    const course::DeviceBuffer<std::uint16_t> bias("bias", course::bf16_bits(bias_values));
    course::DeviceBuffer<std::uint16_t> out("out", n);
    GemmEpilogue epilogue;
    epilogue.out = course::as_bf16(out);
    epilogue.bias = course::as_bf16(bias);

    course::run_large_case([&] {
        gemm_bf16_epilogue(M, N, K, A.data(), GemmMajor::kK, B.data(), GemmMajor::kK, epilogue);
    });

    std::vector<float> got;
    std::vector<double> want;
    course::CompareOptions options{"out"};
    for (const course::Window& w : course::rows_past_int_range(M, N, rng)) {
        const auto values = course::bf16_values(out.download(w.first, w.count));
        got.insert(got.end(), values.begin(), values.end());
        for (std::size_t e = w.first; e < w.first + w.count; ++e) {
            const int i = static_cast<int>(e / N), j = static_cast<int>(e % N);
            want.push_back(product_at(A, B, K, i, j) + bias_values[j]);
            options.indices.push_back(e);
        }
    }
    // K = 64: |P| under 8, and the bias under 1.
    EXPECT_TRUE(
        course::expect_close(got, want, {product_error(K, 10.0), course::kBf16Roundoff}, options));
}

}  // namespace
