// The checks shared by gemv_w8a16 and gemv_w4a16 (their checkers are this file with the exercise's
// launcher): y = W x for 1 to 16 tokens against a double-precision CPU product of the same bf16 x
// and the dequantized weights, on shapes around a warp's 512 (INT8) or 1024 (INT4) weights per
// step, K from one step to 65536, N from 1 to GPT-2's 3072; a failure names the known mistakes (a
// scale missing, one scale per row instead of per group, a group's last values with the next
// group's scale or its first with the previous group's, nibbles swapped or unsigned, every token
// reading token 0's x). Every case prints
// the format's accuracy: y against the product with the float32 weights, in units of what rounding
// each weight predicts. Then the timed cases: one token at N = K = 8192 (judged: the bandwidth on
// the bytes that must move, against a copy of W), 16 tokens, and both against cuBLAS's bf16 GEMM
// on bf16 weights; and N = 2^20 rows, past 2^31 bytes of W.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/linalg.h"
#include "course/reference/quantize.h"
#include "course/testing.h"
#include "quant_checks.h"
#include "quant_formats.h"

namespace gemv {

namespace ref = course::reference;

enum class Format { int8, int4 };

// The exercise's launcher, with W as bytes (the INT8 checker casts them to int8).
using Launcher = std::function<void(int M, int N, int K, const __nv_bfloat16* x,
                                    const std::uint8_t* W, const float* scales, float* y)>;

struct Weights {
    Format format;
    std::size_t N, K;
    std::vector<std::uint8_t> bytes;  // INT8: N x K; INT4: N x K / 2, pack_int4's format
    std::vector<float> scales;        // INT8: N; INT4: N x K / 128
    std::vector<float> values;        // dequantized, N x K
    std::vector<float> original;      // the float32 weights, N x K

    float scale(std::size_t n, std::size_t k) const {
        return format == Format::int8 ? scales[n] : scales[n * (K / kInt4Group) + k / kInt4Group];
    }
    double bytes_moved() const { return bytes.size() + 4.0 * scales.size(); }
};

inline Weights quantize(Format format, std::vector<float> original, std::size_t N, std::size_t K) {
    Weights w{format, N, K, {}, {}, {}, std::move(original)};
    if (format == Format::int8) {
        auto q = ref::quantize_int8_rows(w.original, N, K);
        w.bytes.assign(q.q.begin(), q.q.end());
        w.scales = std::move(q.scales);
        w.values = ref::dequantize_int8_rows(q.q, w.scales, N, K);
    } else {
        auto q = ref::quantize_int4_groups(w.original, N, K, kInt4Group);
        w.bytes = std::move(q.packed);
        w.scales = std::move(q.scales);
        w.values = ref::dequantize_int4_groups(w.bytes, w.scales, N, K, kInt4Group);
    }
    return w;
}

// Rows (INT8) or groups (INT4) of sizes up to 2^+-2 apart.
inline Weights random_weights(Format format, std::size_t N, std::size_t K, course::Rng& rng) {
    const std::size_t span = format == Format::int8 ? K : kInt4Group;
    return quantize(format, quant::weights(N, K, span, rng, 2), N, K);
}

// The weights as a mistake would read them, for the diagnoses: `value(n, k)` for every weight.
template <class Value>
std::vector<float> weights_read_as(const Weights& w, Value value) {
    std::vector<float> v(w.N * w.K);
    for (std::size_t n = 0; n < w.N; ++n)
        for (std::size_t k = 0; k < w.K; ++k) v[n * w.K + k] = value(n, k);
    return v;
}

inline int nibble(const Weights& w, std::size_t n, std::size_t k) {
    return (w.bytes[(n * w.K + k) / 2] >> (4 * (k % 2))) & 0xF;
}

// The products of every token with every row of `weights`, in double.
inline std::vector<double> product(const std::vector<float>& x, const std::vector<float>& weights,
                                   std::size_t M, std::size_t N, std::size_t K) {
    return ref::matmul_abt(x, weights, M, N, K);
}

// float32 accumulation of K products of typical size `rms` (module 05's reasoning).
inline course::Tolerance tolerance(std::size_t K, double rms) {
    return course::Tolerance::float32(K, rms);
}

// The root-mean-square product x_k w_nk over the whole problem, for the tolerance.
inline double rms_product(const std::vector<float>& x, const std::vector<float>& w, std::size_t M,
                          std::size_t N, std::size_t K) {
    double xs = 0.0, ws = 0.0;
    for (float v : x) xs += static_cast<double>(v) * v;
    for (float v : w) ws += static_cast<double>(v) * v;
    return std::sqrt(xs / (M * K) * (ws / (N * K)));
}

inline bool agrees(const std::vector<float>& got, const std::vector<double>& want,
                   const course::Tolerance& tol) {
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!tol.accepts(got[i], want[i])) return false;
    return true;
}

