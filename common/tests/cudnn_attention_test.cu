// cuDNN's fused attention (common/baselines/cudnn_attention.cu), the baseline of module 07's
// tensor-core exercises, against the float32 GPU reference (course/reference/attention_gpu.h):
// O and L, then dQ, dK and dV, causal and not, D 64 at a T that is not a multiple of the engines'
// tiles and D 128 at the timed T = 4096. The backward runs twice: cuDNN sums dQ in a float32
// buffer of ours, which each call must start from zero. Skips without a GPU of compute capability
// 8.0 or newer, or without cuDNN (label harness; CI has no GPU).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/reference/attention_gpu.h"
#include "course/testing.h"

namespace {

using course::reference::AttentionShape;

// Random values in [-magnitude, magnitude], rounded to bf16 (what cuDNN and the reference see).
std::vector<float> bf16_values(std::size_t n, float magnitude, course::Rng& rng) {
    auto values = course::random_floats(n, -magnitude, magnitude, rng);
    for (float& v : values) v = __bfloat162float(__float2bfloat16(v));
    return values;
}

std::vector<std::uint16_t> bits_of(const std::vector<float>& values) {
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) {
        const __nv_bfloat16 rounded = __float2bfloat16(values[i]);
        std::memcpy(&bits[i], &rounded, 2);
    }
    return bits;
}

std::vector<float> values_of(const std::vector<std::uint16_t>& bits) {
    std::vector<float> values(bits.size());
    for (std::size_t i = 0; i < bits.size(); ++i) {
        __nv_bfloat16 half;
        std::memcpy(&half, &bits[i], 2);
        values[i] = __bfloat162float(half);
    }
    return values;
}

// bf16 gradients from sums of T products with bf16-rounded P and dS: a few 2^-9 of the largest
// gradient. A wrong transpose, scale or mask is off by the gradient's own size.
course::Tolerance gradient_tolerance(const std::vector<float>& reference) {
    float largest = 0.0f;
    for (float g : reference) largest = std::max(largest, std::fabs(g));
    return {0x1.0p-6 * largest, 0x1.0p-6};
}

class CudnnAttention : public course::GpuTest {
  protected:
    void SetUp() override {
        course::GpuTest::SetUp();
        if (IsSkipped()) return;
        if (!course::baseline::cudnn_available()) {
            const std::string reason =
                "cuDNN is not available (built without it, or no cuDNN handle on this machine)";
            RecordProperty("skip_reason", reason);
            GTEST_SKIP() << reason;
        }
    }
};

void check(const AttentionShape& shape, bool causal, course::Rng& rng) {
    SCOPED_TRACE("B = " + std::to_string(shape.batch) + ", H = " + std::to_string(shape.heads) +
                 ", T = " + std::to_string(shape.T) + ", D = " + std::to_string(shape.D) +
                 (causal ? ", causal" : ""));
    const float scale = 1.0f / std::sqrt(static_cast<float>(shape.D));
    const int B = static_cast<int>(shape.batch), H = static_cast<int>(shape.heads),
              T = static_cast<int>(shape.T), D = static_cast<int>(shape.D);
    const std::size_t n = shape.elements(), rows = shape.rows();
    const auto Q = bf16_values(n, 2.0f, rng), K = bf16_values(n, 2.0f, rng),
               V = bf16_values(n, 1.0f, rng), dO = bf16_values(n, 1.0f, rng);

    // The references: the forward, then the backward from O rounded to bf16 (cuDNN's input).
    course::DeviceBuffer<float> ref_Q("reference Q", Q), ref_K("reference K", K),
        ref_V("reference V", V), ref_dO("reference dO", dO), ref_O("reference O", n),
        ref_L("reference L", rows), ref_dQ("reference dQ", n), ref_dK("reference dK", n),
        ref_dV("reference dV", n);
    course::reference::gpu::attention_forward(ref_Q.data(), ref_K.data(), ref_V.data(),
                                              ref_O.data(), ref_L.data(), shape, scale, causal);
    const auto want_O = ref_O.download(), want_L = ref_L.download();
    const auto O_bits = bits_of(want_O);
    course::DeviceBuffer<float> ref_O_bf16("reference O in bf16", values_of(O_bits));
    course::reference::gpu::attention_backward(
        ref_Q.data(), ref_K.data(), ref_V.data(), ref_O_bf16.data(), ref_L.data(), ref_dO.data(),
        ref_dQ.data(), ref_dK.data(), ref_dV.data(), shape, scale, causal);
    const auto want_dQ = ref_dQ.download(), want_dK = ref_dK.download(),
               want_dV = ref_dV.download();

    course::DeviceBuffer<std::uint16_t> d_Q("Q", bits_of(Q)), d_K("K", bits_of(K)),
        d_V("V", bits_of(V)), d_dO("dO", bits_of(dO)), d_O_in("O", O_bits), O("cuDNN O", n),
        dQ("cuDNN dQ", n), dK("cuDNN dK", n), dV("cuDNN dV", n);
    course::DeviceBuffer<float> L("cuDNN L", rows);
    course::baseline::cudnn_attention_bf16(d_Q.data(), d_K.data(), d_V.data(), O.data(), L.data(),
                                           B, H, T, D, scale, causal);
    // O: P rounded to bf16 before P V, O rounded to bf16 (2^-9 each), with a margin.
    EXPECT_TRUE(course::expect_close(values_of(O.download()), want_O, {0x1.0p-7, 0x1.0p-7},
                                     {"O", course::Matrix{rows, shape.D}}));
    // L: float32 sums of T exponentials, in another order than the reference's.
    EXPECT_TRUE(course::expect_close(L.download(), want_L, {5e-4, 1e-4}, {"L"}));

    for (int call = 1; call <= 2; ++call) {
        SCOPED_TRACE("backward call " + std::to_string(call));
        dQ.poison();
        dK.poison();
        dV.poison();
        course::baseline::cudnn_attention_backward_bf16(
            d_Q.data(), d_K.data(), d_V.data(), d_O_in.data(), d_dO.data(), ref_L.data(), dQ.data(),
            dK.data(), dV.data(), B, H, T, D, scale, causal);
        const course::Matrix matrix{rows, shape.D};
        EXPECT_TRUE(course::expect_close(values_of(dQ.download()), want_dQ,
                                         gradient_tolerance(want_dQ), {"dQ", matrix}));
        EXPECT_TRUE(course::expect_close(values_of(dK.download()), want_dK,
                                         gradient_tolerance(want_dK), {"dK", matrix}));
        EXPECT_TRUE(course::expect_close(values_of(dV.download()), want_dV,
                                         gradient_tolerance(want_dV), {"dV", matrix}));
    }
}

TEST_F(CudnnAttention, MatchesTheGpuReference) {
    auto rng = test_rng();
    // Each shape and mask is a plan of its own for cuDNN to build: two shapes cover both D.
    for (const AttentionShape& shape :
         {AttentionShape{2, 3, 1000, 64}, AttentionShape{1, 2, 4096, 128}})
        for (bool causal : {false, true}) check(shape, causal, rng);
}

}  // namespace
