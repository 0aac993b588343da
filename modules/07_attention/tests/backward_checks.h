// What the checkers of module 07's backward exercises share (flash_backward, flash_wgmma_backward):
// a problem (16-bit Q, K, V, dO, and O and L from the reference forward), its cases (T around the
// tile sizes, D 64 and 128, causal and not, B and H not 1, the most heads, large scores, one head
// whose T x T scores would not fit in memory), the gradients against the double CPU reference
// (the float32 GPU reference of common/ at T = 4096), the diagnoses that name the planted bugs,
// and the timed case next to cuDNN's fused backward (else cuBLAS's materialized one).
#pragma once

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "attention_checks.h"

namespace attention_checks {

using U16 = course::DeviceBuffer<std::uint16_t>;
using F32 = course::DeviceBuffer<float>;

// One backward problem: the inputs, the forward's O and L (from the reference), and their 16-bit
// device copies, which the exercise receives.
struct BackwardProblem {
    Case c;
    Inputs in;
    std::vector<float> O, L;  // the forward's, O rounded to 16 bits as the exercise receives it
    U16 dQ_in, dK_in, dV_in, d_O, d_dO;
    F32 d_L;

    BackwardProblem(const Case& cc, course::Rng& rng)
        : c(cc),
          in(make_inputs(cc, true, rng)),
          O(),
          L(),
          dQ_in("Q", tensor_bits(in.Q)),
          dK_in("K", tensor_bits(in.K)),
          dV_in("V", tensor_bits(in.V)),
          d_O("O", forward_O()),
          d_dO("dO", tensor_bits(in.dO)),
          d_L("L", L) {}

    // Fills O and L from the reference forward; returns O's 16-bit bits.
    std::vector<std::uint16_t> forward_O() {
        const Forward f = reference_forward(in, c);
        for (double o : f.O)
            O.push_back(from_tensor_element(to_tensor_element(static_cast<float>(o))));
        for (double l : f.L) L.push_back(static_cast<float>(l));
        return tensor_bits(O);
    }
};

// Runs an exercise's backward on a problem's buffers into dQ, dK, dV.
using BackwardRun = std::function<void(const BackwardProblem& p, F32& dQ, F32& dK, F32& dV)>;

// Whether `got`, times `factor`, is `ref` within `tol`.
inline bool all_ok(const std::vector<float>& got, const std::vector<double>& ref,
                   const course::Tolerance& tol, double factor = 1.0) {
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!tol.accepts(factor * got[i], ref[i])) return false;
    return true;
}

// What wrong gradients say about the kernel.
inline std::string backward_diagnosis(const BackwardProblem& p, const Gradients& want,
                                      const std::vector<float>& got_q,
                                      const std::vector<float>& got_k, bool dQ_ok, bool dK_ok,
                                      bool dV_ok, const std::string& race) {
    if (!race.empty()) return race;
    if (!dQ_ok && dK_ok && dV_ok)
        return "dQ is wrong while dK and dV are right: dQ_i sums dS_ij k_j over every key tile, "
               "and the blocks that own those tiles add to the same dQ rows at the same time: "
               "accumulate with atomicAdd (into a dQ zeroed first), not a plain +=; and over the "
               "keys j < T only: a tile that runs past T holds other rows there (the next head's, "
               "where a TMA box runs on), whose dS must be 0; and where one warpgroup's dQ "
               "product reads another's dS tile, only after a barrier of both orders its stores";
    if (!dV_ok)
        return "dV is wrong: dV_j = sum_i P_ij dO_i with P_ij = exp(scale q_i . k_j - L_i) "
               "recomputed from the saved L; check P (the mask, L) and the query tiles visited";
    // dV right: P is right, and what is wrong comes after it.
    const double scale = p.c.scale();
    const auto tq = gradient_tolerance(want.dQ), tk = gradient_tolerance(want.dK);
    for (const auto& [name, got, ref, tol, ok] : {std::tuple{"dK", &got_k, &want.dK, tk, dK_ok},
                                                  std::tuple{"dQ", &got_q, &want.dQ, tq, dQ_ok}})
        if (!ok && all_ok(*got, *ref, tol, scale))
            return std::string(name) +
                   " is the right one divided by scale: dQ_i = scale * "
                   "sum_j dS_ij k_j and dK_j = scale * sum_i dS_ij q_i, the scale of the scores "
                   "s = scale q . k applied to both";
    // D_i = dO_i . O_i left out: the reference with O = 0 has D_i = 0.
    const Gradients without_D =
        reference_backward(p.in, std::vector<float>(p.O.size(), 0.0f), p.L, p.c);
    if (all_ok(got_q, without_D.dQ, tq) && all_ok(got_k, without_D.dK, tk))
        return "dQ and dK are what dS = P dP gives: dS_ij = P_ij (dP_ij - D_i) needs D_i = "
               "rowsum(dO_i * O_i) = dO_i . O_i (so that each row of dS sums to 0)";
    if (!dK_ok && dQ_ok)
        return "dK is wrong while dQ and dV are right: dK_j = scale * sum_i dS_ij q_i over every "
               "query tile that sees key j (dS^T times Q)";
    return "";
}

