// Checker of 08_training/gelu: forward and backward in float, then in bf16 (compute capability
// 8.0 and newer), on lengths around the 16-byte width (tails), views that start off a 16-byte
// boundary (one pointer at a time), the backward in place, inputs in the GELU's curve and far in
// its tails; the backward against the derivative of the tanh form, with a tolerance tight enough
// to tell it from the exact (erf) GELU's derivative; then the bandwidth of each against a device
// copy, then more than 2^31 elements.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/testing.h"
#include "gelu.h"
#include "training_checks.h"

namespace {

using training_checks::Activations;
using training_checks::kIsBf16;
using training_checks::kUnitRoundoff;
using training_checks::random_activations;
using training_checks::View;
using bf16 = __nv_bfloat16;

class Gelu : public course::GpuTest {};

// ---- References, in double, from the float constants of gelu.h ----

double inner(double x) { return double(kGeluScale) * (x + double(kGeluCubic) * x * x * x); }
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(inner(x))); }
double inner_derivative(double x) {
    return double(kGeluScale) * (1.0 + 3.0 * double(kGeluCubic) * x * x);
}
double gelu_derivative(double x) {
    const double t = std::tanh(inner(x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * inner_derivative(x);
}
// The exact GELU's derivative, Phi(x) + x phi(x): what a backward written from the erf form of
// GELU computes. Up to 8.7e-4 away from gelu_derivative (near |x| = 2).
double erf_gelu_derivative(double x) {
    const double pi = 3.141592653589793;
    return 0.5 * (1.0 + std::erf(x / std::sqrt(2.0))) +
           x * std::exp(-0.5 * x * x) / std::sqrt(2 * pi);
}

// ---- Tolerances: how far a float evaluation of the formulas may be from the exact values ----
//
// With u = 2^-24 (float32's unit roundoff) and t = tanh(inner(x)):
//  - inner(x) takes about 5 roundings: within 5u |inner|;
//  - tanhf is within 2 ulp (CUDA's documented bound), at most 2u for |t| < 1, and carries
//    inner's error times tanh' = 1 - t^2: err_t = 2u + 5u |inner| (1 - t^2);
//  - forward, 0.5 x (1 + t): 0.5 |x| err_t, plus 3 roundings of the result;
//  - derivative, 0.5 (1 + t) + 0.5 x (1 - t^2) inner'(x): 0.5 err_t + u for the first term;
//    1 - t^2 is off by 2 |t| err_t + 2u, times 0.5 |x| inner'(x), for the second; 6 roundings of
//    the terms; times dout, one more.
// The bound is the largest over the inputs' range (a grid of it), times 4: room for any order
// of evaluation, fused multiply-adds, and tanh computed from expf. Over [-5, 5] the backward's
// atol is 1.5e-5 for |dout| <= 1, while the exact GELU's derivative differs from the tanh form's
// by up to 8.7e-4 (near |x| = 2), by more than that atol at 90% of the x in [-5, 5] (the
// difference crosses zero twice on each side): a backward from the erf form fails at about 78%
// of the elements, with dout drawn from [-1, 1]. bf16 results are rounded once more when stored
// (course::kBf16Roundoff relatively, which hides that difference: the float cases are the ones
// that see it). Far in the tails (|x| from 5 to 30) the bound is 2e-3: tanh is saturated there,
// and 1 ulp of it, times 0.5 |x| inner'(x), is that much.
double tanh_error(double x) {
    const double t = std::tanh(inner(x));
    return 2 * kUnitRoundoff + 5 * kUnitRoundoff * std::fabs(inner(x)) * (1 - t * t);
}
double forward_error(double x) {
    return 0.5 * std::fabs(x) * tanh_error(x) + 3 * kUnitRoundoff * std::fabs(gelu(x));
}
double derivative_error(double x) {
    const double t = std::tanh(inner(x)), e = tanh_error(x);
    const double second = 0.5 * std::fabs(x) * (1 - t * t) * inner_derivative(x);
    return 0.5 * e + kUnitRoundoff +
           0.5 * std::fabs(x) * inner_derivative(x) * (2 * std::fabs(t) * e + 2 * kUnitRoundoff) +
           6 * kUnitRoundoff * (0.5 * (1 + t) + second) + kUnitRoundoff * gelu_derivative(x);
}

// The largest of `error` over a grid of [lo, hi], times 4 (above).
template <class Error>
double largest_error(float lo, float hi, Error error) {
    double largest = 0.0;
    const int steps = 20000;
    for (int i = 0; i <= steps; ++i) largest = std::max(largest, error(lo + (hi - lo) * i / steps));
    return 4 * largest;
}

template <class Act>
course::Tolerance forward_tolerance(float lo, float hi) {
    return {largest_error(lo, hi, forward_error),
            kIsBf16<Act> ? course::kBf16Roundoff : 4 * kUnitRoundoff};
}
// dout in [-1, 1].
template <class Act>
course::Tolerance backward_tolerance(float lo, float hi) {
    return {largest_error(lo, hi, derivative_error),
            kIsBf16<Act> ? course::kBf16Roundoff : 4 * kUnitRoundoff};
}

// ---- Cases ----

struct Case {
    std::size_t n;
    float lo = -5.0f, hi = 5.0f;  // the range of x
    // Elements past a 16-byte boundary at which each view starts (out or dinp, inp, dout).
    std::size_t out_offset = 0, inp_offset = 0, dout_offset = 0;
    bool in_place = false;  // backward: dinp is dout

    std::string describe(const char* type) const {
        std::string text = std::string(type) + ", n = " + std::to_string(n) + ", x in [" +
                           std::to_string(int(lo)) + ", " + std::to_string(int(hi)) + "]";
        if (out_offset + inp_offset + dout_offset > 0)
            text += ", views starting (out/dinp, inp, dout) " + std::to_string(out_offset) + ", " +
                    std::to_string(inp_offset) + ", " + std::to_string(dout_offset) +
                    " elements past a 16-byte boundary";
        if (in_place) text += ", in place (dinp is dout)";
        return text;
    }
};

// Lengths around the 16-byte width (4 floats, 8 bf16) and a warp, a prime, many blocks with a
// tail; then one pointer at a time off a 16-byte boundary (a kernel that checks only one of them
// makes a misaligned 16-byte access), all of them, and the tails of the GELU.
std::vector<Case> cases() {
    std::vector<Case> all;
    for (std::size_t n :
         {1, 3, 4, 5, 7, 8, 9, 31, 33, 1000, 1009, 4096, (1 << 18) + 8, (1 << 18) + 5})
        all.push_back({n});
    all.push_back({1000, -5.0f, 5.0f, 1, 0, 0});
    all.push_back({1000, -5.0f, 5.0f, 0, 1, 0});
    all.push_back({1000, -5.0f, 5.0f, 0, 0, 1});
    all.push_back({1003, -5.0f, 5.0f, 1, 1, 1});
    // Far in the tails: GELU(x) is x or 0 there, GELU'(x) is 1 or 0, and tanh is saturated.
    all.push_back({4096, 5.0f, 30.0f});
    all.push_back({4096, -30.0f, -5.0f});
    return all;
}

template <class Act>
void check_forward(const Case& c, course::Rng& rng) {
    SCOPED_TRACE("gelu_forward, " + c.describe(Activations<Act>::kName));
    const auto x = random_activations<Act>(c.n, c.lo, c.hi, rng);
    View<Act> inp("inp", x, c.inp_offset), out("out", c.n, c.out_offset);

    gelu_forward(out.data(), inp.data(), static_cast<long long>(c.n));

    std::vector<double> want(c.n);
    for (std::size_t i = 0; i < c.n; ++i) want[i] = gelu(x[i]);
    EXPECT_TRUE(out.front_untouched());
    EXPECT_TRUE(
        course::expect_close(out.values(), want, forward_tolerance<Act>(c.lo, c.hi), {"out"}));
}

// What a wrong dinp tells, before the numbers: the exact GELU's derivative in place of the tanh
// form's.
std::string backward_diagnosis(const std::vector<float>& got, const std::vector<float>& x,
                               const std::vector<float>& dout, const course::Tolerance& tol) {
    std::vector<double> erf_want(got.size());
    for (std::size_t i = 0; i < got.size(); ++i) erf_want[i] = dout[i] * erf_gelu_derivative(x[i]);
    if (!course::expect_close(got, erf_want, tol)) return "";
    return "dinp is dout times the derivative of the exact GELU, x * Phi(x) with erf, not of the "
           "tanh approximation that gelu.h defines and the forward computes: the gradient of "
           "another function (off by up to 8.7e-4 of dout near |x| = 2). Differentiate "
           "0.5 * x * (1 + tanh(u(x))) itself";
}

template <class Act>
void check_backward(const Case& c, course::Rng& rng) {
    SCOPED_TRACE("gelu_backward, " + c.describe(Activations<Act>::kName));
    const auto x = random_activations<Act>(c.n, c.lo, c.hi, rng);
    const auto g = random_activations<Act>(c.n, -1.0f, 1.0f, rng);
    View<Act> inp("inp", x, c.inp_offset), dout("dout", g, c.dout_offset);
    View<Act> separate("dinp", c.in_place ? 0 : c.n, c.out_offset);
    View<Act>& dinp = c.in_place ? dout : separate;

    gelu_backward(dinp.data(), inp.data(), dout.data(), static_cast<long long>(c.n));

    std::vector<double> want(c.n);
    for (std::size_t i = 0; i < c.n; ++i) want[i] = g[i] * gelu_derivative(x[i]);
    const auto got = dinp.values();
    const auto tol = backward_tolerance<Act>(c.lo, c.hi);
    course::CompareOptions options{"dinp"};
    options.diagnose = [&] { return backward_diagnosis(got, x, g, tol); };
    if (!c.in_place) EXPECT_TRUE(dinp.front_untouched());
    EXPECT_TRUE(course::expect_close(got, want, tol, options));
}

TEST_F(Gelu, ForwardFloat) {
    auto rng = test_rng();
    for (const Case& c : cases()) check_forward<float>(c, rng);
}

TEST_F(Gelu, BackwardFloat) {
    auto rng = test_rng();
    for (const Case& c : cases()) check_backward<float>(c, rng);
    // In place, as the trainer calls it: dinp overwrites dout.
    check_backward<float>({1000, -5.0f, 5.0f, 0, 0, 0, true}, rng);
    check_backward<float>({1003, -5.0f, 5.0f, 0, 0, 1, true}, rng);
}

TEST_F(Gelu, ForwardBf16) {
    COURSE_REQUIRE_BF16();
    auto rng = test_rng();
    for (const Case& c : cases()) check_forward<bf16>(c, rng);
}

TEST_F(Gelu, BackwardBf16) {
    COURSE_REQUIRE_BF16();
    auto rng = test_rng();
    for (const Case& c : cases()) check_backward<bf16>(c, rng);
    check_backward<bf16>({1000, -5.0f, 5.0f, 0, 0, 0, true}, rng);
    check_backward<bf16>({1003, -5.0f, 5.0f, 0, 0, 1, true}, rng);
}

// ---- Bandwidth: 256 MiB per array, far above any L2 ----

template <class Act>
void time_forward(const std::string& label) {
    using Bits = typename Activations<Act>::Bits;
    const std::size_t n = (std::size_t{256} << 20) / sizeof(Act);
    // inp, out, the copy's destination and the harness's two copies of out (one per input set),
    // plus the L2 flush buffer.
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(Act) + (256u << 20));
    auto rng = course::rng_for(label);
    const auto x = random_activations<Act>(n, -5.0f, 5.0f, rng);
    View<Act> inp("inp", x, 0), out("out", n, 0);
    course::DeviceBuffer<Bits> copy("copy", n);
    const auto tol = forward_tolerance<Act>(-5.0f, 5.0f);

    const auto timing = course::time_against(
        [&] { gelu_forward(out.data(), inp.data(), static_cast<long long>(n)); },
        [&] { course::baseline::device_copy(copy.data(), inp.buffer().data(), n * sizeof(Act)); },
        {course::TimedOutput(out.buffer(), tol)}, {course::sign_flipped(inp.buffer())});

    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = gelu(x[i]);
    {
        SCOPED_TRACE("the timed run, " + label);
        EXPECT_TRUE(course::expect_close(out.values(), want, tol, {"out"}));
    }
    // Read inp, write out: 2 * n * sizeof(Act) bytes, as the copy of inp.
    course::record_bandwidth(label, timing, 2.0 * n * sizeof(Act), "copy", 2.0 * n * sizeof(Act));
}

template <class Act>
void time_backward(const std::string& label) {
    using Bits = typename Activations<Act>::Bits;
    const std::size_t n = (std::size_t{256} << 20) / sizeof(Act);
    // inp, dout, dinp, the copy's destination and the harness's two copies of dinp, and the
    // flush.
    COURSE_REQUIRE_MEMORY(6 * n * sizeof(Act) + (256u << 20));
    auto rng = course::rng_for(label);
    const auto x = random_activations<Act>(n, -5.0f, 5.0f, rng);
    const auto g = random_activations<Act>(n, -1.0f, 1.0f, rng);
    View<Act> inp("inp", x, 0), dout("dout", g, 0), dinp("dinp", n, 0);
    course::DeviceBuffer<Bits> copy("copy", n);
    const auto tol = backward_tolerance<Act>(-5.0f, 5.0f);

    // Out of place, so that every timed call's dinp can be poisoned and checked (the trainer's
    // call in place moves the same bytes). dout's signs flipped negate dinp.
    const auto timing = course::time_against(
        [&] { gelu_backward(dinp.data(), inp.data(), dout.data(), static_cast<long long>(n)); },
        [&] { course::baseline::device_copy(copy.data(), inp.buffer().data(), n * sizeof(Act)); },
        {course::TimedOutput(dinp.buffer(), tol)}, {course::sign_flipped(dout.buffer())});

    std::vector<double> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = g[i] * gelu_derivative(x[i]);
    {
        SCOPED_TRACE("the timed run, " + label);
        EXPECT_TRUE(course::expect_close(dinp.values(), want, tol, {"dinp"}));
    }
    // Read inp and dout, write dinp: 3 * n * sizeof(Act) bytes. The copy moves 2 * n * sizeof.
    course::record_bandwidth(label, timing, 3.0 * n * sizeof(Act), "copy", 2.0 * n * sizeof(Act));
}

TEST_F(Gelu, BandwidthForwardFloat) { time_forward<float>("forward float n=2^26"); }
TEST_F(Gelu, BandwidthBackwardFloat) { time_backward<float>("backward float n=2^26"); }
TEST_F(Gelu, BandwidthForwardBf16) {
    COURSE_REQUIRE_BF16();
    time_forward<bf16>("forward bf16 n=2^27");
}
TEST_F(Gelu, BandwidthBackwardBf16) {
    COURSE_REQUIRE_BF16();
    time_backward<bf16>("backward bf16 n=2^27");
}

// ---- More than 2^31 elements: 64-bit indices (last, as every large case) ----

// 2^31 + 2^20 + 3 floats per array (8.6 GB each), not a multiple of 4: the one-value path runs
// past 2^31. x made on the device, compared in windows around 2^31 and 2^32 and at the ends.
constexpr std::size_t kLargeN = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 3;

TEST_F(Gelu, ForwardMoreThan2To31Elements) {
    COURSE_LARGE_CASE(2 * kLargeN * sizeof(float) + (64u << 20));
    SCOPED_TRACE("gelu_forward, float, n = 2^31 + 2^20 + 3, x made on the device");
    auto rng = test_rng();
    const std::uint64_t seed = rng.next_u64();
    course::DeviceBuffer<float> inp("inp", kLargeN), out("out", kLargeN);
    course::fill_uniform(inp.data(), kLargeN, seed, -5.0f, 5.0f);

    course::run_large_case(
        [&] { gelu_forward(out.data(), inp.data(), static_cast<long long>(kLargeN)); });

    const auto want = [&](const course::Window& w) {
        std::vector<double> y(w.count);
        for (std::size_t k = 0; k < w.count; ++k)
            y[k] = gelu(course::hashed::uniform(w.first + k, seed, -5.0f, 5.0f));
        return y;
    };
    EXPECT_TRUE(course::expect_windows_close(out, course::windows_past_int_range(kLargeN, rng),
                                             want, forward_tolerance<float>(-5.0f, 5.0f), {"out"}));
}

TEST_F(Gelu, BackwardMoreThan2To31Elements) {
    COURSE_LARGE_CASE(3 * kLargeN * sizeof(float) + (64u << 20));
    SCOPED_TRACE("gelu_backward, float, n = 2^31 + 2^20 + 3, x and dout made on the device");
    auto rng = test_rng();
    const std::uint64_t seed_x = rng.next_u64(), seed_dout = rng.next_u64();
    course::DeviceBuffer<float> inp("inp", kLargeN), dout("dout", kLargeN), dinp("dinp", kLargeN);
    course::fill_uniform(inp.data(), kLargeN, seed_x, -5.0f, 5.0f);
    course::fill_uniform(dout.data(), kLargeN, seed_dout, -1.0f, 1.0f);

    course::run_large_case([&] {
        gelu_backward(dinp.data(), inp.data(), dout.data(), static_cast<long long>(kLargeN));
    });

    const auto want = [&](const course::Window& w) {
        std::vector<double> d(w.count);
        for (std::size_t k = 0; k < w.count; ++k) {
            const std::size_t i = w.first + k;
            d[k] = course::hashed::uniform(i, seed_dout, -1.0f, 1.0f) *
                   gelu_derivative(course::hashed::uniform(i, seed_x, -5.0f, 5.0f));
        }
        return d;
    };
    EXPECT_TRUE(course::expect_windows_close(dinp, course::windows_past_int_range(kLargeN, rng),
                                             want, backward_tolerance<float>(-5.0f, 5.0f),
                                             {"dinp"}));
}

}  // namespace
