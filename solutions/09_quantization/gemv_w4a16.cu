// 09_quantization/gemv_w4a16: y = W x at decode time, INT4 weights in pack_int4's format (a scale
// per group of 128 values of a row) and bf16 activations, the weights dequantized in registers.
// Reference solution.
//
// Teaches: what a quarter of the bf16 bytes buys a memory-bound kernel; unpacking 32 nibbles from
// one 16-byte load, each to a float by the exponent trick (nibble ^ 8 is the value plus 8, in
// 0 .. 15, left in place under the exponent of 2^23: a LOP3 and an FFMA a weight) since I2F
// would take longer than the memory; the next step's loads in flight during this step's
// arithmetic, which at one token now costs as much time as the reads; a scale per group, applied
// to the group's partial sums (a lane's 32 weights never cross a group); gemv_w8a16's shared tile
// of x and 4 rows per warp for a batch of tokens. The checker
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
// A step: one uint4 per lane and row, 1024 columns; x's tile of 16 tokens is then 32 KB, under
// the 48 KB of static shared memory of every GPU (three blocks per SM).
constexpr int kChunkLoads = 32;
static_assert(kInt4Group % kWeightsPerLoad == 0, "a load never crosses a group");

// Nibble p (0..3) of a carrier (4 nibbles XORed with 8, each then q + 8 in 0 .. 15, under the
// exponent bits of 2^23), as the float q. The exponent trick without moving the
// nibble: masked in place, it makes the float 2^23 + 16^p (q + 8) exactly, and one FFMA (times
// 16^-p, minus 2^23 / 16^p + 8, both exact) leaves q. A LOP3 and an FFMA a weight.
__device__ float int4_to_float(unsigned carrier, int p) {
    const float unit = 1.0f / static_cast<float>(1 << (4 * p));  // 16^-p
    return __uint_as_float(carrier & (0xFF800000u | (0xFu << (4 * p)))) * unit -
           (8388608.0f * unit + 8.0f);
}

// bf16 is the upper half of a float: a pair of them in a 32-bit word, as floats.
__device__ float bf16_low(unsigned pair) { return __uint_as_float(pair << 16); }
__device__ float bf16_high(unsigned pair) { return __uint_as_float(pair & 0xFFFF0000u); }

// Piece p of one uint4 of nibbles: word p, columns 8 p .. 8 p + 7 of the load (nibble i is
// column 8 p + i), unscaled. One XOR biases all 8 (nibble ^ 8 is q + 8: 0b1111 = -1 becomes 7,
// 0b0111 = 7 becomes 15); each half of the word then goes under 2^23's exponent bits, the upper
// one shifted down (the mantissa has 23 bits): 4 instructions a word, not 2 or 3 a nibble.
__device__ void int4x8_to_float(const uint4& w, int p, float (&out)[8]) {
    const unsigned words[4] = {w.x, w.y, w.z, w.w};
    const unsigned biased = words[p] ^ 0x88888888u;
    const unsigned carriers[2] = {(biased & 0xFFFFu) | 0x4B000000u, (biased >> 16) | 0x4B000000u};
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = int4_to_float(carriers[i / 4], i % 4);
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

// Lane `lane`'s uint4 of each of the warp's rows in the step at `start` (uint4 start + lane of the
// row, columns 32 (start + lane) .. + 31, all in group (start + lane) / 4), and that group's
// scale; zeros in rows past N and past the row's end.
__device__ void load_weights(const uint4* const (&w_rows)[kRowsPerWarp],
                             const float* const (&row_scales)[kRowsPerWarp], int rows, int start,
                             int lane, int chunks, uint4 (&w)[kRowsPerWarp],
                             float (&scale)[kRowsPerWarp]) {
    const int chunk = start + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
        w[r] = uint4{};
        scale[r] = 0.0f;
        if (r < rows && chunk < chunks) {
            w[r] = w_rows[r][chunk];
            scale[r] = row_scales[r][chunk / kLoadsPerGroup];
        }
    }
}

// gemv_w8a16's design with 32 weights per load: warp w of block b computes rows
// n = kRowsPerBlock b + kRowsPerWarp w + r (r < 4) for every token; each step stages x's 1024
// columns of every token in shared memory once for the block's 16 rows, and reads each value of x
// from there once per warp for 4 rows. Even at a LOP3 and an FFMA, a nibble costs nearly the
// instructions of an int8 for half the bytes, so at one token the arithmetic takes most of the
// reads' time and must not wait for them: each step issues the next step's loads of W before its
// own arithmetic, and they travel while it runs.
//
// Napkin math at one token, N = K = 8192 (notes, sections 3 and 4): W and its scales are 34 MiB,
// 11 us at the copy's 3 TB/s. The 64 M weights cost about 4 instructions each (the nibble's LOP3
// and FFMA, its own FFMA, 1/2 of the word's XOR, masks and shift, 1/4 of a bf16-to-float of x
// shared by 4 rows, 1/8 of the scale's FFMA): 8 us at 132 SMs x 128 lanes x 1.98 GHz, hidden
// under the reads only if loads are in flight while it runs (16 warps an SM x 64 bytes a lane:
// 32 KB an SM, above the 23 KB that 3 TB/s at a microsecond's latency needs). At 16 tokens the
// arithmetic sets the time (about 1.6 instructions per weight and token, some 50 us, 23% of the
// copy's rate on W).
template <int kMaxTokens>
__global__ void __launch_bounds__(kBlock)
    gemv_w4a16_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                      const std::uint8_t* __restrict__ W, const float* __restrict__ scales,
                      float* __restrict__ y) {
    // x's chunk of every token, piece-major (gemv_w8a16's reason): x_tile[m][p][c] is piece p
    // (8 bf16) of x under the step's uint4 c of W; lane l reads x_tile[m][p][l], 512 consecutive
    // bytes per warp, where x's own order would give four-way bank conflicts.
    __shared__ uint4 x_tile[kMaxTokens][kPieces][kChunkLoads];

    const int lane = threadIdx.x % 32;
    const int first_row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32 * kRowsPerWarp;
    const int rows = N - first_row;  // the warp's rows below N: 4, fewer, or none
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

    // The next step's weights and scales, in flight during this step's arithmetic. Rows past N
    // load nothing but stay for the block's barriers.
    uint4 w_next[kRowsPerWarp];
    float scale_next[kRowsPerWarp];
    load_weights(w_rows, row_scales, rows, 0, lane, chunks, w_next, scale_next);
    float acc[kRowsPerWarp][kMaxTokens] = {};
    for (int start = 0; start < chunks; start += kChunkLoads) {
        uint4 w[kRowsPerWarp];
        float scale[kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            w[r] = w_next[r];
            scale[r] = scale_next[r];
        }
        load_weights(w_rows, row_scales, rows, start + kChunkLoads, lane, chunks, w_next,
                     scale_next);
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
        if (start + lane < chunks) {
#pragma unroll
            for (int p = 0; p < kPieces; ++p) {
                float weights[kRowsPerWarp][8];
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) int4x8_to_float(w[r], p, weights[r]);
#pragma unroll
                for (int m = 0; m < kMaxTokens; ++m) {
                    if (m >= M) continue;
                    float xs[8];
                    bf16x8_to_float(x_tile[m][p][lane], xs);
#pragma unroll
                    for (int r = 0; r < kRowsPerWarp; ++r)
                        acc[r][m] += scale[r] * dot8(weights[r], xs);
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