inline void check_gradients(const BackwardProblem& p, const F32& dQ, const F32& dK, const F32& dV,
                            const std::string& race, const std::string& what) {
    const Gradients want = reference_backward(p.in, p.O, p.L, p.c);
    const auto got_q = dQ.download(), got_k = dK.download(), got_v = dV.download();
    const auto tq = gradient_tolerance(want.dQ), tk = gradient_tolerance(want.dK),
               tv = gradient_tolerance(want.dV);
    const bool q_ok = all_ok(got_q, want.dQ, tq), k_ok = all_ok(got_k, want.dK, tk),
               v_ok = all_ok(got_v, want.dV, tv);
    const std::string diagnosis =
        q_ok && k_ok && v_ok ? ""
                             : backward_diagnosis(p, want, got_q, got_k, q_ok, k_ok, v_ok, race);
    const course::Matrix shape{p.c.shape.rows(), p.c.shape.D};
    for (const auto& [name, got, ref, tol] :
         {std::tuple{"dQ", &got_q, &want.dQ, tq}, std::tuple{"dK", &got_k, &want.dK, tk},
          std::tuple{"dV", &got_v, &want.dV, tv}}) {
        course::CompareOptions options{std::string(name) + what, shape};
        options.diagnose = [&] { return diagnosis; };
        EXPECT_TRUE(course::expect_close(*got, *ref, tol, options)) << replay_note();
    }
}

// Runs a case twice: the gradients against the reference, and dK and dV the same bits both times.
inline void check_backward(const BackwardRun& run, const Case& c, course::Rng& rng) {
    SCOPED_TRACE(c.describe());
    const BackwardProblem p(c, rng);
    const std::size_t n = c.shape.elements();
    F32 dQ("dQ", n), dK("dK", n), dV("dV", n);
    run(p, dQ, dK, dV);
    const auto k1 = dK.download(), v1 = dV.download();
    dQ.poison();
    dK.poison();
    dV.poison();
    run(p, dQ, dK, dV);
    const std::string race =
        race_diagnosis(differing(k1, dK.download()) + differing(v1, dV.download()), "dK and dV");
    check_gradients(p, dQ, dK, dV, race, "");
    EXPECT_TRUE(race.empty()) << race;
}

// The cases in order, up to the first that fails: its diagnosis names the mistake, and each
// further one would recompute gradients in double on the CPU to repeat it (a wrong kernel's
// checker ran past its time limit so).
inline void check_backward_cases(const BackwardRun& run, const std::vector<Case>& cases,
                                 course::Rng& rng) {
    for (const Case& c : cases) {
        check_backward(run, c, rng);
        if (::testing::Test::HasFailure()) return;
    }
}

// The forward's grid (kEdgeLengths: a single key, partial tiles, up to 1000), D 64 and 128,
// causal and not, B and H not 1; against the double CPU reference.
inline void backward_edge_shapes(const BackwardRun& run, course::Rng& rng) {
    std::vector<Case> cases;
    for (std::size_t D : {64, 128})
        for (std::size_t T : kEdgeLengths)
            for (bool causal : {false, true}) cases.push_back(Case{{2, 2, T, D}, causal});
    check_backward_cases(run, cases, rng);
}

// The long sequence, against the float32 GPU reference.
inline void backward_long_sequence(const BackwardRun& run, course::Rng& rng) {
    COURSE_SKIP_ON_EMULATOR("T = 4096");
    std::vector<Case> cases;
    for (std::size_t D : {64, 128})
        for (bool causal : {false, true}) cases.push_back(Case{{2, 2, kLongLength, D}, causal});
    check_backward_cases(run, cases, rng);
}

