// The float32 GPU reference of attention (course/reference/attention_gpu.h) against the double
// CPU reference, forward and backward, causal and not, on shapes with one key, a few keys, and
// more keys than a warp has lanes. Skips without a GPU (label harness; CI has none).
#include <cmath>
#include <vector>

#include "course/reference/attention.h"
#include "course/reference/attention_gpu.h"
#include "course/testing.h"

namespace {

using course::reference::AttentionShape;

class AttentionGpuReference : public course::GpuTest {};

TEST_F(AttentionGpuReference, MatchesTheCpuReference) {
    auto rng = test_rng();
    for (std::size_t D : {64, 128}) {
        for (std::size_t T : {1, 17, 65, 200}) {
            for (bool causal : {false, true}) {
                const AttentionShape shape{2, 3, T, D};
                SCOPED_TRACE("T = " + std::to_string(T) + ", D = " + std::to_string(D) +
                             (causal ? ", causal" : ""));
                const float scale = 1.0f / std::sqrt(static_cast<float>(D));
                const std::size_t n = shape.elements();
                const auto Q = course::random_floats(n, -2.0f, 2.0f, rng),
                           K = course::random_floats(n, -2.0f, 2.0f, rng),
                           V = course::random_floats(n, -1.0f, 1.0f, rng),
                           dO = course::random_floats(n, -1.0f, 1.0f, rng);
                const auto want =
                    course::reference::attention_forward(Q, K, V, shape, scale, causal);
                const auto grads =
                    course::reference::attention_backward(Q, K, V, dO, shape, scale, causal);
                course::DeviceBuffer<float> dQ_in("Q", Q), dK_in("K", K), dV_in("V", V),
                    d_dO("dO", dO), O("O", n), L("L", shape.rows()), dQ("dQ", n), dK("dK", n),
                    dV("dV", n);
                course::reference::gpu::attention_forward(dQ_in.data(), dK_in.data(), dV_in.data(),
                                                          O.data(), L.data(), shape, scale, causal);
                course::reference::gpu::attention_backward(
                    dQ_in.data(), dK_in.data(), dV_in.data(), O.data(), L.data(), d_dO.data(),
                    dQ.data(), dK.data(), dV.data(), shape, scale, causal);
                // float32 sums of at most 200 terms of magnitude <= ~10: about 1e-5 at most.
                const course::Tolerance tol{5e-5, 5e-5};
                EXPECT_TRUE(course::expect_close(O.download(), want.O, tol, {"O"}));
                EXPECT_TRUE(course::expect_close(L.download(), want.L, tol, {"L"}));
                EXPECT_TRUE(course::expect_close(dQ.download(), grads.dQ, tol, {"dQ"}));
                EXPECT_TRUE(course::expect_close(dK.download(), grads.dK, tol, {"dK"}));
                EXPECT_TRUE(course::expect_close(dV.download(), grads.dV, tol, {"dV"}));
            }
        }
    }
}

}  // namespace
