// Checker of 08_training/adamw: lengths around the 16-byte width, views that start off a 16-byte
// boundary (one pointer at a time), the working copy as bf16 (compute capability 8.0 and newer),
// as float and absent; early steps (where the bias correction matters most), weight decay on and
// off, a clipping factor; every result against a double reference whose tolerance is carried
// through the formulas, and, for a wrong result, which other optimizer it matches (no bias
// correction, L2 regularization, the clipping factor ignored, corrected moments stored). Then the
// bandwidth against a device copy (every timed step replayed on the host for a sample of the
// parameters), then more than 2^31 parameters.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "adamw.h"
#include "course/baselines.h"
#include "course/testing.h"
#include "training_checks.h"

namespace {

using training_checks::kUnitRoundoff;
using bf16 = __nv_bfloat16;

class AdamW : public course::GpuTest {};

constexpr double kU = kUnitRoundoff;

// ---- The step's scalars ----

struct Hyper {
    float lr = 1e-2f, beta1 = 0.9f, beta2 = 0.95f;  // the trainer's betas (train_gpt --help)
    float beta1_correction = 1.0f, beta2_correction = 1.0f, eps = 1e-8f;
    float weight_decay = 0.1f, grad_scale = 1.0f;
    int step = 1;

    // As the trainer computes them (gpt.cu): 1 - beta^step in float.
    static Hyper at_step(int step, float weight_decay, float grad_scale) {
        Hyper h;
        h.step = step;
        h.weight_decay = weight_decay;
        h.grad_scale = grad_scale;
        h.beta1_correction = 1.0f - static_cast<float>(std::pow(h.beta1, step));
        h.beta2_correction = 1.0f - static_cast<float>(std::pow(h.beta2, step));
        return h;
    }
    std::string describe() const {
        return "step " + std::to_string(step) + " (beta1_correction " +
               std::to_string(beta1_correction) + ", beta2_correction " +
               std::to_string(beta2_correction) + "), lr " + std::to_string(lr) +
               ", weight_decay " + std::to_string(weight_decay) + ", grad_scale " +
               std::to_string(grad_scale);
    }
};

// ---- The reference, in double, with a bound on a float evaluation's error ----

// AdamW, and the optimizers a wrong kernel computes instead (named by the diagnosis).
enum class Variant { kAdamW, kNoBiasCorrection, kL2, kNoGradScale, kCorrectedMomentsStored };

// One parameter: its values, and bounds on how far a float evaluation of the steps so far may be
// from them (0 before the first step).
struct Tracked {
    double p, m, v;
    double ep = 0, em = 0, ev = 0;
};

// One step of `variant` in double. The bounds, with u = 2^-24 (float32's unit roundoff), follow
// the float evaluation: g = grad * grad_scale (one rounding); m = beta1 m + (1 - beta1) g (about
// 4 roundings of its terms, and the old m's error shrunk by beta1); v the same with g * g (5);
// m_hat, v_hat one division each, the error of their input divided too; sqrt halves a relative
// error (|sqrt(a + e) - sqrt(a)| <= min(e / (2 sqrt(a)), sqrt(e))); + eps, the division r =
// m_hat / (sqrt(v_hat) + eps), and p (1 - lr wd) - lr r with 3 roundings of p's term and one of
// the result; the old p's error shrunk by (1 - lr wd). The checks allow 4 times the bound: room for
// fused multiply-adds and any order of evaluation.
void adamw_step(Tracked& x, float grad, const Hyper& h, Variant variant = Variant::kAdamW) {
    const double u = kU;
    const double b1 = h.beta1, b2 = h.beta2;
    const double scale = variant == Variant::kNoGradScale ? 1.0 : double(h.grad_scale);
    double g = double(grad) * scale;
    if (variant == Variant::kL2) g += double(h.weight_decay) * x.p;
    const double eg = u * std::fabs(g);
    x.m = b1 * x.m + (1 - b1) * g;
    x.em = b1 * x.em + (1 - b1) * eg + 4 * u * (b1 * std::fabs(x.m) + (1 - b1) * std::fabs(g));
    x.v = b2 * x.v + (1 - b2) * g * g;
    x.ev = b2 * x.ev + (1 - b2) * 2 * std::fabs(g) * eg + 5 * u * (b2 * x.v + (1 - b2) * g * g);
    const bool corrected = variant != Variant::kNoBiasCorrection;
    const double c1 = corrected ? h.beta1_correction : 1.0,
                 c2 = corrected ? h.beta2_correction : 1.0;
    const double m_hat = x.m / c1, v_hat = x.v / c2;
    const double e_mh = x.em / c1 + u * std::fabs(m_hat), e_vh = x.ev / c2 + u * v_hat;
    const double sq = std::sqrt(v_hat);
    const double e_sq = std::min(sq > 0 ? e_vh / (2 * sq) : e_vh, std::sqrt(e_vh)) + u * sq;
    const double d = sq + h.eps, e_d = e_sq + u * d;
    const double r = m_hat / d;
    const double e_r = e_mh / d + std::fabs(r) * e_d / d + u * std::fabs(r);
    const double decay = variant == Variant::kL2 ? 1.0 : 1.0 - double(h.lr) * h.weight_decay;
    const double p = x.p * decay - double(h.lr) * r;
    x.ep = x.ep * decay + 3 * u * std::fabs(x.p) + h.lr * e_r + u * h.lr * std::fabs(r) +
           u * std::fabs(p);
    x.p = p;
    if (variant == Variant::kCorrectedMomentsStored) x.m = m_hat, x.v = v_hat;
}

// The float state of n parameters, and the step's gradients.
struct Inputs {
    std::vector<float> master, grads, m, v;
};

Inputs make_inputs(std::size_t n, course::Rng& rng) {
    return {course::random_floats(n, -1.0f, 1.0f, rng), course::random_floats(n, -1.0f, 1.0f, rng),
            course::random_floats(n, -0.1f, 0.1f, rng), course::random_floats(n, 0.0f, 0.01f, rng)};
}

// What the state should be after one step, with its tolerances.
struct Expected {
    std::vector<double> master, m, v;
    course::Tolerance master_tol, m_tol, v_tol;
};

Expected expected(const Inputs& in, const Hyper& h, Variant variant = Variant::kAdamW) {
    Expected e;
    double ep = 0, em = 0, ev = 0;
    for (std::size_t i = 0; i < in.master.size(); ++i) {
        Tracked x{in.master[i], in.m[i], in.v[i]};
        adamw_step(x, in.grads[i], h, variant);
        e.master.push_back(x.p), e.m.push_back(x.m), e.v.push_back(x.v);
        ep = std::max(ep, x.ep), em = std::max(em, x.em), ev = std::max(ev, x.ev);
    }
    e.master_tol = {4 * ep, 0.0}, e.m_tol = {4 * em, 0.0}, e.v_tol = {4 * ev, 0.0};
    return e;
}

// The working copy's tolerance: the master's, and for bf16 its rounding.
template <class Act>
course::Tolerance working_tolerance(const course::Tolerance& master) {
    return {master.atol, training_checks::kIsBf16<Act> ? course::kBf16Roundoff : 0.0};
}

// ---- Running a case ----

// Where the working copy goes: bf16, float, or nowhere (null: the trainer's all-fp32 mode).
enum class Working { kBf16, kFloat, kNone };

std::string describe(Working w) {
    return w == Working::kBf16    ? "bf16 working copy"
           : w == Working::kFloat ? "float working copy"
                                  : "no working copy (null)";
}

struct Case {
    std::size_t n;
    Working working = Working::kBf16;
    Hyper hyper = Hyper::at_step(1, 0.1f, 0.5f);
    // Elements past a 16-byte boundary at which each view starts.
    std::size_t master_offset = 0, working_offset = 0, grads_offset = 0, m_offset = 0, v_offset = 0;