// The contract's most heads, 5 x 13107 = 65535 (a grid of one block row per head along y just
// fits), each short: T = 3.
inline void backward_most_heads(const BackwardRun& run, course::Rng& rng) {
    COURSE_SKIP_ON_EMULATOR("65535 heads");
    check_backward_cases(run, {Case{{5, 13107, 3, 64}, false}, Case{{5, 13107, 3, 64}, true}}, rng);
}

// Scores of tens: P nearly one-hot in some rows.
inline void backward_large_scores(const BackwardRun& run, course::Rng& rng) {
    check_backward_cases(
        run, {Case{{2, 3, 130, 64}, false, 30.0f}, Case{{2, 3, 130, 64}, true, 30.0f}}, rng);
}

// The gradients of sampled rows of one head, in double from what the kernel is given (16-bit
// values, O rounded likewise, L): dQ of query rows, dK and dV of key rows with those indices, each
// row a sum over T keys or queries (a full reference would be T^2 D; these are T D each).
inline Gradients sampled_gradients(const BackwardProblem& p, const std::vector<std::size_t>& rows) {
    const std::size_t T = p.c.shape.T, D = p.c.shape.D;
    const double scale = p.c.scale();
    const auto dot = [D](const std::vector<float>& a, std::size_t i, const std::vector<float>& b,
                         std::size_t j) {
        double sum = 0.0;
        for (std::size_t d = 0; d < D; ++d) sum += static_cast<double>(a[i * D + d]) * b[j * D + d];
        return sum;
    };
    std::vector<double> Di(T);  // D_i = dO_i . O_i
    for (std::size_t i = 0; i < T; ++i) Di[i] = dot(p.in.dO, i, p.O, i);
    const auto P = [&](std::size_t i, std::size_t j) {
        return std::exp(scale * dot(p.in.Q, i, p.in.K, j) - p.L[i]);
    };
    Gradients g;
    for (std::size_t r : rows) {
        std::vector<double> dq(D, 0.0), dk(D, 0.0), dv(D, 0.0);
        for (std::size_t j = 0; j < (p.c.causal ? r + 1 : T); ++j) {  // the keys r sees
            const double ds = P(r, j) * (dot(p.in.dO, r, p.in.V, j) - Di[r]);
            for (std::size_t d = 0; d < D; ++d) dq[d] += scale * ds * p.in.K[j * D + d];
        }
        for (std::size_t i = p.c.causal ? r : 0; i < T; ++i) {  // the queries that see key r
            const double pij = P(i, r), ds = pij * (dot(p.in.dO, i, p.in.V, r) - Di[i]);
            for (std::size_t d = 0; d < D; ++d) {
                dk[d] += scale * ds * p.in.Q[i * D + d];
                dv[d] += pij * p.in.dO[i * D + d];
            }
        }
        g.dQ.insert(g.dQ.end(), dq.begin(), dq.end());
        g.dK.insert(g.dK.end(), dk.begin(), dk.end());
        g.dV.insert(g.dV.end(), dv.begin(), dv.end());
    }
    return g;
}

// One head whose T x T scores would not fit in this GPU's memory even in 16 bits (T about 200000
// on an 80 GB GPU): a kernel that keeps P or dS in a scratch buffer cannot allocate it. Causal,
// for half the work; sampled rows of dQ, dK and dV against the reference.
inline void backward_no_scores_buffer(const BackwardRun& run, course::Rng& rng) {
    COURSE_SKIP_ON_EMULATOR("one head whose T x T scores would not fit in memory");
    const Case c = no_scores_case(true, true);
    SCOPED_TRACE(no_scores_note(c, true));
    const BackwardProblem p(c, rng);
    const std::size_t n = c.shape.elements(), D = c.shape.D;
    F32 dQ("dQ", n), dK("dK", n), dV("dV", n);
    course::with_note_on_cuda_error(no_scores_note(c, true), [&] { run(p, dQ, dK, dV); });
    const auto rows = sampled_rows(c.shape.T, rng);
    const Gradients want = sampled_gradients(p, rows);
    for (const auto& [name, got, ref] :
         {std::tuple{"dQ", dQ.download(), &want.dQ}, std::tuple{"dK", dK.download(), &want.dK},
          std::tuple{"dV", dV.download(), &want.dV}}) {
        std::vector<float> sampled;
        for (std::size_t r : rows)
            sampled.insert(sampled.end(), got.begin() + r * D, got.begin() + (r + 1) * D);
        course::CompareOptions options{std::string(name) + " (sampled rows)"};
        for (std::size_t r : rows)
            for (std::size_t d = 0; d < D; ++d) options.indices.push_back(r * D + d);
        EXPECT_TRUE(course::expect_close(sampled, *ref, gradient_tolerance(*ref), options));
    }
}

