// 09_quantization/gemv_w8a16: y = W x at decode time, INT8 weights (a scale per output row) and
// bf16 activations, the weights dequantized in registers. Reference solution.
//
// Teaches: the roofline of a decode GEMV (one token: 2 FLOP per weight, so the weights' bytes set
// the time, and INT8 halves bf16's); each lane streaming 16 weights per 16-byte load, several
// loads in flight; an int8 turned into a float without a conversion instruction (the exponent
// trick: its bits under the exponent of 2^23, then one subtraction), since I2F runs at a quarter
// of the FMA rate and would bound the kernel; the row's scale applied once, after the sum; for a
// batch of tokens, x's chunk staged in shared memory once per block and each value of it used for
// 4 rows from registers (shared memory alone would read 2 bytes of it per weight and token, at
// half the FMA rate; rows per warp alone would leave x's reuse between warps to L1). The checker
// reports the bandwidth on the bytes that must move next to a copy, and the time next to cuBLAS on
// the same product with bf16 weights.
//
// Run:  grader run 09/gemv_w8a16 --solutions
// Contract: gemv_w8a16.h             Notes:  notes/09_quantization.md
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "gemv_w8a16.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
// 4 warps: at 16 tokens a thread holds 64 accumulators (160-odd registers), and 3 blocks of
// 128 threads fit an SM where one of 256 would: one block's barrier is another's work.
constexpr int kBlock = 128;
constexpr int kRowsPerWarp = 4;  // each value of x read from shared memory serves 4 rows
constexpr int kRowsPerBlock = kBlock / 32 * kRowsPerWarp;  // 16 rows share one tile of x
constexpr int kWeightsPerLoad = 16;                        // one uint4 of int8
constexpr int kPieces = kWeightsPerLoad / 8;  // x's uint4s (8 bf16 each) under one load of W: 2
// Loads of W in flight per lane and row, as many as a warp per row had (16 a lane for 4 rows):
// the bytes on their way per SM at one token stay where they were.
constexpr int kMaxLoads = 4;
// x's tile at most: under the 48 KB of static shared memory of every GPU, three blocks per SM.
constexpr int kTileBytes = 32 * 1024;
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

// Piece p (weights 8 p .. 8 p + 7: words 2 p and 2 p + 1) of one uint4 of int8, as floats.
__device__ void int8x8_to_float(const uint4& w, int p, float (&out)[8]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = int8_to_float(words[2 * p + i / 4], i % 4);
}

// The 8 bf16 of one uint4 of x, as floats.
__device__ void bf16x8_to_float(const uint4& v, float (&out)[8]) {
    const unsigned pairs[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        out[2 * i] = bf16_low(pairs[i]);
        out[2 * i + 1] = bf16_high(pairs[i]);
    }
}

// acc + the sum over 8 weights times the 8 values of x at the same k.
__device__ float dot8(const float (&w)[8], const float (&x)[8], float acc) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc += w[i] * x[i];
    return acc;
}