// What a wrong y is, when a known mistake explains it.
inline std::string diagnose(const std::vector<float>& got, const std::vector<float>& x,
                            const Weights& w, std::size_t M, const course::Tolerance& tol) {
    const std::size_t N = w.N, K = w.K;
    const auto matches = [&](const std::vector<float>& weights) {
        return agrees(got, product(x, weights, M, N, K), tol);
    };
    if (M > 1) {
        // Token 0 right everywhere, and every token equal to token 0's product.
        std::vector<float> first_x(x.size());
        for (std::size_t m = 0; m < M; ++m) std::copy_n(x.begin(), K, first_x.begin() + m * K);
        if (agrees(got, product(first_x, w.values, M, N, K), tol))
            return "every token's y is token 0's: token m's x starts at x + m * K";
    }
    if (w.format == Format::int8) {
        if (matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
                return static_cast<float>(static_cast<std::int8_t>(w.bytes[n * K + k]));
            })))
            return "y is the product with q, not q * scale: multiply by the row's scale";
        if (matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
                return static_cast<float>(w.bytes[n * K + k] - 128) * w.scales[n];
            })))
            return "the weights came out as byte - 128 (offset binary): an int8 is two's "
                   "complement, and q ^ 0x80 is q + 128 (the 0x80 before the exponent trick)";
        if (matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
                return w.values[n * K + k] * w.scales[n];
            })))
            return "y has the row's scale twice";
        return "";
    }
    const std::size_t groups = K / kInt4Group;
    if (groups > 1 && matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
            return static_cast<float>(
                       ref::int4_nibble(w.bytes[(n * K + k) / 2], static_cast<int>(k % 2))) *
                   w.scales[n * groups];
        })))
        return "y is the product with one scale per row, the row's first group's: a group of 128 "
               "values has its own scale, scales[n * (K / 128) + k / 128]";
    if (matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
            const int q = ref::int4_nibble(w.bytes[(n * K + k) / 2], static_cast<int>(1 - k % 2));
            return static_cast<float>(q) * w.scale(n, k);
        })))
        return "the two nibbles of each byte are swapped: column 2j is in bits 0-3, 2j + 1 in "
               "bits 4-7";
    if (matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
            return static_cast<float>(nibble(w, n, k)) * w.scale(n, k);
        })))
        return "the nibbles 8 .. 15 were read as 8 .. 15: they are -8 .. -1 (two's complement): "
               "extend the sign";
    if (matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
            return static_cast<float>(nibble(w, n, k) - 8) * w.scale(n, k);
        })))
        return "the weights came out as nibble - 8 (offset binary): a two's complement nibble is "
               "q + 8 only after ^ 8, the sign's half of the exponent trick";
    // The last 32 values of each group with the scale after the group's (the next row's first,
    // after the last group of a row; past the end of the scales, NaN, after the last row's).
    if (matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
            const std::size_t at = n * groups + (k + 32) / kInt4Group;
            const float scale = at < w.scales.size() ? w.scales[at] : std::nanf("");
            return static_cast<float>(
                       ref::int4_nibble(w.bytes[(n * K + k) / 2], static_cast<int>(k % 2))) *
                   scale;
        })))
        return "the last 32 values of each group take the next group's scale: the group of "
               "column k is k / 128";
    // The first 32 values of each group with the group's before (the row's first group keeps
    // its own): the group counted from the load before.
    if (groups > 1 && matches(weights_read_as(w, [&](std::size_t n, std::size_t k) {
            const std::size_t group = k < 32 ? 0 : (k - 32) / kInt4Group;
            return static_cast<float>(
                       ref::int4_nibble(w.bytes[(n * K + k) / 2], static_cast<int>(k % 2))) *
                   w.scales[n * groups + group];
        })))
        return "the first 32 values of each group take the previous group's scale: the group of "
               "column k is k / 128";
    return "";
}

