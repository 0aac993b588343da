// Checker of 09_quantization/gemm_w4a16. tile_int4_weights: bit for bit against the CPU's tiled
// layout (common/include/course/reference/quantize.h, whose test ties it to the PTX ISA's B
// fragment). gemm_w4a16, on weights the CPU tiled (so that its failures are its own): y = W x for
// 1 to 64 tokens (one to four m16 tiles, partial ones) against a double-precision CPU product, N
// from one n8 tile to several blocks, K from one group to 65536; a failure names the known
// mistakes (each y holding one slice of K, y never zeroed, one scale for both columns of a lane,
// and those of gemv_w4a16: nibbles read as offset binary, a scale per row, ...). The format's
// accuracy as gemv's. Then the time at 16 and 64 tokens, N = K = 8192, against cuBLAS's bf16 GEMM
// on bf16 weights (the judged cases: the ratio is the speed-up), the bandwidth at 16 tokens against
// a copy of W, and N = 65536 x K = 32768 (2^31 weights, the contract's most).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gemm_w4a16.h"
#include "gemv_checks.h"

namespace {

namespace ref = course::reference;

class GemmW4a16 : public quant::TensorCoreTest {};

// What the weights add when rounded to bf16 before the product (Marlin's way, which the contract
// allows): each product off by up to 2^-9 of itself, so the sum by about 2^-9 sqrt(K / 3) rms; six
// times that.
course::Tolerance tolerance(std::size_t K, double rms) {
    auto tol = gemv::tolerance(K, rms);
    tol.atol += 6.0 * 0x1.0p-9 * std::sqrt(K / 3.0) * rms;
    return tol;
}

// Whether every y is the product over one slice of the groups of K (the slices' blocks storing
// their parts instead of adding them), for some number of slices.
bool one_slice_each(const std::vector<float>& got, const std::vector<float>& x,
                    const gemv::Weights& w, std::size_t M, const course::Tolerance& tol) {
    const std::size_t N = w.N, K = w.K, groups = K / kInt4Group;
    // Each group's part of every y.
    std::vector<std::vector<double>> group_part(groups, std::vector<double>(M * N, 0.0));
    for (std::size_t g = 0; g < groups; ++g)
        for (std::size_t m = 0; m < M; ++m)
            for (std::size_t n = 0; n < N; ++n)
                for (std::size_t k = g * kInt4Group; k < (g + 1) * kInt4Group; ++k)
                    group_part[g][m * N + n] +=
                        static_cast<double>(x[m * K + k]) * w.values[n * K + k];
    for (std::size_t slices = 2; slices <= groups; ++slices) {
        const std::size_t per = (groups + slices - 1) / slices;
        std::vector<std::vector<double>> parts;
        for (std::size_t g0 = 0; g0 < groups; g0 += per) {
            std::vector<double> part(M * N, 0.0);
            for (std::size_t g = g0; g < std::min(groups, g0 + per); ++g)
                for (std::size_t i = 0; i < part.size(); ++i) part[i] += group_part[g][i];
            parts.push_back(std::move(part));
        }
        bool all = true;
        for (std::size_t i = 0; i < got.size() && all; ++i)
            all = std::any_of(parts.begin(), parts.end(),
                              [&](const auto& p) { return tol.accepts(got[i], p[i]); });
        if (all) return true;
    }
    return false;
}

// The mistakes of this exercise first, then gemv_w4a16's.
std::string diagnose_gemm(const std::vector<float>& got, const std::vector<double>& want,
                          const std::vector<float>& x, const gemv::Weights& w, std::size_t M,
                          const course::Tolerance& tol) {
    const std::size_t N = w.N, K = w.K;
    const auto is_nan = [](float v) { return std::isnan(v); };
    if (std::all_of(got.begin(), got.end(), is_nan))
        return "every y is NaN: y holds anything before the call (NaN here): zero it "
               "(cudaMemsetAsync) before the slices of K add their parts";
    // NaN from some element to the end of y in memory order, right before it: the zeroing stopped
    // short of y's M x N floats.
    const auto first_nan = std::find_if(got.begin(), got.end(), is_nan);
    if (first_nan != got.end() && std::all_of(first_nan, got.end(), is_nan) &&
        std::equal(got.begin(), first_nan, want.begin(),
                   [&](float g, double v) { return tol.accepts(g, v); }))
        return "y is NaN from its element " + std::to_string(first_nan - got.begin()) + " of " +
               std::to_string(M * N) + " (in memory order) to the end, and right before it: " +
               "y holds anything before the call (NaN here), and its zeroing stopped short " +
               "of the M x N floats that the slices of K add into";
    if (one_slice_each(got, x, w, M, tol))
        return "each y holds the sum over one slice of K only: the other slices' blocks wrote over "
               "it; add every slice's part with atomicAdd, into a y zeroed first";
    const auto matches = [&](const std::vector<float>& weights) {
        return gemv::agrees(got, gemv::product(x, weights, M, N, K), tol);
    };
    if (matches(gemv::weights_read_as(w, [&](std::size_t n, std::size_t k) {
            return w.values[n * K + k] / w.scale(n, k) * w.scale(n / 2 * 2, k);
        })))
        return "the odd columns of y have the even columns' scales: a lane's accumulators 1 and 3 "
               "are column 2 (lane % 4) + 1 (course::mma_c_element), with their own scale";
    return gemv::diagnose(got, x, w, M, tol);
}

void check_shape(std::size_t M, std::size_t N, std::size_t K, course::Rng& rng,
                 quant::ProductAccuracy& accuracy) {
    SCOPED_TRACE(quant::shape_label(M, N, K) + " (M tokens x N rows of W x K)");
    const gemv::Weights w = gemv::random_weights(gemv::Format::int4, N, K, rng);
    const quant::Bf16Matrix x = quant::to_bf16(quant::activations(M, K, rng));
    const auto want = gemv::product(x.values, w.values, M, N, K);
    course::DeviceBuffer<std::uint16_t> d_x("x", x.bits);
    course::DeviceBuffer<std::uint8_t> d_tiled("tiled W", ref::int4_tiled(w.bytes, N, K));
    course::DeviceBuffer<float> d_scales("scales", w.scales), d_y("y", M * N);

    gemm_w4a16(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), quant::as_bf16(d_x),
               d_tiled.data(), d_scales.data(), d_y.data());
    const auto got = d_y.download();
    const auto tol = tolerance(K, gemv::rms_product(x.values, w.values, M, N, K));
    course::CompareOptions options{"y (M x N)", course::Matrix{M, N}};
    options.diagnose = [&] {
        const std::string cause = diagnose_gemm(got, want, x.values, w, M, tol);
        return cause.empty() ? "" : "likely cause: " + cause;
    };
    EXPECT_TRUE(course::expect_close(got, want, tol, options));

