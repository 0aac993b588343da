// Checker of 08_training/linear_backward: shapes whose rows, C and OC are multiples of 32 and
// shapes with tails (the reduction lengths of the two products are OC and rows: a GEMM that
// assumes whole k-steps is wrong only on the second kind, and the diagnosis says so), with and
// without GELU' and the bias; dweight and dbias accumulating into values they hold already, dinp
// written over NaN; the same bits on a second call. Then the trainer's two MLP shapes, timed
// against cuBLAS SGEMM doing the same two products (every timed call checked).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/testing.h"
#include "gelu.h"
#include "linear_backward.h"
#include "training_checks.h"

namespace {

using training_checks::kUnitRoundoff;

class LinearBackward : public course::GpuTest {};

struct Shape {
    int rows, C, OC;
    bool gelu, bias;
    std::string describe() const {
        return "rows = " + std::to_string(rows) + ", C = " + std::to_string(C) +
               ", OC = " + std::to_string(OC) + (gelu ? ", with gelu_input" : ", no gelu_input") +
               (bias ? ", with dbias" : ", dbias null");
    }
    // Whether both products' reduction lengths (OC for dinp, rows for dweight) are multiples of
    // a k-step of 32.
    bool whole_k_steps() const { return rows % 32 == 0 && OC % 32 == 0; }
};

// GELU'(x), the tanh form, in double (gelu.h's constants).
double gelu_derivative(double x) {
    const double s = kGeluScale, c = kGeluCubic;
    const double t = std::tanh(s * (x + c * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * s * (1 + 3 * c * x * x);
}

// The inputs, drawn from [-1, 1] (gelu_input from [-5, 5]), and the gradients before the call.
struct Inputs {
    std::vector<float> dout, inp, weight, gelu_input, dweight0, dbias0;
};

Inputs make_inputs(const Shape& s, course::Rng& rng) {
    const std::size_t rows = s.rows, C = s.C, OC = s.OC;
    Inputs in;
    in.dout = course::random_floats(rows * OC, -1.0f, 1.0f, rng);
    in.inp = course::random_floats(rows * C, -1.0f, 1.0f, rng);
    in.weight = course::random_floats(OC * C, -1.0f, 1.0f, rng);
    if (s.gelu) in.gelu_input = course::random_floats(rows * C, -5.0f, 5.0f, rng);
    in.dweight0 = course::random_floats(OC * C, -1.0f, 1.0f, rng);
    if (s.bias) in.dbias0 = course::random_floats(OC, -1.0f, 1.0f, rng);
    return in;
}

// The reference in double for the rows of dinp and of dweight listed (all of them, or a sample of
// the large shapes), and all of dbias.
struct Expected {
    std::vector<double> dinp, dweight, dbias;  // the listed rows, one after the other
    std::vector<double> dweight_products;      // the same rows of dout^T @ inp alone
};

Expected expected(const Shape& s, const Inputs& in, const std::vector<int>& dinp_rows,
                  const std::vector<int>& dweight_rows, int calls = 1) {
    const std::size_t C = s.C, OC = s.OC;
    Expected e;
    for (int r : dinp_rows)
        for (std::size_t c = 0; c < C; ++c) {
            double sum = 0;
            for (std::size_t o = 0; o < OC; ++o)
                sum += double(in.dout[r * OC + o]) * in.weight[o * C + c];
            if (s.gelu) sum *= gelu_derivative(in.gelu_input[r * C + c]);
            e.dinp.push_back(sum);
        }
    for (int o : dweight_rows)
        for (std::size_t c = 0; c < C; ++c) {
            double sum = 0;
            for (std::size_t r = 0; r < std::size_t(s.rows); ++r)
                sum += double(in.dout[r * OC + o]) * in.inp[r * C + c];
            e.dweight_products.push_back(sum);
            e.dweight.push_back(in.dweight0[o * C + c] + calls * sum);
        }
    if (s.bias)
        for (std::size_t o = 0; o < OC; ++o) {
            double sum = 0;
            for (std::size_t r = 0; r < std::size_t(s.rows); ++r) sum += in.dout[r * OC + o];
            e.dbias.push_back(in.dbias0[o] + calls * sum);
        }
    return e;
}

std::vector<int> all_rows(int count) {
    std::vector<int> rows(count);
    for (int i = 0; i < count; ++i) rows[i] = i;
    return rows;
}

// Tolerances from the reduction lengths (course::Tolerance::float32: terms of magnitude up to 1),
// `calls` calls accumulated. dinp with GELU' carries the product's error times |GELU'| <= 1.13,
// plus GELU' evaluated in float times the product (1.5e-5 of it over [-5, 5]: the derivation is in
// the gelu checker).
struct Tolerances {
    course::Tolerance dinp, dweight, dbias;
};

Tolerances tolerances(const Shape& s, const Expected& e, int calls = 1) {
    Tolerances t;
    t.dinp = course::Tolerance::float32(s.OC, 1.0);
    if (s.gelu) {
        double largest = 0;
        for (double v : e.dinp) largest = std::max(largest, std::fabs(v));
        // |product| <= |dinp| / min |GELU'| is unbounded where GELU' ~ 0: bound it by the
        // product's own size instead, sqrt(OC) typical terms of 1/3 at 6 standard deviations.
        const double product = 6.0 * std::sqrt(double(s.OC)) / 3.0;
        t.dinp = {1.13 * t.dinp.atol + 1.5e-5 * std::max(largest, product),
                  t.dinp.rtol + 4 * kUnitRoundoff};
    }
    t.dweight = course::Tolerance::float32(std::size_t(calls) * s.rows + 1, 1.0);
    t.dbias = course::Tolerance::float32(std::size_t(calls) * s.rows + 1, 1.0);
    return t;
}

// The outputs, in device buffers: dinp poisoned (written), dweight and dbias holding dweight0 and
// dbias0 (accumulated into).
struct Outputs {
    course::DeviceBuffer<float> dinp, dweight, dbias;
    Outputs(const Shape& s, const Inputs& in)
        : dinp("dinp", std::size_t(s.rows) * s.C),
          dweight("dweight", in.dweight0),
          dbias("dbias", s.bias ? in.dbias0 : std::vector<float>{}) {}
};

struct DeviceInputs {
    course::DeviceBuffer<float> dout, inp, weight, gelu_input;
    explicit DeviceInputs(const Inputs& in)
        : dout("dout", in.dout),
          inp("inp", in.inp),
          weight("weight", in.weight),
          gelu_input("gelu_input", in.gelu_input) {}
};

void run(const Shape& s, DeviceInputs& d, Outputs& out) {
    linear_backward(out.dinp.data(), out.dweight.data(), s.bias ? out.dbias.data() : nullptr,
                    d.dout.data(), d.inp.data(), s.gelu ? d.gelu_input.data() : nullptr,
                    d.weight.data(), s.rows, s.C, s.OC);
}

// Whether got matches the values accumulated into minus what they held before: overwritten.
bool overwritten(const std::vector<float>& got, const std::vector<double>& want,
                 const std::vector<float>& before, const course::Tolerance& tol) {
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!tol.accepts(got[i], want[i] - before[i])) return false;
    return true;
}

// dinp, dweight and dbias of a whole (small) shape against the reference, as one verdict.
testing::AssertionResult matches_reference(const Shape& s, const Inputs& in, Outputs& out) {
    const Expected want = expected(s, in, all_rows(s.rows), all_rows(s.OC));
    const Tolerances tol = tolerances(s, want);
    const std::size_t rows = s.rows, C = s.C, OC = s.OC;
    const auto dinp = out.dinp.download();
    course::CompareOptions dinp_options{"dinp", course::Matrix{rows, C}};
    dinp_options.diagnose = [&] {
        const bool all_nan =
            std::all_of(dinp.begin(), dinp.end(), [](float v) { return std::isnan(v); });
        return all_nan ? "every element of dinp is NaN, with finite inputs: never written, or "
                         "added into (+=) instead of written? Its old contents are NaN here (the "
                         "contract: dinp is written)"
                       : "";
    };
    auto result = course::expect_close(dinp, want.dinp, tol.dinp, dinp_options);
    if (!result) return result;
    const auto dweight = out.dweight.download();
    course::CompareOptions options{"dweight", course::Matrix{OC, C}};
    options.diagnose = [&] {
        return overwritten(dweight, want.dweight, in.dweight0, tol.dweight)
                   ? "dweight holds dout^T @ inp alone: it was overwritten, not added into (the "
                     "contract: +=, the trainer adds micro-batches up)"
                   : "";
    };
    result = course::expect_close(dweight, want.dweight, tol.dweight, options);
    if (!result || !s.bias) return result;
    const auto dbias = out.dbias.download();
    options = {"dbias"};
    options.diagnose = [&] {
        return overwritten(dbias, want.dbias, in.dbias0, tol.dbias)
                   ? "dbias holds the column sums alone: it was overwritten, not added into"
                   : "";
    };
    return course::expect_close(dbias, want.dbias, tol.dbias, options);
}

testing::AssertionResult case_result(const Shape& s, course::Rng& rng) {
    const Inputs in = make_inputs(s, rng);
    DeviceInputs d(in);
    Outputs out(s, in);
    run(s, d, out);
    return matches_reference(s, in, out);
}

std::string listed(const std::vector<Shape>& shapes) {
    std::string text;
    for (const Shape& s : shapes)
        text += (text.empty() ? "" : "; ") + std::to_string(s.rows) + " x " + std::to_string(s.C) +
                " x " + std::to_string(s.OC);
    return text;
}

// When the shapes with whole k-steps pass and some of the others fail: what a GEMM that loads
// full 32-wide k-tiles without a guard does.
std::string shapes_diagnosis(const std::vector<Shape>& wrong, const std::vector<Shape>& right) {
    const bool only_tails =
        std::all_of(wrong.begin(), wrong.end(),
                    [](const Shape& s) { return !s.whole_k_steps(); }) &&
        std::any_of(right.begin(), right.end(), [](const Shape& s) { return s.whole_k_steps(); });
    if (!only_tails) return "";
    return "only shapes whose reduction lengths are not multiples of 32 are wrong (" +
           listed(wrong) +
           "; rows x C x OC): OC for dinp, rows for dweight. Does the GEMM load whole 32-wide "
           "k-tiles? The last one is partial: load 0 past K (the trainer's shapes are multiples "
           "of 32, a learner's kernel must not rely on it)";
}

// Whole k-steps and tails in every dimension; each shape once with GELU' and the bias, once
// without (alternating which). A GEMM that reads a whole k-tile past K reads up to 31 rows past
// the end of an operand: on a GPU the load faults (the inputs end where unmapped memory begins)
// and the harness names the operand. Where the inputs end in redzones instead (the CPU emulator,
// a GPU without virtual memory management), the tails are kept where the read stays inside the
// 64 KiB redzone (31 rows of at most 528 floats), whose NaN then shows in the output and
// shapes_diagnosis names the k-tiles; GPT-2's 768 columns come with whole k-steps.
const Shape kShapes[] = {
    {1, 1, 1, true, true},       {7, 5, 3, false, true},      {64, 64, 64, true, false},
    {33, 37, 31, true, true},    {96, 160, 128, false, true}, {100, 65, 129, false, false},
    {130, 200, 96, true, true},  {257, 33, 300, false, true}, {128, 768, 96, true, true},
    {96, 768, 768, false, true},
};

TEST_F(LinearBackward, Shapes) {
    auto rng = test_rng();
    std::vector<Shape> wrong, right;
    std::string first_failure;
    for (Shape s : kShapes)
        for (bool swap : {false, true}) {
            if (swap) s.gelu = !s.gelu, s.bias = !s.bias;
            const auto result = case_result(s, rng);
            (result ? right : wrong).push_back(s);
            if (!result && first_failure.empty())
                first_failure = "the first wrong case, " + s.describe() + ": " + result.message();
        }
    if (wrong.empty()) return;
    const std::string diagnosis = shapes_diagnosis(wrong, right);
    ADD_FAILURE() << (diagnosis.empty() ? "" : diagnosis + "\n") << first_failure;
}

TEST_F(LinearBackward, SameBitsEveryCall) {
    SCOPED_TRACE(
        "a second call on the same inputs must return the same bits: are sums added in an order "
        "that changes between runs (atomicAdd)?");
    auto rng = test_rng();
    const Shape s{1000, 96, 130, true, true};
    const Inputs in = make_inputs(s, rng);
    DeviceInputs d(in);
    Outputs first(s, in), second(s, in);
    run(s, d, first);
    run(s, d, second);
    EXPECT_TRUE(course::expect_equal(second.dinp.download(), first.dinp.download(), {"dinp"}));
    EXPECT_TRUE(
        course::expect_equal(second.dweight.download(), first.dweight.download(), {"dweight"}));
    EXPECT_TRUE(course::expect_equal(second.dbias.download(), first.dbias.download(), {"dbias"}));
}

// ---- The trainer's shapes, against cuBLAS ----

// The MLP of GPT-2 124M at B x T = 8192 tokens: its first layer (C = 768 in, OC = 3072 out) and
// its second (3072 in, 768 out, after the GELU: gelu_input is the first layer's output).
// cuBLAS's side: dinp = dout @ weight as one SGEMM, dweight' = dout^T @ inp as another (dout^T
// stored transposed beforehand: the baseline takes row-major operands), 2 rows C OC FLOPs each,
// without the column sums (a read of dout, under 2% of the time) or GELU'.
void time_shape(const Shape& s, const std::string& label) {
    const std::size_t rows = s.rows, C = s.C, OC = s.OC;
    // Inputs (dout and its transpose, inp, gelu_input, weight), the learner's outputs, cuBLAS's,
    // the harness's two copies of dinp (one per input set), and the L2 flush buffer.
    COURSE_REQUIRE_MEMORY((2 * rows * OC + 2 * rows * C + OC * C + 4 * rows * C + 2 * OC * C + OC) *
                              sizeof(float) +
                          (256u << 20));
    auto rng = course::rng_for(label);
    const Inputs in = make_inputs(s, rng);
    DeviceInputs d(in);
    Outputs out(s, in);
    std::vector<float> dout_t(OC * rows);
    for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t o = 0; o < OC; ++o) dout_t[o * rows + r] = in.dout[r * OC + o];
    course::DeviceBuffer<float> d_dout_t("dout^T", dout_t), cublas_dinp("cuBLAS dinp", rows * C),
        cublas_dweight("cuBLAS dweight", OC * C);
    // A sample of rows of dinp and dweight for the CPU reference (the whole of it is 2 x 19
    // GFLOP): the first, the last, and random ones.
    std::vector<int> dinp_rows{0, s.rows - 1}, dweight_rows{0, s.OC - 1};
    for (int k = 0; k < 14; ++k) {
        dinp_rows.push_back(static_cast<int>(rng.uniform_int(0, s.rows - 1)));
        dweight_rows.push_back(static_cast<int>(rng.uniform_int(0, s.OC - 1)));
    }
    // dinp is written by every call: the harness poisons and checks it each time, against the
    // warm-up's of the same input set (the tolerance of the sampled rows is far wider than
    // needed: the kernel is deterministic). The second input set is weight with every sign
    // flipped, which negates dinp and leaves dweight and dbias alone: they accumulate, and are
    // checked after all calls against the calls' count times the product.
    const Expected one = expected(s, in, dinp_rows, {});
    int calls = 0;
    const auto timing = course::time_against(
        [&] {
            ++calls;
            run(s, d, out);
        },
        [&] {
            course::baseline::cublas_sgemm(s.rows, s.C, s.OC, d.dout.data(), d.weight.data(),
                                           cublas_dinp.data());
            course::baseline::cublas_sgemm(s.OC, s.C, s.rows, d_dout_t.data(), d.inp.data(),
                                           cublas_dweight.data());
        },
        {course::TimedOutput(out.dinp, tolerances(s, one).dinp)}, {course::TimedInput(d.weight)});

    SCOPED_TRACE("the state after the " + std::to_string(calls) + " calls of " + label);
    const Expected want = expected(s, in, dinp_rows, dweight_rows, calls);
    const Tolerances tol = tolerances(s, want, calls);
    const auto dinp = out.dinp.download(), dweight = out.dweight.download();
    std::vector<float> got_dinp, got_dweight;
    course::CompareOptions dinp_options{"dinp (sampled rows)"},
        dweight_options{"dweight (sampled rows)"};
    for (int r : dinp_rows)
        for (std::size_t c = 0; c < C; ++c) {
            got_dinp.push_back(dinp[r * C + c]);
            dinp_options.indices.push_back(r * C + c);
        }
    for (int o : dweight_rows)
        for (std::size_t c = 0; c < C; ++c) {
            got_dweight.push_back(dweight[o * C + c]);
            dweight_options.indices.push_back(o * C + c);
        }
    EXPECT_TRUE(course::expect_close(got_dinp, want.dinp, tol.dinp, dinp_options));
    EXPECT_TRUE(course::expect_close(got_dweight, want.dweight, tol.dweight, dweight_options));
    EXPECT_TRUE(course::expect_close(out.dbias.download(), want.dbias, tol.dbias, {"dbias"}));
    // Two products of 2 rows C OC FLOPs each, on both sides.
    const double flops = 4.0 * rows * C * OC;
    course::record_flops(label, timing, flops, "cublas_sgemm", flops);
}

TEST_F(LinearBackward, TFlopsMlpUp) {
    time_shape({8192, 768, 3072, false, true}, "8192x768x3072 (MLP up)");
}
TEST_F(LinearBackward, TFlopsMlpDown) {
    time_shape({8192, 3072, 768, true, true}, "8192x3072x768 with GELU' (MLP down)");
}

}  // namespace