// One shape: y for M tokens against the CPU product; the accuracy of the format added up.
inline void check_shape(const Launcher& run, Format format, std::size_t M, std::size_t N,
                        std::size_t K, course::Rng& rng, quant::ProductAccuracy& accuracy) {
    SCOPED_TRACE(quant::shape_label(M, N, K) + " (M tokens x N rows of W x K)");
    const Weights w = random_weights(format, N, K, rng);
    const quant::Bf16Matrix x = quant::to_bf16(quant::activations(M, K, rng));
    const auto want = product(x.values, w.values, M, N, K);
    course::DeviceBuffer<std::uint16_t> d_x("x", x.bits);
    course::DeviceBuffer<std::uint8_t> d_W("W", w.bytes);
    course::DeviceBuffer<float> d_scales("scales", w.scales), d_y("y", M * N);

    run(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), quant::as_bf16(d_x),
        d_W.data(), d_scales.data(), d_y.data());
    const auto got = d_y.download();
    const auto tol = tolerance(K, rms_product(x.values, w.values, M, N, K));
    course::CompareOptions options{"y (M x N)", course::Matrix{M, N}};
    options.diagnose = [&] {
        const std::string cause = diagnose(got, x.values, w, M, tol);
        return cause.empty() ? "" : "likely cause: " + cause;
    };
    EXPECT_TRUE(course::expect_close(got, want, tol, options));

    // The format's accuracy: y against the product with the float32 weights, over what rounding
    // to nearest predicts (each weight off by at most half its step, variance step^2 / 12).
    const auto exact = product(x.values, w.original, M, N, K);
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

inline void check_shapes(const Launcher& run, Format format) {
    const auto* info = testing::UnitTest::GetInstance()->current_test_info();
    auto rng = course::rng_for(std::string(info->test_suite_name()) + "." + info->name());
    quant::ProductAccuracy accuracy;
    // K: one load per lane and less (the first); not a multiple of a warp's step (512 INT8
    // weights, 1024 INT4); GPT-2's 768 and 3072 (two chunks of the readable INT8 kernel's tile,
    // the second partial; 65536 is 16 or more). N: 1 row, partial warps of 4 rows and blocks of
    // 8 or 16. M: 1 to 16, each bound of the kernels a solution may specialize.
    const std::vector<std::size_t> Ks = format == Format::int8
                                            ? std::vector<std::size_t>{16, 48, 528, 768, 3072}
                                            : std::vector<std::size_t>{128, 256, 768, 1152, 3072};
    for (std::size_t K : Ks)
        for (std::size_t N : {1, 9, 33})
            for (std::size_t M : {1, 3}) check_shape(run, format, M, N, K, rng, accuracy);
    for (std::size_t M : {2, 4, 5, 8, 9, 16}) check_shape(run, format, M, 67, 768, rng, accuracy);
    check_shape(run, format, 1, 2304, 768, rng, accuracy);  // GPT-2 124M's qkv projection
    check_shape(run, format, 4, 768, 3072, rng, accuracy);  // its MLP's second product
    check_shape(run, format, 2, 5, 65536, rng, accuracy);   // the longest rows
    // One token over many trips of a fast kernel's block (4096 columns a trip), the last partial.
    check_shape(run, format, 1, 5, format == Format::int8 ? 65520 : 65408, rng, accuracy);
    quant::record_product_accuracy("y", "y against the product with the float32 weights", accuracy);
}