// Warp w of block b computes rows n = kRowsPerBlock b + kRowsPerWarp w + r (r < 4) for every
// token. The block walks K in chunks: each step loads the warp's weights (lane l: the uint4s
// l, l + 32, ... of the chunk in each of its rows, 512 consecutive bytes per warp and load), copies
// x's chunk of every token from global memory into shared memory once for the block's 16 rows,
// and then reads each value of x from there once per warp and uses it for 4 rows. Every weight
// byte used to bring 32 bytes of x from L1 and L2 at 16 tokens (2 bytes a token, each row reading
// them again); now the block reads x once per 16 rows.
//
// Napkin math at 16 tokens, N = K = 8192 (notes, section 3). W is 64 MiB: 22 us at the copy's
// 3 TB/s. x's tile is 32 KB per block and step from L2: 512 blocks x 8 steps, 128 MiB, with W's
// 64 MiB on its way through L2 some 30 us at L2's 6 to 7 TB/s, beside the memory's. But 16 tokens
// make 1.07 G multiply-adds, 32 us at 128 FMAs per clock on 132 SMs at 1.98 GHz: past the ridge,
// so the CUDA cores set the time, in instructions per weight and token: 1 FMA, 1/4 of a
// bf16-to-float of x (one for 4 rows), 1/32 of a shared-memory read, about 3/16 of the weight's
// own conversion (one for 16 tokens): about 1.5, some 48 us, 45% of the copy's rate on W (before:
// 32 bytes of x from L2 for each byte of W, 7.9%). At one token the tile is 4 KB, a step's loads
// are 16 a lane (4 rows x 4), and W's bytes set the time again.
// kMaxTokens is a bound on M known at compile time, so that acc[][] lives in registers.
template <int kMaxTokens>
__global__ void __launch_bounds__(kBlock)
    gemv_w8a16_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                      const std::int8_t* __restrict__ W, const float* __restrict__ scales,
                      float* __restrict__ y) {
    // The columns of K staged per step: kMaxLoads loads of W per lane and row, fewer where
    // x's tile (kMaxTokens x kChunk bf16) would pass kTileBytes.
    constexpr int kFit = kTileBytes / (2 * kMaxTokens);
    constexpr int kChunk =
        kFit < 32 * kWeightsPerLoad * kMaxLoads ? kFit : 32 * kWeightsPerLoad * kMaxLoads;
    constexpr int kChunkLoads = kChunk / kWeightsPerLoad;  // uint4s of W per row and chunk
    constexpr int kLoads = kChunkLoads / 32;               // per lane and row: 4, or 2 at 16 tokens
    // x's chunk of every token, stored piece-major: x_tile[m][p][c] is piece p (8 bf16) of x
    // under the chunk's uint4 c of W. Lane l reads x_tile[m][p][l + 32 j]: the warp's 16-byte
    // reads are 512 consecutive bytes, free of bank conflicts (x in its own order would put a
    // lane's two pieces side by side, and 32 lanes 32 bytes apart: two-way conflicts).
    __shared__ uint4 x_tile[kMaxTokens][kPieces][kChunkLoads];

    const int lane = threadIdx.x % 32;
    const int first_row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32 * kRowsPerWarp;
    const uint4* w_rows[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int n = first_row + r;
        // 64-bit offset: N * K can pass 2^31.
        w_rows[r] = reinterpret_cast<const uint4*>(W + static_cast<std::size_t>(n) * K);
    }
    const uint4* x_rows = reinterpret_cast<const uint4*>(x);  // 8 bf16 per uint4
    const int chunks = K / kWeightsPerLoad;                   // uint4s of W per row
    const int x_chunks = K / 8;                               // uint4s of x per token

    float acc[kRowsPerWarp][kMaxTokens] = {};
    for (int start = 0; start < chunks; start += kChunkLoads) {
        // The chunk's weights first: every load issued before any is used, and before the
        // barrier, which they do not need. Rows past N load nothing, but their warp stays: the
        // block's barriers wait for all of its threads.
        uint4 w[kRowsPerWarp][kLoads];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                const int c = start + lane + 32 * j;
                w[r][j] = first_row + r < N && c < chunks ? w_rows[r][c] : uint4{};
            }
        // x's chunk of every token into the tile, by the whole block: uint4 u of the chunk is
        // piece u % kPieces of W's uint4 u / kPieces.
        for (int i = threadIdx.x; i < M * kPieces * kChunkLoads; i += kBlock) {
            const int m = i / (kPieces * kChunkLoads), u = i % (kPieces * kChunkLoads);
            const int at = start * kPieces + u;  // uint4 of token m's x
            if (at < x_chunks)
                x_tile[m][u % kPieces][u / kPieces] =
                    x_rows[static_cast<std::size_t>(m) * x_chunks + at];
        }
        __syncthreads();  // the tile is whole
#pragma unroll
        for (int j = 0; j < kLoads; ++j) {
            if (start + lane + 32 * j >= chunks) continue;
#pragma unroll
            for (int p = 0; p < kPieces; ++p) {
                // 8 weights of each row, dequantized once for every token ...
                float weights[kRowsPerWarp][8];
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) int8x8_to_float(w[r][j], p, weights[r]);
                    // ... and 8 values of each token's x, read and converted once for 4 rows.
#pragma unroll
                for (int m = 0; m < kMaxTokens; ++m) {
                    if (m >= M) continue;
                    float xs[8];
                    bf16x8_to_float(x_tile[m][p][lane + 32 * j], xs);
#pragma unroll
                    for (int r = 0; r < kRowsPerWarp; ++r)
                        acc[r][m] = dot8(weights[r], xs, acc[r][m]);
                }
            }
        }
        __syncthreads();  // every warp is done with the tile before the next chunk overwrites it
    }
    // Each token's sum over the warp, then the row's scale, applied once to the sum.
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int n = first_row + r;
        if (n >= N) break;  // the whole warp: n is the same in every lane
        const float scale = scales[n];
#pragma unroll
        for (int m = 0; m < kMaxTokens; ++m) {
            float sum = acc[r][m];
            for (int offset = 16; offset > 0; offset /= 2)
                sum += __shfl_xor_sync(kFullMask, sum, offset);
            if (lane == m && m < M) y[static_cast<std::size_t>(m) * N + n] = sum * scale;
        }
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