    const auto exact = gemv::product(x.values, w.original, M, N, K);
    for (std::size_t m = 0; m < M; ++m)
        for (std::size_t n = 0; n < N; ++n) {
            double variance = 0.0;
            for (std::size_t k = 0; k < K; ++k) {
                const double step = w.scale(n, k), xv = x.values[m * K + k];
                variance += xv * xv * step * step / 12.0;
            }
            accuracy.add(got[m * N + n], exact[m * N + n], std::sqrt(variance));
        }
}

// The tiled layout with its nibbles in the order of the steps (value 4 s + 2 r + h of a lane's
// 32), a permutation that a lane could also unpack: the contract's puts a register's halves 16
// bits apart instead.
std::string diagnose_tiled(const std::vector<std::uint8_t>& got,
                           const std::vector<std::uint8_t>& packed, std::size_t N, std::size_t K) {
    std::vector<std::uint8_t> in_step_order(got.size(), 0);
    for (std::size_t n = 0; n < N; ++n)
        for (std::size_t k = 0; k < K; ++k) {
            const std::size_t kk = k % 16, step = k % 128 / 16;
            const std::size_t lane = 4 * (n % 8) + kk % 8 / 2;
            const std::size_t at =
                ((n / 8 * (K / 128) + k / 128) * 32 + lane) * 32 + 4 * step + 2 * (kk / 8) + kk % 2;
            const int nibble = (packed[(n * K + k) / 2] >> (4 * (k % 2))) & 0xF;
            in_step_order[at / 2] |= static_cast<std::uint8_t>(nibble << (4 * (at % 2)));
        }
    if (got == in_step_order)
        return "the lane's nibbles are in step order (value 4 s + 2 r + h): the contract puts "
               "step s, register r, half h at nibble 2 (s % 2) + r + 4 h of word s / 2, so that a "
               "register's two halves are 16 bits apart";
    return "";
}