// ---- Timed cases ----------------------------------------------------------------------------

// The x, W and y of a timed shape, and cuBLAS's bf16 weights.
struct TimedProblem {
    std::size_t M, N, K;
    Weights w;
    quant::Bf16Matrix x;
    quant::Bf16Matrix w_bf16;  // the float32 weights in bf16: what cuBLAS multiplies
};

inline TimedProblem timed_problem(Format format, std::size_t M, std::size_t N, std::size_t K,
                                  course::Rng& rng) {
    Weights w = random_weights(format, N, K, rng);
    quant::Bf16Matrix w_bf16 = quant::to_bf16(w.original);
    return {
        M, N, K, std::move(w), quant::to_bf16(quant::activations(M, K, rng)), std::move(w_bf16)};
}

// y on `rows` sampled rows of W (every token) against the CPU: the full product at 16 tokens
// would take seconds.
inline void check_rows(const std::vector<float>& got, const std::vector<float>& x,
                       const std::vector<float>& weights, std::size_t M, std::size_t N,
                       std::size_t K, const std::vector<std::size_t>& rows,
                       const course::Tolerance& tol, const std::string& name) {
    std::vector<float> values;
    std::vector<double> want;
    for (std::size_t n : rows)
        for (std::size_t m = 0; m < M; ++m) {
            values.push_back(got[m * N + n]);
            double sum = 0.0;
            for (std::size_t k = 0; k < K; ++k)
                sum += static_cast<double>(x[m * K + k]) * weights[n * K + k];
            want.push_back(sum);
        }
    EXPECT_TRUE(course::expect_close(values, want, tol,
                                     {name + " on sampled rows (index = row sample * M + token)"}));
}

inline std::vector<std::size_t> sampled_rows(std::size_t N, course::Rng& rng) {
    std::vector<std::size_t> rows{0, N - 1};
    for (int i = 0; i < 254; ++i)
        rows.push_back(
            static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(N) - 1)));
    return rows;
}

// The exercise against a copy of W (the judged case at one token): the bytes that must move are
// W and its scales once, x and y.
inline void time_against_copy(const Launcher& run, Format format, std::size_t M, std::size_t N,
                              std::size_t K, course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    // W and the copy's destination, y and the harness's two copies of it (one per input set),
    // the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(2 * N * K + 12 * M * N + (256u << 20));
    const std::string label = quant::shape_label(M, N, K);
    SCOPED_TRACE(label);
    const TimedProblem p = timed_problem(format, M, N, K, rng);
    course::DeviceBuffer<std::uint16_t> d_x("x", p.x.bits);
    course::DeviceBuffer<std::uint8_t> d_W("W", p.w.bytes), d_copy("copy", p.w.bytes.size());
    course::DeviceBuffer<float> d_scales("scales", p.w.scales), d_y("y", M * N);
    const auto tol = tolerance(K, rms_product(p.x.values, p.w.values, M, N, K));

    // The second input set: x with every sign flipped (bf16's bit 15), which negates y.
    const auto timing = course::time_against(
        [&] {
            run(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), quant::as_bf16(d_x),
                d_W.data(), d_scales.data(), d_y.data());
        },
        [&] { course::baseline::device_copy(d_copy.data(), d_W.data(), p.w.bytes.size()); },
        {course::TimedOutput(d_y, tol)}, {course::TimedInput(d_x, std::uint16_t{0x8000})});
    check_rows(d_y.download(), p.x.values, p.w.values, M, N, K, sampled_rows(N, rng), tol, "y");
    // W and its scales once, each token's x (2 bytes a value) and y (4); the copy reads and
    // writes W.
    const double bytes = p.w.bytes_moved() + 2.0 * M * K + 4.0 * M * N;
    course::record_bandwidth(label, timing, bytes, "copy", 2.0 * p.w.bytes.size());
}

