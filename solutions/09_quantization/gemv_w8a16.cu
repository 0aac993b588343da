// 09_quantization/gemv_w8a16: y = W x at decode time, INT8 weights (a scale per output row) and
// bf16 activations, the weights dequantized in registers. Reference solution.
//
// Teaches: the roofline of a decode GEMV (one token: 2 FLOP per weight, so the weights' bytes set
// the time, and INT8 halves bf16's); a warp per output row, each lane streaming 16 weights per
// 16-byte load, several loads in flight; an int8 turned into a float without a conversion
// instruction (the exponent trick: its bits under the exponent of 2^23, then one subtraction),
// since I2F runs at a quarter of the FMA rate and would bound the kernel; the row's scale applied
// once, after the sum. The checker reports the bandwidth on the bytes that must move next to a
// copy, and the time next to cuBLAS on the same product with bf16 weights.
//
// Run:  grader run 09/gemv_w8a16 --solutions
// Contract: gemv_w8a16.h             Notes:  notes/09_quantization.md
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "gemv_w8a16.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlock = 256;  // 8 warps: 8 output rows per block
constexpr int kRowsPerBlock = kBlock / 32;
constexpr int kWeightsPerLoad = 16;  // one uint4 of int8
constexpr int kLoadsInFlight = 4;    // per lane: 64 bytes of W on their way
static_assert(kWeightsPerLoad % 8 == 0, "x's 16 bf16 values are two uint4s");

// Weight `byte` (0..3) of a little-endian word of 4 int8, as a float. q ^ 0x80 is q + 128, in
// 0 .. 255: as the low mantissa bits of 2^23 (exponent bits 0x4B000000) it is the float
// 2^23 + q + 128, exactly; subtracting 2^23 + 128 leaves q. Two integer operations and an FADD,
// where a conversion (I2F) would cost four FMA slots.
__device__ float int8_to_float(unsigned word, int byte) {
    const unsigned biased = ((word >> (8 * byte)) & 0xFFu) ^ 0x80u;
    return __uint_as_float(0x4B000000u | biased) - 8388736.0f;  // 2^23 + 128
}

// bf16 is the upper half of a float: a pair of them in a 32-bit word, as floats.
__device__ float bf16_low(unsigned pair) { return __uint_as_float(pair << 16); }
__device__ float bf16_high(unsigned pair) { return __uint_as_float(pair & 0xFFFF0000u); }

// The 16 int8 weights of one uint4, as floats: dequantized once, used for every token.
__device__ void int8x16_to_float(const uint4& w, float (&out)[kWeightsPerLoad]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < kWeightsPerLoad; ++i) out[i] = int8_to_float(words[i / 4], i % 4);
}

// sum over 16 weights times the 16 bf16 values of x at the same k (two uint4s).
__device__ float dot16(const float (&w)[kWeightsPerLoad], const uint4* x) {
    const uint4 x0 = x[0], x1 = x[1];
    const unsigned xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) sum += w[2 * i] * bf16_low(xs[i]) + w[2 * i + 1] * bf16_high(xs[i]);
    return sum;
}

// Warp w of block b computes row n = kRowsPerBlock b + w for every token. Lane l reads the
// uint4s l, l + 32, l + 64, ... of the row (a warp reads 512 consecutive bytes per step), each
// with the matching 32 bytes of every token's x (which every row reads: it stays in L1 and L2).
// kMaxTokens is a bound on M known at compile time, so that acc[] lives in registers.
template <int kMaxTokens>
__global__ void __launch_bounds__(kBlock)
    gemv_w8a16_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                      const std::int8_t* __restrict__ W, const float* __restrict__ scales,
                      float* __restrict__ y) {
    const int lane = threadIdx.x % 32;
    const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    if (n >= N) return;  // the whole warp: a row is never split between warps
    // 64-bit offset: N * K can pass 2^31.
    const uint4* w_row = reinterpret_cast<const uint4*>(W + static_cast<std::size_t>(n) * K);
    const uint4* x_rows = reinterpret_cast<const uint4*>(x);  // 8 bf16 per uint4
    const int chunks = K / kWeightsPerLoad;                   // uint4s of W per row
    const int x_chunks = K / 8;                               // uint4s of x per token

    float acc[kMaxTokens] = {};
    for (int first = lane; first < chunks; first += 32 * kLoadsInFlight) {
        // Every load of the batch is issued before the first is used.
        uint4 w[kLoadsInFlight];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j)
            if (first + 32 * j < chunks) w[j] = w_row[first + 32 * j];
#pragma unroll
        for (int j = 0; j < kLoadsInFlight; ++j) {
            const int chunk = first + 32 * j;
            if (chunk >= chunks) continue;
            float weights[kWeightsPerLoad];
            int8x16_to_float(w[j], weights);
#pragma unroll
            for (int m = 0; m < kMaxTokens; ++m)
                if (m < M)
                    acc[m] +=
                        dot16(weights, x_rows + static_cast<std::size_t>(m) * x_chunks + 2 * chunk);
        }
    }
    // Each token's sum over the warp, then the row's scale, applied once to the sum.
    const float scale = scales[n];
#pragma unroll
    for (int m = 0; m < kMaxTokens; ++m) {
        float sum = acc[m];
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_xor_sync(kFullMask, sum, offset);
        if (lane == m && m < M) y[static_cast<std::size_t>(m) * N + n] = sum * scale;
    }
}

template <int kMaxTokens>
void launch(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W, const float* scales,
            float* y) {
    gemv_w8a16_kernel<kMaxTokens>
        <<<course::ceil_div(N, kRowsPerBlock), kBlock>>>(M, N, K, x, W, scales, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemv_w8a16(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                const float* scales, float* y) {
    // One kernel per bound on M: a single token keeps one accumulator, not sixteen.
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