TEST_F(GemmW4a16, TiledLayout) {
    auto rng = test_rng();
    // One tile and group; several of each; GPT-2's 768 x 768 (97 n8 tiles, 6 groups); long rows.
    for (const auto& shape :
         {std::pair<std::size_t, std::size_t>{8, 128}, {24, 384}, {776, 768}, {16, 65536}}) {
        const std::size_t N = shape.first, K = shape.second;
        SCOPED_TRACE("N x K = " + quant::shape_label(N, K));
        const auto packed =
            ref::quantize_int4_groups(quant::weights(N, K, kInt4Group, rng), N, K, kInt4Group)
                .packed;
        const auto want = ref::int4_tiled(packed, N, K);
        course::DeviceBuffer<std::uint8_t> d_packed("packed W", packed),
            d_tiled("tiled W", N * K / 2);
        tile_int4_weights(d_packed.data(), static_cast<int>(N), static_cast<int>(K),
                          d_tiled.data());
        const auto got = d_tiled.download();
        course::CompareOptions options{"tiled W (bytes; 512 per n8 tile and group, 16 per lane)"};
        options.diagnose = [&] { return diagnose_tiled(got, packed, N, K); };
        EXPECT_TRUE(course::expect_equal(got, want, options));
    }
}

TEST_F(GemmW4a16, Shapes) {
    auto rng = test_rng();
    quant::ProductAccuracy accuracy;
    // M: one to four m16 tiles, full and partial. N: one n8 tile, a partial block of 64 columns,
    // several blocks. K: one group, a few (split K: the slices' parts are added).
    for (std::size_t M : {1, 16, 17, 64})
        for (std::size_t N : {8, 72})
            for (std::size_t K : {128, 1152}) check_shape(M, N, K, rng, accuracy);
    check_shape(5, 136, 3072, rng, accuracy);
    check_shape(33, 776, 768, rng, accuracy);  // GPT-2 124M's attention projection, 33 tokens
    check_shape(48, 200, 256, rng, accuracy);
    check_shape(16, 16, 65536, rng, accuracy);  // the longest rows
    quant::record_product_accuracy("y", "y against the product with the float32 weights", accuracy);
}

// Against cuBLAS's bf16 GEMM on the same x and the float32 weights rounded to bf16 (the judged
// cases): the same FLOPs on both sides, so the ratio is the speed-up. The rate's ceiling is the
// tensor cores' bf16 peak.
void time_against_cublas(std::size_t M, std::size_t N, std::size_t K, course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    COURSE_REQUIRE_MEMORY(3 * N * K + 16 * M * N + (256u << 20));
    const std::string label = quant::shape_label(M, N, K);
    SCOPED_TRACE(label + ", against cuBLAS bf16");
    const gemv::TimedProblem p = gemv::timed_problem(gemv::Format::int4, M, N, K, rng);
    course::DeviceBuffer<std::uint16_t> d_x("x", p.x.bits), d_W_bf16("W (bf16)", p.w_bf16.bits);
    course::DeviceBuffer<std::uint8_t> d_tiled("tiled W", ref::int4_tiled(p.w.bytes, N, K));
    course::DeviceBuffer<float> d_scales("scales", p.w.scales), d_y("y", M * N),
        d_y_cublas("cuBLAS's y", M * N);
    const auto tol = tolerance(K, gemv::rms_product(p.x.values, p.w.values, M, N, K));

    // The second input set: x with every sign flipped (bf16's bit 15), which negates y.
    const auto timing = course::time_against(
        [&] {
            gemm_w4a16(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                       quant::as_bf16(d_x), d_tiled.data(), d_scales.data(), d_y.data());
        },
        [&] {
            course::baseline::cublas_gemm_bf16(static_cast<int>(M), static_cast<int>(N),
                                               static_cast<int>(K), d_x.data(), d_W_bf16.data(),
                                               d_y_cublas.data());
        },
        {course::TimedOutput(d_y, tol)}, {course::TimedInput(d_x, std::uint16_t{0x8000})});
    const auto rows = gemv::sampled_rows(N, rng);
    gemv::check_rows(d_y.download(), p.x.values, p.w.values, M, N, K, rows, tol, "y");
    gemv::check_rows(d_y_cublas.download(), p.x.values, p.w_bf16.values, M, N, K, rows,
                     gemv::tolerance(K, gemv::rms_product(p.x.values, p.w_bf16.values, M, N, K)),
                     "cuBLAS's y");
    const double flops = 2.0 * M * N * K;
    course::record_flops(label, timing, flops, "cublas_gemm_bf16", flops,
                         course::FlopUnits::bf16_tensor_cores);
}

TEST_F(GemmW4a16, AgainstCublas16Tokens) { time_against_cublas(16, 8192, 8192, test_rng()); }
TEST_F(GemmW4a16, AgainstCublas64Tokens) { time_against_cublas(64, 8192, 8192, test_rng()); }