// The exercise against cuBLAS's bf16 GEMM (cublasGemmEx, float32 accumulation and output) on the
// same x and the float32 weights rounded to bf16: the same FLOPs on both sides, so the ratio is
// the speed-up the quantized weights buy.
inline void time_against_cublas(const Launcher& run, Format format, std::size_t M, std::size_t N,
                                std::size_t K, course::Rng rng) {
    COURSE_SKIP_ON_EMULATOR("a timed case");
    COURSE_REQUIRE_MEMORY(3 * N * K + 16 * M * N + (256u << 20));
    const std::string label = quant::shape_label(M, N, K);
    SCOPED_TRACE(label + ", against cuBLAS bf16");
    const TimedProblem p = timed_problem(format, M, N, K, rng);
    course::DeviceBuffer<std::uint16_t> d_x("x", p.x.bits), d_W_bf16("W (bf16)", p.w_bf16.bits);
    course::DeviceBuffer<std::uint8_t> d_W("W", p.w.bytes);
    course::DeviceBuffer<float> d_scales("scales", p.w.scales), d_y("y", M * N),
        d_y_cublas("cuBLAS's y", M * N);
    const auto tol = tolerance(K, rms_product(p.x.values, p.w.values, M, N, K));

    const auto timing = course::time_against(
        [&] {
            run(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), quant::as_bf16(d_x),
                d_W.data(), d_scales.data(), d_y.data());
        },
        [&] {
            course::baseline::cublas_gemm_bf16(static_cast<int>(M), static_cast<int>(N),
                                               static_cast<int>(K), d_x.data(), d_W_bf16.data(),
                                               d_y_cublas.data());
        },
        {course::TimedOutput(d_y, tol)}, {course::TimedInput(d_x, std::uint16_t{0x8000})});
    const auto rows = sampled_rows(N, rng);
    check_rows(d_y.download(), p.x.values, p.w.values, M, N, K, rows, tol, "y");
    check_rows(d_y_cublas.download(), p.x.values, p.w_bf16.values, M, N, K, rows,
               tolerance(K, rms_product(p.x.values, p.w_bf16.values, M, N, K)), "cuBLAS's y");
    const double flops = 2.0 * M * N * K;  // a multiply and an add per weight and token
    course::record_flops(label, timing, flops, "cublas_gemm_bf16", flops);
}

// ---- Past 2^31 bytes of W ---------------------------------------------------------------------

