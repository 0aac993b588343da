// Checker of 05_gemm_advanced/sgemm_warptile: module 04's SGEMM checker, whole (the rung implements
// module 04's contract and is graded exactly like that ladder's rungs: the same shapes, messages,
// 4096^3 case against cuBLAS SGEMM and sweep), plus the autotuner, a case that `grader run` leaves
// out (DISABLED_): every configuration the exercise lists, checked on a shape with partial tiles
// and timed at 4096^3 against cuBLAS, then the fastest. README.md says how to run it.
#include <cstdio>
#include <string>

#include "../../04_sgemm/tests/sgemm_test.cu"
#include "sgemm_warptile.h"

namespace {

TEST_F(Sgemm, DISABLED_Autotune) {
    auto rng = test_rng();
    // Correctness first: partial tiles along M, N and K for every tile size listed.
    const Shape shape{300, 260, 200};
    const Problem p = make_problem(shape, rng);
    const auto want = combine(p.product, p.C, kAlpha, kBeta);
    course::DeviceBuffer<float> d_A("A", p.A), d_B("B", p.B), d_C("C", count(shape.M, shape.N));
    // Then the rate, at the size the target is judged on.
    const int n = 4096;
    const std::size_t elements = count(n, n);
    // A, B, C, cuBLAS's C and the harness's two copies of C, plus the timer's L2 flush buffer.
    COURSE_REQUIRE_MEMORY(6 * elements * sizeof(float) + (256u << 20));
    course::DeviceBuffer<float> d_A_big("A", course::random_floats(elements, -1.0f, 1.0f, rng)),
        d_B_big("B", course::random_floats(elements, -1.0f, 1.0f, rng)), d_C_big("C", elements),
        d_C_cublas("cuBLAS's C", elements);

    int fastest = -1;
    double fastest_tflop_s = 0.0;
    for (int config = 0; config < sgemm_config_count(); ++config) {
        const std::string name = sgemm_config_name(config);
        d_C.upload(p.C);
        sgemm_with_config(config, shape.M, shape.N, shape.K, kAlpha, d_A.data(), d_B.data(), kBeta,
                          d_C.data());
        const auto result = verdict(d_C.download(), want, shape, "");
        if (!result) {
            ADD_FAILURE() << "configuration " << config << " (" << name << ") is wrong on "
                          << describe(shape) << ":\n"
                          << result.message();
            continue;
        }
        const auto timing = course::time_against(
            [&] {
                sgemm_with_config(config, n, n, n, 1.0f, d_A_big.data(), d_B_big.data(), 0.0f,
                                  d_C_big.data());
            },
            [&] {
                course::baseline::cublas_sgemm(n, n, n, d_A_big.data(), d_B_big.data(),
                                               d_C_cublas.data());
            },
            {course::TimedOutput(d_C_big, tolerance(n))}, {course::TimedInput(d_A_big)});
        const double tflop_s = course::tflop_per_s(2.0 * n * n * n, timing.learner.median_ms);
        const double cublas_tflop_s =
            course::tflop_per_s(2.0 * n * n * n, timing.baseline.median_ms);
        std::printf("[autotune] %d  %-28s %6.1f TFLOP/s  %5.1f%% of cuBLAS SGEMM\n", config,
                    name.c_str(), tflop_s, 100.0 * tflop_s / cublas_tflop_s);
        if (tflop_s > fastest_tflop_s) fastest = config, fastest_tflop_s = tflop_s;
    }
    ASSERT_GE(fastest, 0) << "no configuration computed the right product";
    std::printf("[autotune] fastest here: %d (%s); sgemm() runs it when kChosen = %d\n", fastest,
                sgemm_config_name(fastest), fastest);
}

}  // namespace
