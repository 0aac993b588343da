// cuDNN's fused attention (common/baselines/cudnn_attention.cu), the baseline of module 07's
// tensor-core exercises, against the float32 GPU reference (course/reference/attention_gpu.h):
// O and L, then dQ, dK and dV, causal and not, D 64 at a T that is not a multiple of the engines'
// tiles and D 128 at the timed T = 4096. The backward runs twice: cuDNN sums dQ in a float32
// buffer of ours, which each call must start from zero. Then the token-major layout the trainer
// calls it with (q, k, v packed per token, read and written in place). Skips without a GPU of
// compute capability 8.0 or newer, or without cuDNN (label harness; CI has no GPU).
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

// Token-major storage of [B][H][T][D] tensors (the trainer's): each token's row is `row` values
// long and holds head h's D values at column offset + h * D.
struct TokenMajor {
    int B, H, T, D, row, offset;
    std::size_t at(int b, int h, int t) const {
        return (static_cast<std::size_t>(b) * T + t) * row + offset +
               static_cast<std::size_t>(h) * D;
    }
    // Copies heads-major values into `packed` (of B * T * row values) where this layout puts them.
    template <typename V>
    void pack(const std::vector<V>& heads, std::vector<V>& packed) const {
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < H; ++h)
                for (int t = 0; t < T; ++t)
                    std::copy_n(&heads[((static_cast<std::size_t>(b) * H + h) * T + t) * D], D,
                                &packed[at(b, h, t)]);
    }
    template <typename V>
    std::vector<V> unpack(const std::vector<V>& packed) const {
        std::vector<V> heads(static_cast<std::size_t>(B) * H * T * D);
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < H; ++h)
                for (int t = 0; t < T; ++t)
                    std::copy_n(&packed[at(b, h, t)], D,
                                &heads[((static_cast<std::size_t>(b) * H + h) * T + t) * D]);
        return heads;
    }
};

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