// The bandwidth on the bytes that must move at 16 tokens, beside a copy of W: how close the
// kernel is to the weights' own time.
TEST_F(GemmW4a16, Bandwidth16Tokens) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    const std::size_t M = 16, N = 8192, K = 8192;
    COURSE_REQUIRE_MEMORY(N * K + 12 * M * N + (256u << 20));
    const std::string label = quant::shape_label(M, N, K);
    SCOPED_TRACE(label);
    auto rng = test_rng();
    const gemv::TimedProblem p = gemv::timed_problem(gemv::Format::int4, M, N, K, rng);
    const auto tiled = ref::int4_tiled(p.w.bytes, N, K);
    course::DeviceBuffer<std::uint16_t> d_x("x", p.x.bits);
    course::DeviceBuffer<std::uint8_t> d_tiled("tiled W", tiled), d_copy("copy", tiled.size());
    course::DeviceBuffer<float> d_scales("scales", p.w.scales), d_y("y", M * N);
    const auto tol = tolerance(K, gemv::rms_product(p.x.values, p.w.values, M, N, K));
    const auto timing = course::time_against(
        [&] {
            gemm_w4a16(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                       quant::as_bf16(d_x), d_tiled.data(), d_scales.data(), d_y.data());
        },
        [&] { course::baseline::device_copy(d_copy.data(), d_tiled.data(), tiled.size()); },
        {course::TimedOutput(d_y, tol)}, {course::TimedInput(d_x, std::uint16_t{0x8000})});
    gemv::check_rows(d_y.download(), p.x.values, p.w.values, M, N, K, gemv::sampled_rows(N, rng),
                     tol, "y");
    const double bytes = p.w.bytes_moved() + 2.0 * M * K + 4.0 * M * N;
    course::record_bandwidth(label, timing, bytes, "copy", 2.0 * tiled.size());
}

TEST_F(GemmW4a16, LargestWeights) {
    // N = 65536 rows (the contract's most) of K = 32768: 2^31 weights, 1 GiB tiled, made on the
    // device from a hash. 16 tokens; y compared at the first, middle and last columns.
    const std::size_t M = 16, N = 65536, K = 32768;
    const std::size_t bytes = N * K / 2, scale_count = N * K / kInt4Group;
    COURSE_LARGE_CASE(bytes + 4 * scale_count + 4 * M * N + (64u << 20));
    SCOPED_TRACE(quant::shape_label(M, N, K) + ", W made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64(), scale_seed = rng.next_u64();
    const quant::Bf16Matrix x = quant::to_bf16(course::random_floats(M * K, -1.0f, 1.0f, rng));
    course::DeviceBuffer<std::uint16_t> d_x("x", x.bits);
    course::DeviceBuffer<std::uint8_t> d_tiled("tiled W", bytes);
    course::DeviceBuffer<float> d_scales("scales", scale_count), d_y("y", M * N);
    course::fill_bytes(d_tiled.data(), bytes, seed);
    course::fill_uniform(d_scales.data(), scale_count, scale_seed, 1e-3f, 1e-2f);

    course::run_large_case([&] {
        gemm_w4a16(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                   quant::as_bf16(d_x), d_tiled.data(), d_scales.data(), d_y.data());
    });

    // W[n][k] is the nibble the tiled layout puts it in.
    const auto weight = [&](std::size_t n, std::size_t k) {
        const std::size_t at = ref::int4_tiled_index(n, k, K);
        const int q =
            ref::int4_nibble(course::hashed::byte(at / 2, seed), static_cast<int>(at % 2));
        return static_cast<float>(q) *
               course::hashed::uniform(n * (K / kInt4Group) + k / kInt4Group, scale_seed, 1e-3f,
                                       1e-2f);
    };
    std::vector<course::Window> windows;
    for (std::size_t m : {std::size_t{0}, M - 1})
        for (std::size_t n0 : {std::size_t{0}, N / 2 - 32, N - 64})
            windows.push_back({m * N + n0, 64});
    const auto reference = [&](const course::Window& win) {
        std::vector<double> y(win.count);
        const std::size_t m = win.first / N;
        for (std::size_t i = 0; i < win.count; ++i) {
            const std::size_t n = win.first % N + i;
            for (std::size_t k = 0; k < K; ++k)
                y[i] += static_cast<double>(x.values[m * K + k]) * weight(n, k);
        }
        return y;
    };
    EXPECT_TRUE(course::expect_windows_close(d_y, windows, reference, tolerance(K, 0.03),
                                             {"y (flat index token * N + column)"}));
}

}  // namespace
