// 09_quantization/gemv_w8a16_fast: y = W x at decode time with INT8 weights: at one token a
// kernel built for bandwidth. Fast reference: the readable solution (gemv_w8a16.cu, included
// below) plus what it leaves on the table at one token.
//
// Teaches: at one token the time is the time to read W, and what decides it is whether the
// loads keep the memory busy, not the arithmetic. The readable kernel's block of 16 rows walks K
// in chunks, each behind x's tile and a barrier, and issues a chunk's loads only after the
// chunk before it is computed: with one wave of blocks that start together, the memory idles
// while they compute (73.5% of the copy on an H100). The one-token kernel here keeps the readable
// kernel's dequantization and changes how W streams: a block of 4 warps takes 4 rows and splits
// each row's K between its 128 threads, every thread issuing all its loads of a trip (2 uint4s
// of each row, with CUDA's streaming hint) before it uses any; x comes through L1 beside them, no
// shared tile and no barrier until the one that adds up the warps' sums. At N = 8192 the 2048
// blocks of 4 rows are two waves less a few (8 blocks an SM at 64 registers a thread), 128 KB of
// W an SM in flight when all of them wait. A batch of tokens takes the
// readable kernel: its shared tile of x is what a batch needs. The module README compares the
// two.
//
// Run:  grader run 09/gemv_w8a16 --solutions     (the "gemv_w8a16 (fast)" row)
// Contract: gemv_w8a16.h                          Notes:  notes/09_quantization.md, sections 3-4
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "course/vec.h"
#include "gemv_w8a16.h"

// The readable solution, whole: readable::gemv_w8a16 runs a batch of tokens, and its int8 and
// bf16 conversions are this kernel's. (Every header it includes is included above, so that none
// of them lands inside the namespace.)
namespace readable {
#include "gemv_w8a16.cu"
}  // namespace readable

namespace {

// Threads of a one-token block: 4 warps split each of its rows' K (a row of 8192 is 512 uint4s,
// 4 a thread), and add up their sums once, at the end.
constexpr int kOneTokenBlock = 128;
// Rows a block computes: each value of x read through L1 and turned into a float serves them all.
constexpr int kOneTokenRows = 4;
// uint4s of each row a thread loads in a trip, all issued before any is used: with 4 rows, 8 loads
// of 16 bytes in flight a thread, 2 trips at K = 8192.
constexpr int kOneTokenLoads = 2;
// Registers a thread at most (__launch_bounds__): 64 lets 8 blocks (1024 threads, 32 warps) share
// an SM's 65536, and the loads in flight are those of 32 warps.
constexpr int kOneTokenRegisters = 64;
constexpr int kTrip = kOneTokenBlock * kOneTokenLoads;  // uint4s of a row the block loads a trip

// Block b computes rows n = kOneTokenRows b + r; thread t takes uint4s t, t + kOneTokenBlock, ...
// of every row (a warp's loads of a row are 512 consecutive bytes). The int8 become floats as in
// the readable kernel (the exponent trick); the row's scale multiplies its sum once, at the end.
// x, 16 KB, is read through L1 by every block: its uint4s 2 c and 2 c + 1 lie under W's uint4 c.
//
// Napkin math at N = K = 8192 on an H100 (notes, section 3): W is 64 MiB, 21 us at 3.2 TB/s. In
// flight: each thread issues its 8 loads of W (128 bytes) before any arithmetic; at 1024 threads
// an SM that is 128 KB an SM when every thread waits, five times the 25 KB that 3.3 TB/s at a
// microsecond's latency asks of each of 132 SMs. The 2048 blocks are 1.94 waves of 1056: a block
// that ends is replaced at once, and the last ones end with the reading. Issue: about 5
// instructions a weight in the trip's SASS (sm_90; the readable kernel's conversion), 64 M
// weights at 132 SMs x 128 lanes x 1.98 GHz: 10 us, half the reading.
__global__ void __launch_bounds__(kOneTokenBlock, 65536 / (kOneTokenRegisters * kOneTokenBlock))
    one_token_kernel(int N, int K, const __nv_bfloat16* __restrict__ x,
                     const std::int8_t* __restrict__ W, const float* __restrict__ scales,
                     float* __restrict__ y) {
    __shared__ float warp_sums[kOneTokenBlock / 32][kOneTokenRows];

    const int first_row = blockIdx.x * kOneTokenRows;
    const int rows = N - first_row;  // the block's rows below N (fewer in the last block)
    const int loads = K / 16;        // uint4s of a row
    // The thread's first uint4 of the block's first row and x's uint4s under it; row r's are
    // `loads` uint4s further, each trip kTrip uint4s on. 64-bit offset to the block: N * K
    // bytes can pass 2^31 (those inside it are small).
    const uint4* w_trip =
        reinterpret_cast<const uint4*>(W + static_cast<std::size_t>(first_row) * K) + threadIdx.x;
    const uint4* x_trip = reinterpret_cast<const uint4*>(x) + 2 * threadIdx.x;  // 8 bf16 a uint4

    float acc[kOneTokenRows] = {};
    for (int left = loads - static_cast<int>(threadIdx.x); left > 0; left -= kTrip) {
        // The trip's loads, every one before any use; evict-first (__ldcs): W is read once.
        // `left`: the row's uint4s from the thread's first of the trip on. Rows past N load
        // nothing (zeros) and store nothing.
        uint4 w[kOneTokenRows][kOneTokenLoads] = {};
#pragma unroll
        for (int r = 0; r < kOneTokenRows; ++r)
            course::load_batch<kOneTokenBlock, course::Cache::kLastUse>(w[r], w_trip + r * loads, 0,
                                                                        r < rows ? left : 0);
#pragma unroll
        for (int j = 0; j < kOneTokenLoads; ++j) {
            if (j * kOneTokenBlock >= left) break;  // the trip's last loads run past the row's end
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                float xs[8];
                readable::bf16x8_to_float(__ldg(x_trip + 2 * j * kOneTokenBlock + p), xs);
#pragma unroll
                for (int r = 0; r < kOneTokenRows; ++r) {
                    float weights[8];
                    readable::int8x8_to_float(w[r][j], p, weights);
                    acc[r] = readable::dot8(weights, xs, acc[r]);
                }
            }
        }
        w_trip += kTrip;
        x_trip += 2 * kTrip;
    }

    // Each row's sum: a butterfly in each warp, then the warps' sums through shared memory, then
    // the row's scale, once.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < kOneTokenRows; ++r) {
        float sum = acc[r];
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_xor_sync(readable::kFullMask, sum, offset);
        if (lane == 0) warp_sums[warp][r] = sum;
    }
    __syncthreads();  // every warp's sums are written
    const int n = first_row + threadIdx.x;
    if (threadIdx.x < kOneTokenRows && n < N) {
        float total = 0.0f;
#pragma unroll
        for (int other = 0; other < kOneTokenBlock / 32; ++other)
            total += warp_sums[other][threadIdx.x];
        y[n] = total * scales[n];
    }
}

void launch_one_token(int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                      const float* scales, float* y) {
    one_token_kernel<<<course::ceil_div(N, kOneTokenRows), kOneTokenBlock>>>(N, K, x, W, scales, y);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemv_w8a16(int M, int N, int K, const __nv_bfloat16* x, const std::int8_t* W,
                const float* scales, float* y) {
    if (M == 1)
        launch_one_token(N, K, x, W, scales, y);
    else
        readable::gemv_w8a16(M, N, K, x, W, scales, y);
}