void check(const AttentionShape& shape, bool causal, bool token_major, course::Rng& rng) {
    SCOPED_TRACE("B = " + std::to_string(shape.batch) + ", H = " + std::to_string(shape.heads) +
                 ", T = " + std::to_string(shape.T) + ", D = " + std::to_string(shape.D) +
                 (causal ? ", causal" : "") + (token_major ? ", token-major" : ""));
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

    const course::Matrix matrix{rows, shape.D};
    const auto check_outputs = [&](const std::vector<float>& got_O,
                                   const std::vector<float>& got_L) {
        // O: P rounded to bf16 before P V, O rounded to bf16 (2^-9 each), with a margin.
        EXPECT_TRUE(course::expect_close(got_O, want_O, {0x1.0p-7, 0x1.0p-7}, {"O", matrix}));
        // L: float32 sums of T exponentials, in another order than the reference's.
        EXPECT_TRUE(course::expect_close(got_L, want_L, {5e-4, 1e-4}, {"L"}));
    };
    const auto check_gradients = [&](const std::vector<float>& got_dQ,
                                     const std::vector<float>& got_dK,
                                     const std::vector<float>& got_dV) {
        EXPECT_TRUE(
            course::expect_close(got_dQ, want_dQ, gradient_tolerance(want_dQ), {"dQ", matrix}));
        EXPECT_TRUE(
            course::expect_close(got_dK, want_dK, gradient_tolerance(want_dK), {"dK", matrix}));
        EXPECT_TRUE(
            course::expect_close(got_dV, want_dV, gradient_tolerance(want_dV), {"dV", matrix}));
    };

    if (!token_major) {
        course::DeviceBuffer<std::uint16_t> d_Q("Q", bits_of(Q)), d_K("K", bits_of(K)),
            d_V("V", bits_of(V)), d_dO("dO", bits_of(dO)), d_O_in("O", O_bits), O("cuDNN O", n),
            dQ("cuDNN dQ", n), dK("cuDNN dK", n), dV("cuDNN dV", n);
        course::DeviceBuffer<float> L("cuDNN L", rows);
        course::baseline::cudnn_attention_bf16(d_Q.data(), d_K.data(), d_V.data(), O.data(),
                                               L.data(), B, H, T, D, scale, causal);
        check_outputs(values_of(O.download()), L.download());
        for (int call = 1; call <= 2; ++call) {
            SCOPED_TRACE("backward call " + std::to_string(call));
            dQ.poison();
            dK.poison();
            dV.poison();
            course::baseline::cudnn_attention_backward_bf16(
                d_Q.data(), d_K.data(), d_V.data(), d_O_in.data(), d_dO.data(), ref_L.data(),
                dQ.data(), dK.data(), dV.data(), B, H, T, D, scale, causal);
            check_gradients(values_of(dQ.download()), values_of(dK.download()),
                            values_of(dV.download()));
        }
        return;
    }
    // Token-major, as the trainer holds them: q, k, v side by side in one row of 3 H D per token,
    // O and dO in rows of H D; the gradients written into a packed dqkv the same way.
    const int qkv_row = 3 * H * D, o_row = H * D;
    const TokenMajor q_at{B, H, T, D, qkv_row, 0}, k_at{B, H, T, D, qkv_row, H * D},
        v_at{B, H, T, D, qkv_row, 2 * H * D}, o_at{B, H, T, D, o_row, 0};
    std::vector<std::uint16_t> qkv(static_cast<std::size_t>(B) * T * qkv_row),
        dO_packed(static_cast<std::size_t>(B) * T * o_row), O_packed(dO_packed.size());
    q_at.pack(bits_of(Q), qkv);
    k_at.pack(bits_of(K), qkv);
    v_at.pack(bits_of(V), qkv);
    o_at.pack(bits_of(dO), dO_packed);
    o_at.pack(O_bits, O_packed);
    course::DeviceBuffer<std::uint16_t> d_qkv("packed qkv", qkv), d_dO("packed dO", dO_packed),
        d_O_in("packed O", O_packed), O("cuDNN O, packed", dO_packed.size()),
        dqkv("cuDNN dqkv, packed", qkv.size());
    course::DeviceBuffer<float> L("cuDNN L", rows);
    const std::uint16_t* q = d_qkv.data();
    course::baseline::cudnn_attention_token_major_bf16(
        q, q + H * D, q + 2 * H * D, O.data(), L.data(), B, H, T, D, scale, causal, qkv_row, o_row);
    check_outputs(values_of(o_at.unpack(O.download())), L.download());
    dqkv.poison();
    std::uint16_t* dq = dqkv.data();
    course::baseline::cudnn_attention_backward_token_major_bf16(
        q, q + H * D, q + 2 * H * D, d_O_in.data(), d_dO.data(), ref_L.data(), dq, dq + H * D,
        dq + 2 * H * D, B, H, T, D, scale, causal, qkv_row, o_row);
    const auto got = dqkv.download();
    check_gradients(values_of(q_at.unpack(got)), values_of(k_at.unpack(got)),
                    values_of(v_at.unpack(got)));
}

TEST_F(CudnnAttention, MatchesTheGpuReference) {
    auto rng = test_rng();
    // Each shape and mask is a plan of its own for cuDNN to build: two shapes cover both D.
    for (const AttentionShape& shape :
         {AttentionShape{2, 3, 1000, 64}, AttentionShape{1, 2, 4096, 128}})
        for (bool causal : {false, true}) check(shape, causal, false, rng);
}

// The trainer's layout (cudnn_attention_token_major_bf16): the same references, read back from
// packed rows; causal, as the trainer calls it.
TEST_F(CudnnAttention, TokenMajorMatchesTheGpuReference) {
    auto rng = test_rng();
    check(AttentionShape{2, 3, 1000, 64}, true, true, rng);
}

}  // namespace
