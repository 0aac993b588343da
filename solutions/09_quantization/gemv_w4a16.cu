// 09_quantization/gemv_w4a16: y = W x at decode time, INT4 weights in pack_int4's format (a scale
// per group of 128 values of a row) and bf16 activations, the weights dequantized in registers.
// Reference solution.
//
// Teaches: what a quarter of the bf16 bytes buys a memory-bound kernel; unpacking 32 nibbles from
// one 16-byte load, each to a float by the exponent trick (nibble ^ 8 is the value plus 8, in
// 0 .. 15, under the exponent of 2^23) since I2F would take longer than the memory; a scale per
// group, applied to the group's partial sum (a lane's 32 weights never cross a group). The checker
// reports the bandwidth on the bytes that must move next to a copy, and the time next to cuBLAS
// on the same product with bf16 weights.
//
// Run:  grader run 09/gemv_w4a16 --solutions
// Contract: gemv_w4a16.h             Notes:  notes/09_quantization.md
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "gemv_w4a16.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlock = 256;  // 8 warps: 8 output rows per block
constexpr int kRowsPerBlock = kBlock / 32;
constexpr int kWeightsPerLoad = 32;  // one uint4 of nibbles
constexpr int kLoadsInFlight = 4;    // per lane: 64 bytes of W on their way
constexpr int kLoadsPerGroup = kInt4Group / kWeightsPerLoad;
static_assert(kInt4Group % kWeightsPerLoad == 0, "a load never crosses a group");

// Nibble `p` (0..7) of a word of 8 two's complement nibbles, as a float. nibble ^ 8 is the value
// plus 8 (0b1111 = -1 becomes 7, 0b0111 = 7 becomes 15): under the exponent bits of 2^23 it makes
// the float 2^23 + q + 8, exactly; subtracting 2^23 + 8 leaves q, sign included.
__device__ float int4_to_float(unsigned word, int p) {
    const unsigned biased = ((word >> (4 * p)) & 0xFu) ^ 0x8u;
    return __uint_as_float(0x4B000000u | biased) - 8388616.0f;  // 2^23 + 8
}

// bf16 is the upper half of a float: a pair of them in a 32-bit word, as floats.
__device__ float bf16_low(unsigned pair) { return __uint_as_float(pair << 16); }
__device__ float bf16_high(unsigned pair) { return __uint_as_float(pair & 0xFFFF0000u); }

// The 32 weights of one uint4 (word i holds columns 8 i .. 8 i + 7, nibble p column 8 i + p),
// unscaled.
__device__ void int4x32_to_float(const uint4& w, float (&out)[kWeightsPerLoad]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < kWeightsPerLoad; ++i) out[i] = int4_to_float(words[i / 8], i % 8);
}

// sum over 32 weights times the 32 bf16 values of x at the same k (four uint4s).
__device__ float dot32(const float (&w)[kWeightsPerLoad], const uint4* x) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint4 v = x[i];
        const unsigned xs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
            sum += w[8 * i + 2 * j] * bf16_low(xs[j]) + w[8 * i + 2 * j + 1] * bf16_high(xs[j]);
    }
    return sum;
}

// Warp w of block b computes row n = kRowsPerBlock b + w for every token. Lane l reads the uint4s
// l, l + 32, ... of the row (a warp reads 512 consecutive bytes, 1024 weights, per step); uint4 c
// holds columns 32 c .. 32 c + 31, all in group c / 4, whose scale multiplies their partial sum.
template <int kMaxTokens>
__global__ void __launch_bounds__(kBlock)
    gemv_w4a16_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                      const std::uint8_t* __restrict__ W, const float* __restrict__ scales,
                      float* __restrict__ y) {
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    if (n >= N) return;  // the whole warp
    // 64-bit offsets: N * K / 2 bytes can pass 2^31.
    const uint4* w_row = reinterpret_cast<const uint4*>(W + static_cast<std::size_t>(n) * K / 2);
    const float* row_scales = scales + static_cast<std::size_t>(n) * (K / kInt4Group);
    const uint4* x_rows = reinterpret_cast<const uint4*>(x);  // 8 bf16 per uint4
    const int chunks = K / kWeightsPerLoad;                   // uint4s of W per row
    const int x_chunks = K / 8;                               // uint4s of x per token

    float acc[kMaxTokens] = {};
    for (int first = lane; first < chunks; first += 32 * kLoadsInFlight) {
        uint4 w[kLoadsInFlight];
        float scale[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int chunk = first + 32 * j;
            if (chunk < chunks) {
                w[j] = w_row[chunk];
                scale[j] = row_scales[chunk / kLoadsPerGroup];
            }
        }
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int chunk = first + 32 * j;
            if (chunk >= chunks) continue;
            float weights[kWeightsPerLoad];
            int4x32_to_float(w[j], weights);
#pragma unroll
            for (int m = 0; m < kMaxTokens; ++m)
                if (m < M)
                    acc[m] +=
                        scale[j] *
                        dot32(weights, x_rows + static_cast<std::size_t>(m) * x_chunks + 4 * chunk);
        }
    }
#pragma unroll
    for (int m = 0; m < kMaxTokens; ++m) {
        float sum = acc[m];
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_xor_sync(kFullMask, sum, offset);
        if (lane == m && m < M) y[static_cast<std::size_t>(m) * N + n] = sum;
    }
}

template <int kMaxTokens>
void launch(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* W, const float* scales,
            float* y) {
    gemv_w4a16_kernel<kMaxTokens>
        <<<course::ceil_div(N, kRowsPerBlock), kBlock>>>(M, N, K, x, W, scales, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemv_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* W,
                const float* scales, float* y) {
    if (M <= 1)
        launch<1>(M, N, K, x, W, scales, y);
    else if (M <= 2)
        launch<2>(M, N, K, x, W, scales, y);
    else if (M <= 4)
        launch<4>(M, N, K, x, W, scales, y);
    else if (M <= 8)
        launch<8>(M, N, K, x, W, scales, y);
    else
        launch<16>(M, N, K, x, W, scales, y);
}