// y of M tokens, computed from W and scales made on the device from `seed` and `scale_seed`, on
// rows at the start, around row 2^19 (the first past 2^31 bytes or 2^32 nibbles) and at the end,
// for every token, against the CPU.
inline void check_windows_past_int_range(const course::DeviceBuffer<float>& d_y,
                                         const quant::Bf16Matrix& x, Format format, std::size_t M,
                                         std::size_t N, std::size_t K, std::uint64_t seed,
                                         std::uint64_t scale_seed) {
    std::vector<course::Window> windows;
    for (std::size_t m = 0; m < M; ++m)
        for (const std::size_t first : {std::size_t{0}, N / 2 - 32, N - 64})
            windows.push_back({m * N + first, 64});
    // A window of y's rows [m][n] at m * N + n: token m = first / N, rows n from first % N.
    const auto reference = [&](const course::Window& win) {
        std::vector<double> y(win.count);
        const std::size_t m = win.first / N;
        for (std::size_t i = 0; i < win.count; ++i) {
            const std::size_t n = win.first % N + i;
            double sum = 0.0;
            for (std::size_t k = 0; k < K; ++k) {
                float value;
                if (format == Format::int8) {
                    const auto q = static_cast<std::int8_t>(course::hashed::byte(n * K + k, seed));
                    value = static_cast<float>(q) *
                            course::hashed::uniform(n, scale_seed, 1e-3f, 1e-2f);
                } else {
                    const std::uint8_t b = course::hashed::byte((n * K + k) / 2, seed);
                    const int q = ref::int4_nibble(b, static_cast<int>(k % 2));
                    value = static_cast<float>(q) *
                            course::hashed::uniform(n * (K / kInt4Group) + k / kInt4Group,
                                                    scale_seed, 1e-3f, 1e-2f);
                }
                sum += static_cast<double>(x.values[m * K + k]) * value;
            }
            y[i] = sum;
        }
        return y;
    };
    // Products up to 128 * 1e-2 = 1.28 in size (INT8), 8 * 1e-2 (INT4).
    const auto tol = tolerance(K, format == Format::int8 ? 0.4 : 0.03);
    std::vector<float> got;
    std::vector<double> want;
    course::CompareOptions options{"y (index = token * N + row of W)"};
    for (const course::Window& win : windows) {
        const auto part = d_y.download(win.first, win.count);
        const auto expected = reference(win);
        got.insert(got.end(), part.begin(), part.end());
        want.insert(want.end(), expected.begin(), expected.end());
        for (std::size_t i = 0; i < win.count; ++i) options.indices.push_back(win.first + i);
    }
    // Right in the first rows and wrong from some row on, where W's offset n * K passes 2^31.
    options.diagnose = [&] {
        std::size_t first_wrong = N;
        for (std::size_t i = 0; i < got.size(); ++i)
            if (!tol.accepts(got[i], want[i]))
                first_wrong = std::min(first_wrong, options.indices[i] % N);
        if (first_wrong < 64) return std::string();
        return "y is right in the first rows and wrong from row " + std::to_string(first_wrong) +
               " on, where n * K (" + std::to_string(first_wrong * K) +
               (format == Format::int8 ? " bytes" : " nibbles") +
               ") has passed 2^31: 32-bit int arithmetic overflows; compute W's offsets in 64 "
               "bits (std::size_t)";
    };
    EXPECT_TRUE(course::expect_close(got, want, tol, options));
}

// N = 2^20 rows (the contract's most) of K values, made on the device from a hash: row 2^19 starts
// past byte 2^31 (INT8, K = 4096) or past nibble 2^32 (INT4, K = 8192), where 32-bit offsets
// overflow. One token, then two, so that a kernel with a path of its own for each (a fast
// reference's kernel for one token, its tensor cores from two on) runs both here.
inline void check_past_int_range(const Launcher& run, Format format, course::Rng rng) {
    constexpr std::size_t kMaxTokens = 2;
    const std::size_t N = std::size_t{1} << 20, K = format == Format::int8 ? 4096 : 8192;
    const std::size_t bytes = format == Format::int8 ? N * K : N * K / 2;
    const std::size_t scale_count = format == Format::int8 ? N : N * K / kInt4Group;
    COURSE_LARGE_CASE(bytes + 4 * scale_count + 8 * kMaxTokens * N + (64u << 20));
    const std::uint64_t seed = rng.next_u64(), scale_seed = rng.next_u64();
    const quant::Bf16Matrix x =
        quant::to_bf16(course::random_floats(kMaxTokens * K, -1.0f, 1.0f, rng));
    course::DeviceBuffer<std::uint16_t> d_x("x", x.bits);
    course::DeviceBuffer<std::uint8_t> d_W("W", bytes);
    course::DeviceBuffer<float> d_scales("scales", scale_count), d_y("y", kMaxTokens * N);
    course::fill_bytes(d_W.data(), bytes, seed);
    course::fill_uniform(d_scales.data(), scale_count, scale_seed, 1e-3f, 1e-2f);

    for (std::size_t M = 1; M <= kMaxTokens; ++M) {
        SCOPED_TRACE(quant::shape_label(M, N, K) + ", W made on the device");
        d_y.poison();  // token 0's rows of the one-token run do not count for the next
        course::run_large_case([&] {
            run(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), quant::as_bf16(d_x),
                d_W.data(), d_scales.data(), d_y.data());
        });
        check_windows_past_int_range(d_y, x, format, M, N, K, seed, scale_seed);
    }
}

}  // namespace gemv