    std::string describe() const {
        std::string text =
            "n = " + std::to_string(n) + ", " + ::describe(working) + ", " + hyper.describe();
        if (master_offset + working_offset + grads_offset + m_offset + v_offset > 0)
            text += ", views starting (master, working, grads, m, v) " +
                    std::to_string(master_offset) + ", " + std::to_string(working_offset) + ", " +
                    std::to_string(grads_offset) + ", " + std::to_string(m_offset) + ", " +
                    std::to_string(v_offset) + " elements past a 16-byte boundary";
        return text;
    }
};

// A view of float state `offset` floats into its buffer (see training_checks::View).
using FloatView = training_checks::View<float>;

// Which optimizer a wrong result matches, if any: named before the numbers.
std::string variant_diagnosis(const std::vector<float>& master, const std::vector<float>& m,
                              const std::vector<float>& v, const Inputs& in, const Hyper& h) {
    struct Named {
        Variant variant;
        const char* what;
    };
    const Named variants[] = {
        {Variant::kNoBiasCorrection,
         "master matches a step without bias correction: divide m and v by beta1_correction and "
         "beta2_correction (1 - beta^step, passed in) before using them"},
        {Variant::kL2,
         "m, v and master match Adam with L2 regularization, weight_decay * master added to the "
         "gradient: AdamW decays the weight itself, master * (1 - lr * weight_decay), and leaves "
         "the gradient, and so m and v, alone"},
        {Variant::kNoGradScale,
         "m, v and master match a step that ignores grad_scale: multiply the gradient by it (the "
         "clipping factor) before it enters m and v"},
        {Variant::kCorrectedMomentsStored,
         "the stored m and v are the bias-corrected ones: store the moments as they are, divide "
         "only the copies the step uses"},
    };
    for (const Named& named : variants) {
        const Expected other = expected(in, h, named.variant);
        // Tolerances from the correct step's bounds, with room for the other's magnitudes.
        const Expected right = expected(in, h);
        const auto loose = [](course::Tolerance t) { return course::Tolerance{4 * t.atol, 1e-5}; };
        if (course::expect_close(m, other.m, loose(right.m_tol)) &&
            course::expect_close(v, other.v, loose(right.v_tol)) &&
            course::expect_close(master, other.master, loose(right.master_tol)))
            return named.what;
    }
    return "";
}

template <class Act>
testing::AssertionResult run_case(const Case& c, course::Rng& rng) {
    const auto in = make_inputs(c.n, rng);
    FloatView master("master", in.master, c.master_offset),
        grads("grads", in.grads, c.grads_offset), m("m", in.m, c.m_offset),
        v("v", in.v, c.v_offset);
    training_checks::View<Act> working("working", c.working == Working::kNone ? 0 : c.n,
                                       c.working_offset);
    Act* working_data = c.working == Working::kNone ? nullptr : working.data();
    const Hyper& h = c.hyper;

    adamw(master.data(), working_data, grads.data(), m.data(), v.data(),
          static_cast<long long>(c.n), h.lr, h.beta1, h.beta2, h.beta1_correction,
          h.beta2_correction, h.eps, h.weight_decay, h.grad_scale);

    const Expected want = expected(in, h);
    const auto got_master = master.values(), got_m = m.values(), got_v = v.values();
    course::CompareOptions options;
    options.diagnose = [&] { return variant_diagnosis(got_master, got_m, got_v, in, h); };
    options.name = "m";
    auto result = course::expect_close(got_m, want.m, want.m_tol, options);
    if (!result) return result;
    options.name = "v";
    result = course::expect_close(got_v, want.v, want.v_tol, options);
    if (!result) return result;
    options.name = "master";
    result = course::expect_close(got_master, want.master, want.master_tol, options);
    if (!result) return result;
    if (c.working == Working::kNone) return testing::AssertionSuccess();
    result = working.front_untouched();
    if (!result) return result;
    return course::expect_close(working.values(), want.master,
                                working_tolerance<Act>(want.master_tol),
                                {"working (the copy of the new master weights)"});
}

void check_case(const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    if (c.working == Working::kBf16)
        EXPECT_TRUE(run_case<bf16>(c, rng));
    else
        EXPECT_TRUE(run_case<float>(c, rng));
}

// Lengths around the 16-byte width (4 floats) and a warp, a prime, many blocks with a tail.
const std::size_t kSizes[] = {1, 3, 4, 5, 7, 31, 33, 1000, 1009, (1 << 18) + 4, (1 << 18) + 3};

TEST_F(AdamW, SizesFloat) {
    auto rng = test_rng();
    for (Working w : {Working::kNone, Working::kFloat})
        for (std::size_t n : kSizes) check_case({n, w}, rng);
}

TEST_F(AdamW, SizesBf16) {
    COURSE_REQUIRE_BF16();
    auto rng = test_rng();
    for (std::size_t n : kSizes) check_case({n, Working::kBf16}, rng);
}

// One view at a time off a 16-byte boundary: a kernel that checks the alignment of only some of
// its pointers makes a misaligned 16-byte access with the others.
TEST_F(AdamW, ViewsOffBoundaries) {
    auto rng = test_rng();
    const Hyper h = Hyper::at_step(1, 0.1f, 0.5f);
    std::vector<Working> workings{Working::kFloat};
    if (!course::bf16_skip_reason()) workings.push_back(Working::kBf16);
    for (Working working : workings) {
        check_case({1000, working, h, 1, 0, 0, 0, 0}, rng);
        check_case({1000, working, h, 0, 1, 0, 0, 0}, rng);
        check_case({1000, working, h, 0, 0, 1, 0, 0}, rng);
        check_case({1000, working, h, 0, 0, 0, 1, 0}, rng);
        check_case({1000, working, h, 0, 0, 0, 0, 1}, rng);
        check_case({1003, working, h, 1, 1, 1, 1, 1}, rng);
    }
}

// The first steps, where the bias corrections are far from 1 (0.1 and 0.05 at step 1), a late
// one where they are close to 1; weight decay on and off; no clipping and a clipping factor.
TEST_F(AdamW, StepsDecayAndClipping) {
    auto rng = test_rng();
    const Working working = course::bf16_skip_reason() ? Working::kFloat : Working::kBf16;
    for (int step : {1, 2, 10, 1000})
        for (float weight_decay : {0.0f, 0.1f})
            for (float grad_scale : {1.0f, 0.37f})
                check_case({4099, working, Hyper::at_step(step, weight_decay, grad_scale)}, rng);
}

// ---- Bandwidth ----

// The state is updated in place, so the harness cannot poison it between the timed calls, and
// every call starts from the state the one before it left (a result kept from an earlier call is
// wrong without a second input set). The calls are counted instead, and the state after all of
// them is compared with as many steps replayed on the host, for a sample of the parameters (the
// tolerance carried through every step: adamw_step). One skipped call leaves the master weights a
// whole step (lr * |m_hat / sqrt(v_hat)|, about 1e-3 here) away, far outside it.
template <class Act>
void time_step(Working w, const std::string& label) {
    const std::size_t n = std::size_t{1} << 26;  // 256 MiB per float array
    // master, grads, m, v, the working copy and the copy's destination, and the flush buffer.
    COURSE_REQUIRE_MEMORY(5 * n * sizeof(float) + (w == Working::kNone ? 0 : n * sizeof(Act)) +
                          (256u << 20));
    auto rng = course::rng_for(label);
    const auto in = make_inputs(n, rng);
    FloatView master("master", in.master, 0), grads("grads", in.grads, 0), m("m", in.m, 0),
        v("v", in.v, 0);
    training_checks::View<Act> working("working", w == Working::kNone ? 0 : n, 0);
    Act* working_data = w == Working::kNone ? nullptr : working.data();
    course::DeviceBuffer<float> copy("copy", n);
    const Hyper h = Hyper::at_step(10, 0.1f, 0.8f);

    int calls = 0;
    const auto timing = course::time_against(
        [&] {
            ++calls;
            adamw(master.data(), working_data, grads.data(), m.data(), v.data(),
                  static_cast<long long>(n), h.lr, h.beta1, h.beta2, h.beta1_correction,
                  h.beta2_correction, h.eps, h.weight_decay, h.grad_scale);
        },
        [&] { course::baseline::device_copy(copy.data(), grads.data(), n * sizeof(float)); });

    SCOPED_TRACE("the state after the " + std::to_string(calls) + " timed and warm-up steps of " +
                 label);
    auto sample_rng = course::rng_for(label + " sample");
    std::vector<std::size_t> sample{0, n - 1};
    for (int k = 0; k < 4096; ++k)
        sample.push_back(static_cast<std::size_t>(sample_rng.uniform_int(0, std::int64_t(n) - 1)));
    const auto got_master = master.values(), got_m = m.values(), got_v = v.values();
    const auto got_working = w == Working::kNone ? std::vector<float>{} : working.values();
    std::vector<float> pick_master, pick_m, pick_v, pick_working;
    std::vector<double> want_master, want_m, want_v;
    double ep = 0, em = 0, ev = 0;
    for (std::size_t i : sample) {
        Tracked x{in.master[i], in.m[i], in.v[i]};
        for (int step = 0; step < calls; ++step) adamw_step(x, in.grads[i], h);
        want_master.push_back(x.p), want_m.push_back(x.m), want_v.push_back(x.v);
        ep = std::max(ep, x.ep), em = std::max(em, x.em), ev = std::max(ev, x.ev);
        pick_master.push_back(got_master[i]), pick_m.push_back(got_m[i]);
        pick_v.push_back(got_v[i]);
        if (w != Working::kNone) pick_working.push_back(got_working[i]);
    }
    course::CompareOptions options;
    options.indices = sample;
    options.name = "m";
    EXPECT_TRUE(course::expect_close(pick_m, want_m, {4 * em, 0.0}, options));
    options.name = "v";
    EXPECT_TRUE(course::expect_close(pick_v, want_v, {4 * ev, 0.0}, options));
    options.name = "master";
    EXPECT_TRUE(course::expect_close(pick_master, want_master, {4 * ep, 0.0}, options));
    if (w != Working::kNone) {
        options.name = "working";
        EXPECT_TRUE(course::expect_close(pick_working, want_master,
                                         working_tolerance<Act>({4 * ep, 0.0}), options));
    }
    // Read master, grads, m, v (16 bytes per parameter); write master, m, v (12) and the working
    // copy. The copy reads and writes 4 bytes per element.
    const double bytes = (28.0 + (w == Working::kNone ? 0 : sizeof(Act))) * n;
    course::record_bandwidth(label, timing, bytes, "copy", 2.0 * sizeof(float) * n);
}

TEST_F(AdamW, BandwidthBf16Working) {
    COURSE_REQUIRE_BF16();
    time_step<bf16>(Working::kBf16, "bf16 working n=2^26");
}
TEST_F(AdamW, BandwidthNoWorking) { time_step<float>(Working::kNone, "no working n=2^26"); }

// ---- More than 2^31 parameters: 64-bit indices (last, as every large case) ----

TEST_F(AdamW, MoreThan2To31Parameters) {
    // 2^31 + 2^20 + 3 parameters (8.6 GB per float array, 4.3 GB of bf16): an index held in an
    // int overflows at 2^31. The state is made on the device, compared in windows around 2^31
    // and 2^32 and at the ends.
    COURSE_REQUIRE_BF16();
    const std::size_t n = (std::size_t{1} << 31) + (std::size_t{1} << 20) + 3;
    COURSE_LARGE_CASE(4 * n * sizeof(float) + n * sizeof(bf16) + (64u << 20));
    SCOPED_TRACE("n = 2^31 + 2^20 + 3, bf16 working copy, state made on the device");
    auto rng = test_rng();
    const std::uint64_t seeds[4] = {rng.next_u64(), rng.next_u64(), rng.next_u64(), rng.next_u64()};
    course::DeviceBuffer<float> master("master", n), grads("grads", n), m("m", n), v("v", n);
    course::DeviceBuffer<std::uint16_t> working("working", n);
    course::fill_uniform(master.data(), n, seeds[0], -1.0f, 1.0f);
    course::fill_uniform(grads.data(), n, seeds[1], -1.0f, 1.0f);
    course::fill_uniform(m.data(), n, seeds[2], -0.1f, 0.1f);
    course::fill_uniform(v.data(), n, seeds[3], 0.0f, 0.01f);
    const Hyper h = Hyper::at_step(1, 0.1f, 0.5f);

    course::run_large_case([&] {
        adamw(master.data(), course::as_bf16(working), grads.data(), m.data(), v.data(),
              static_cast<long long>(n), h.lr, h.beta1, h.beta2, h.beta1_correction,
              h.beta2_correction, h.eps, h.weight_decay, h.grad_scale);
    });

    const auto windows = course::windows_past_int_range(n, rng);
    const auto state = [&](const course::Window& w) {
        Expected e;
        for (std::size_t k = 0; k < w.count; ++k) {
            const std::size_t i = w.first + k;
            Tracked x{course::hashed::uniform(i, seeds[0], -1.0f, 1.0f),
                      course::hashed::uniform(i, seeds[2], -0.1f, 0.1f),
                      course::hashed::uniform(i, seeds[3], 0.0f, 0.01f)};
            adamw_step(x, course::hashed::uniform(i, seeds[1], -1.0f, 1.0f), h);
            e.master.push_back(x.p), e.m.push_back(x.m), e.v.push_back(x.v);
        }
        return e;
    };
    // The bounds of one step over these ranges, from a sample of them (the same ranges as the
    // small cases' inputs).
    auto bound_rng = course::rng_for("adamw bounds");
    const Expected bounds = expected(make_inputs(1 << 16, bound_rng), h);
    EXPECT_TRUE(course::expect_windows_close(
        m, windows, [&](const course::Window& w) { return state(w).m; }, bounds.m_tol, {"m"}));
    EXPECT_TRUE(course::expect_windows_close(
        v, windows, [&](const course::Window& w) { return state(w).v; }, bounds.v_tol, {"v"}));
    EXPECT_TRUE(course::expect_windows_close(
        master, windows, [&](const course::Window& w) { return state(w).master; },
        bounds.master_tol, {"master"}));
    // The bf16 copy, window by window as expect_windows_close does for floats.
    std::vector<float> got;
    std::vector<double> want;
    course::CompareOptions options{"working"};
    for (const course::Window& w : windows) {
        const auto values = course::bf16_values(working.download(w.first, w.count));
        const auto expected_master = state(w).master;
        got.insert(got.end(), values.begin(), values.end());
        want.insert(want.end(), expected_master.begin(), expected_master.end());
        for (std::size_t k = 0; k < w.count; ++k) options.indices.push_back(w.first + k);
    }
    EXPECT_TRUE(
        course::expect_close(got, want, working_tolerance<bf16>(bounds.master_tol), options));
}

}  // namespace
