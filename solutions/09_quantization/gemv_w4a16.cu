// 09_quantization/gemv_w4a16: y = W x at decode time, INT4 weights in pack_int4's format (a scale
// per group of 128 values of a row) and bf16 activations, the weights dequantized in registers.
// Reference solution.
//
// Teaches: what a quarter of the bf16 bytes buys a memory-bound kernel; unpacking 32 nibbles from
// one 16-byte load, each to a float by the exponent trick (nibble ^ 8 is the value plus 8, in
// 0 .. 15, under the exponent of 2^23) since I2F would take longer than the memory; a scale per
// group, applied to the group's partial sums (a lane's 32 weights never cross a group);
// gemv_w8a16's shared tile of x and 4 rows per warp for a batch of tokens. The checker
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
// 4 warps: at 16 tokens a thread holds 64 accumulators (160-odd registers), and 3 blocks of
// 128 threads fit an SM where one of 256 would: one block's barrier is another's work.
constexpr int kBlock = 128;
constexpr int kRowsPerWarp = 4;  // each value of x read from shared memory serves 4 rows
constexpr int kRowsPerBlock = kBlock / 32 * kRowsPerWarp;  // 16 rows share one tile of x
constexpr int kWeightsPerLoad = 32;                        // one uint4 of nibbles
constexpr int kPieces = kWeightsPerLoad / 8;  // x's uint4s (8 bf16 each) under one load of W: 4
constexpr int kLoadsPerGroup = kInt4Group / kWeightsPerLoad;
// Loads of W in flight per lane and row, as many as a warp per row had (16 a lane for 4 rows):
// the bytes on their way per SM at one token stay where they were.
constexpr int kMaxLoads = 4;
// x's tile at most: under the 48 KB of static shared memory of every GPU, three blocks per SM.
constexpr int kTileBytes = 32 * 1024;
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

// Piece p of one uint4 of nibbles: word p, columns 8 p .. 8 p + 7 of the load (nibble i is
// column 8 p + i), unscaled.
__device__ void int4x8_to_float(const uint4& w, int p, float (&out)[8]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = int4_to_float(words[p], i);
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

// The sum over 8 weights times the 8 values of x at the same k.
__device__ float dot8(const float (&w)[8], const float (&x)[8]) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) sum += w[i] * x[i];
    return sum;
}

// gemv_w8a16's design with 32 weights per load: warp w of block b computes rows
// n = kRowsPerBlock b + kRowsPerWarp w + r (r < 4) for every token; each step loads the warp's
// weights (lane l: the uint4s l, l + 32, ... of the chunk in each row, uint4 c holding columns
// 32 c .. 32 c + 31, all in group c / 4, whose scale multiplies their partial sums), stages x's
// chunk of every token in shared memory once for the block's 16 rows, and reads each value of x
// from there once per warp for 4 rows.
//
// Napkin math at 16 tokens, N = K = 8192 (notes, section 3): W and its scales are 34 MiB, 12 us at
// the copy's 3 TB/s; x's tile adds 128 MiB from L2 (512 blocks x 8 steps x 32 KB), some 25 us at
// L2's 6 to 7 TB/s. The 1.07 G multiply-adds take 32 us at the CUDA cores' 128 FMAs per clock on
// 132 SMs: the arithmetic sets the time, as for INT8, with about 1.6 instructions per weight and
// token (1 FMA, 1/8 of the group scale's FMA on a partial sum of 8, 1/4 of a bf16-to-float of x,
// 1/32 of a shared-memory read, about 3/16 of the nibble's conversion): some 50 us, 23% of the
// copy's rate on W (before: 64 bytes of x from L2 for each byte of W, 3.9%). At one token a
// step's loads are 16 a lane (4 rows x 4) and W's bytes set the time.
template <int kMaxTokens>
__global__ void __launch_bounds__(kBlock)
    gemv_w4a16_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                      const std::uint8_t* __restrict__ W, const float* __restrict__ scales,
                      float* __restrict__ y) {
    // The columns of K staged per step: kMaxLoads loads of W per lane and row, fewer where
    // x's tile (kMaxTokens x kChunk bf16) would pass kTileBytes.
    constexpr int kFit = kTileBytes / (2 * kMaxTokens);
    constexpr int kChunk =
        kFit < 32 * kWeightsPerLoad * kMaxLoads ? kFit : 32 * kWeightsPerLoad * kMaxLoads;
    constexpr int kChunkLoads = kChunk / kWeightsPerLoad;  // uint4s of W per row and chunk
    constexpr int kLoads = kChunkLoads / 32;  // per lane and row: 4 to 4 tokens, 2 at 8, 1 at 16
    // x's chunk of every token, piece-major (gemv_w8a16's reason): x_tile[m][p][c] is piece p
    // (8 bf16) of x under the chunk's uint4 c of W; lane l reads x_tile[m][p][l + 32 j], 512
    // consecutive bytes per warp, where x's own order would give four-way bank conflicts.
    __shared__ uint4 x_tile[kMaxTokens][kPieces][kChunkLoads];

    const int lane = threadIdx.x % 32;
    const int first_row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32 * kRowsPerWarp;
    const uint4* w_rows[kRowsPerWarp];
    const float* row_scales[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int n = first_row + r;
        // 64-bit offsets: N * K / 2 bytes can pass 2^31.
        w_rows[r] = reinterpret_cast<const uint4*>(W + static_cast<std::size_t>(n) * K / 2);
        row_scales[r] = scales + static_cast<std::size_t>(n) * (K / kInt4Group);
    }
    const uint4* x_rows = reinterpret_cast<const uint4*>(x);  // 8 bf16 per uint4
    const int chunks = K / kWeightsPerLoad;                   // uint4s of W per row
    const int x_chunks = K / 8;                               // uint4s of x per token

    float acc[kRowsPerWarp][kMaxTokens] = {};
    for (int start = 0; start < chunks; start += kChunkLoads) {
        // The chunk's weights and their group scales first, before the barrier; rows past N
        // load nothing but stay for the block's barriers.
        uint4 w[kRowsPerWarp][kLoads];
        float scale[kRowsPerWarp][kLoads];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                const int chunk = start + lane + 32 * j;
                w[r][j] = uint4{};
                scale[r][j] = 0.0f;
                if (first_row + r < N && chunk < chunks) {
                    w[r][j] = w_rows[r][chunk];
                    scale[r][j] = row_scales[r][chunk / kLoadsPerGroup];
                }
            }
        // x's chunk of every token into the tile: uint4 u of the chunk is piece u % kPieces of
        // W's uint4 u / kPieces.
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
                float weights[kRowsPerWarp][8];
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) int4x8_to_float(w[r][j], p, weights[r]);
#pragma unroll
                for (int m = 0; m < kMaxTokens; ++m) {
                    if (m >= M) continue;
                    float xs[8];
                    bf16x8_to_float(x_tile[m][p][lane + 32 * j], xs);
#pragma unroll
                    for (int r = 0; r < kRowsPerWarp; ++r)
                        acc[r][m] += scale[r][j] * dot8(weights[r], xs);
                }
            }
        }
        __syncthreads();  // every warp is done with the tile before the next chunk overwrites it
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        const int n = first_row + r;
        if (n >= N) break;  // the whole warp
#pragma unroll
        for (int m = 0; m < kMaxTokens; ++m) {
            float sum = acc[r][m];
            for (int offset = 16; offset > 0; offset /= 2)
                sum += __shfl_xor_sync(kFullMask, sum, offset);
            if (lane == m && m < M) y[static_cast<std::size_t>(m) * N + n] = sum;
        }
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