// The FLOP rate of case c (timed_case's, or another shape shown beside them) next to cuDNN's
// fused backward (else cuBLAS's materialized one). FlashAttention's count: the backward is 2.5
// times the forward's 4 B H T^2 D (five products of T x T x D where the forward has two), halved
// when causal.
inline void rate_backward(const BackwardRun& run, const Case& c, course::Rng& rng) {
    // cuBLAS's scores (float32) and two 16-bit T x T buffers; the problem's buffers, three
    // gradients, the baseline's three and the harness's two copies of each, cuDNN's 16-bit
    // gradients, and the GPU reference's float copies.
    COURSE_REQUIRE_MEMORY(2 * scores_bytes(c) + 26 * c.shape.elements() * sizeof(float) +
                          (512u << 20));
    SCOPED_TRACE(c.describe());
    BackwardProblem p(c, rng);
    const std::size_t n = c.shape.elements();
    F32 dQ("dQ", n), dK("dK", n), dV("dV", n), bQ("baseline dQ", n), bK("baseline dK", n),
        bV("baseline dV", n);
    U16 cQ("cuDNN dQ", n), cK("cuDNN dK", n), cV("cuDNN dV", n);  // cuDNN's are 16-bit
    run(p, dQ, dK, dV);  // the tolerances of the timed outputs come from a first result
    const Gradients want = reference_backward(p.in, p.O, p.L, c);
    const int B = static_cast<int>(c.shape.batch), H = static_cast<int>(c.shape.heads),
              T = static_cast<int>(c.shape.T), d = static_cast<int>(c.shape.D);
    // The libraries in the exercise's element type: bf16, or fp16 in a build for sm_75 (the
    // cases then go under the fp16 names: shown, not judged, the targets being bf16 figures).
    const std::string element = course::kTensorElementName;
    const auto cudnn = course::kFp16TensorCores ? course::baseline::cudnn_attention_backward_fp16
                                                : course::baseline::cudnn_attention_backward_bf16;
    const auto cublas = course::kFp16TensorCores ? course::baseline::cublas_attention_backward_fp16
                                                 : course::baseline::cublas_attention_backward_bf16;
    const std::vector<BaselineCall> baselines{
        {"cudnn_attention_backward_" + element,
         [&] {
             cudnn(p.dQ_in.data(), p.dK_in.data(), p.dV_in.data(), p.d_O.data(), p.d_dO.data(),
                   p.d_L.data(), cQ.data(), cK.data(), cV.data(), B, H, T, d, c.scale(), c.causal);
         }},
        {"cublas_attention_backward_" + element, [&] {
             cublas(p.dQ_in.data(), p.dK_in.data(), p.dV_in.data(), p.d_O.data(), p.d_dO.data(),
                    p.d_L.data(), bQ.data(), bK.data(), bV.data(), B, H, T, d, c.scale(), c.causal);
         }}};
    const BaselineCall& baseline = first_that_runs(baselines);
    const auto timing =
        course::time_against([&] { run(p, dQ, dK, dV); }, baseline.run,
                             {course::TimedOutput(dQ, gradient_tolerance(want.dQ)),
                              course::TimedOutput(dK, gradient_tolerance(want.dK)),
                              course::TimedOutput(dV, gradient_tolerance(want.dV))},
                             {sign_flipped(p.d_dO)});  // dO negated: every gradient negates
    check_gradients(p, dQ, dK, dV, "", " (timed)");
    const double flops = 2.5 * forward_flops(c);
    course::record_flops(perf_label(c), timing, flops, baseline.name, flops,
                         course::kTensorFlopUnits);
}

}  // namespace attention_checks
