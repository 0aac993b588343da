// 09_quantization/gemv_w4a16_fast: y = W x at decode time with INT4 weights: at one token a
// kernel built for bandwidth, from two tokens on the tensor cores. Fast reference: the readable
// solution (gemv_w4a16.cu, included below) plus what it leaves on the table.
//
// Teaches: at one token the readable kernel's arithmetic is cheap enough (a LOP3 and two FFMA a
// nibble), but its structure is not: a block of 16 rows walks K in 8 steps, each behind x's tile,
// a barrier and the step's arithmetic, with 32 KB of W an SM in flight (53% of the copy on an
// H100). The one-token kernel here keeps the readable kernel's dequantization and changes only
// how W streams: a block of 4 warps takes 4 rows and splits each row's K between its 128 threads,
// every thread issuing all its loads of a trip (a uint4 of each row and its group's scale, with
// CUDA's streaming hint) before it uses any; x (16 KB) comes through L1 beside them, no shared
// tile and no barrier until the one that adds up the warps' sums. At N = 8192 the 2048 blocks of
// 4 rows are two waves less a few (8 blocks an SM at 64 registers a thread), 64 KB of W an SM in
// flight when all of them wait: 57.8% of the copy on an H100 (the README says what is left).
// For a batch of tokens the readable kernel does every token's multiply-adds on the CUDA
// cores, four instructions a nibble and token (7.8% of the copy at 16 tokens on an H100). Here
// the products go to the tensor cores: a warp multiplies 16 rows of W (A) by up to 8 tokens (B's
// columns; 9 to 16 take two mma), and a pair of nibbles becomes a bf16 pair in three
// instructions (gemm_w4a16's trick): 27.7% of the copy at 16 tokens. (At one token 7 of B's 8
// columns are zeros: the tensor-core path measured 48.6-51.9% there.) A dot product does not
// care in which order its k come: a lane's 16 bytes of a row (32 consecutive k, a quarter of a
// group) go into the A fragment as they are, and B takes x at the same k from 16 bytes of x, so
// W needs no tiling pass. No barrier in the loop: each lane streams its own 16-byte pieces of W
// and their scales into a ring of shared memory with cp.async, 3 groups ahead of its arithmetic
// (96 bytes a lane, 96 KB an SM in flight), and reads back only what it copied itself; x comes
// through L1; the 8 warps of a block split K and add up their sums through shared memory once,
// at the end.
// GPUs without bf16 tensor cores (a T4) take the readable solution's path for a batch. The module
// README compares the two.
//
// Run:  grader run 09/gemv_w4a16 --solutions     (the "gemv_w4a16 (fast)" row)
// Contract: gemv_w4a16.h                          Notes:  notes/09_quantization.md, sections 3-5
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "course/launch.h"
#include "course/vec.h"
#include "gemv_w4a16.h"
#include "tensor_core.h"

// The readable solution, whole: readable::gemv_w4a16 runs what this file does not take. (Every
// header it includes is included above, so that none of them lands inside the namespace.)
namespace readable {
#include "gemv_w4a16.cu"
}  // namespace readable

namespace {

// ---- One token: W streamed at the copy's rate ----------------------------------------------

// Threads of a one-token block: 4 warps split each of its rows' K (a row of 8192 is 256 uint4s,
// 2 a thread), and add up their sums once, at the end.
constexpr int kOneTokenBlock = 128;
// Rows a block computes: each value of x read through L1 and turned into a float serves them all.
constexpr int kOneTokenRows = 4;
// uint4s of each row a thread loads in a trip, all issued before any is used: with 4 rows, 4 loads
// of 16 bytes in flight a thread, 2 trips at K = 8192. (2 loads a row: 80 registers, or spills at
// 64.)
constexpr int kOneTokenLoads = 1;
// Registers a thread at most (__launch_bounds__): 64 lets 8 blocks (1024 threads, 32 warps) share
// an SM's 65536, and the loads in flight are those of 32 warps.
constexpr int kOneTokenRegisters = 64;
constexpr int kLoadsPerGroup = kInt4Group / 32;         // uint4s of a row per group: 4
constexpr int kTrip = kOneTokenBlock * kOneTokenLoads;  // uint4s of a row the block loads a trip
static_assert(kOneTokenBlock % kLoadsPerGroup == 0, "a thread's loads of a row stay in its group");

// Block b computes rows n = kOneTokenRows b + r; thread t takes uint4s t, t + kOneTokenBlock, ...
// of every row (a warp's loads of a row are 512 consecutive bytes), with their group's scale,
// loaded beside them, applied to the uint4's 32 products. The nibbles become floats as in the
// readable kernel (a LOP3 and an FFMA each). x, 16 KB, is read through L1 by every block: its
// uint4s 4 c .. 4 c + 3 lie under W's uint4 c.
//
// Napkin math at N = K = 8192 on an H100 (notes, section 3): W and its scales are 34 MB, 10.7 us
// at 3.2 TB/s. In flight: each thread issues its 4 loads of W (64 bytes) and their scales before
// any arithmetic; at 1024 threads an SM that is 64 KB an SM when every thread waits, more than
// twice the 25 KB that 3.3 TB/s at a microsecond's latency asks of each of 132 SMs. The 2048
// blocks are 1.94 waves of 1056: a block that ends is replaced at once, and the last ones end
// with the reading. Issue: a nibble's LOP3 and FFMA and its product's
// FFMA, per word of 8 its XOR and carriers, x's 32 values turned into floats once for 4 rows, the
// loads and their addresses: about 4.2 instructions a weight in the trip's SASS (sm_90), 64 M
// weights at 132 SMs x 128 lanes x 1.98 GHz: 8 us, under the 10.7 us of reading.
__global__ void __launch_bounds__(kOneTokenBlock, 65536 / (kOneTokenRegisters * kOneTokenBlock))
    one_token_kernel(int N, int K, const __nv_bfloat16* __restrict__ x,
                     const std::uint8_t* __restrict__ W, const float* __restrict__ scales,
                     float* __restrict__ y) {
    __shared__ float warp_sums[kOneTokenBlock / 32][kOneTokenRows];

    const int first_row = blockIdx.x * kOneTokenRows;
    const int rows = N - first_row;  // the block's rows below N (fewer in the last block)
    const int loads = K / 32;        // uint4s of a row
    const int groups = K / kInt4Group;
    // The thread's first uint4 of the block's first row, its group's scale and x's uint4s under
    // it; row r's are `loads` uint4s and `groups` scales further, each trip kTrip uint4s on.
    // 64-bit offsets to the block: N * K / 2 bytes can pass 2^31 (those inside it are small).
    const uint4* w_trip =
        reinterpret_cast<const uint4*>(W + static_cast<std::size_t>(first_row) * K / 2) +
        threadIdx.x;
    const float* scale_trip =
        scales + static_cast<std::size_t>(first_row) * groups + threadIdx.x / kLoadsPerGroup;
    const uint4* x_trip = reinterpret_cast<const uint4*>(x) + 4 * threadIdx.x;  // 8 bf16 a uint4

    float acc[kOneTokenRows] = {};
    for (int left = loads - static_cast<int>(threadIdx.x); left > 0; left -= kTrip) {
        // The trip's loads, every one before any use; evict-first (__ldcs): W and its scales are
        // read once, and L1 keeps x. `left`: the row's uint4s from the thread's first of the trip
        // on. Rows past N load nothing (zeros) and store nothing.
        uint4 w[kOneTokenRows][kOneTokenLoads] = {};
        float scale[kOneTokenRows][kOneTokenLoads] = {};
#pragma unroll
        for (int r = 0; r < kOneTokenRows; ++r) {
            const int end = r < rows ? left : 0;
            course::load_batch<kOneTokenBlock, course::Cache::kLastUse>(w[r], w_trip + r * loads, 0,
                                                                        end);
#pragma unroll
            for (int j = 0; j < kOneTokenLoads; ++j)
                if (j * kOneTokenBlock < end)
                    scale[r][j] =
                        __ldcs(scale_trip + r * groups + j * kOneTokenBlock / kLoadsPerGroup);
        }
#pragma unroll
        for (int j = 0; j < kOneTokenLoads; ++j) {
            if (j * kOneTokenBlock >= left) break;  // the trip's last loads run past the row's end
            float dot[kOneTokenRows] = {};
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                float xs[8];
                readable::bf16x8_to_float(__ldg(x_trip + 4 * j * kOneTokenBlock + p), xs);
#pragma unroll
                for (int r = 0; r < kOneTokenRows; ++r) {
                    float weights[8];
                    readable::int4x8_to_float(w[r][j], p, weights);
#pragma unroll
                    for (int i = 0; i < 8; ++i) dot[r] += weights[i] * xs[i];
                }
            }
#pragma unroll
            for (int r = 0; r < kOneTokenRows; ++r) acc[r] += dot[r] * scale[r][j];
        }
        w_trip += kTrip;
        scale_trip += kTrip / kLoadsPerGroup;
        x_trip += 4 * kTrip;
    }

    // Each row's sum: a butterfly in each warp, then the warps' sums through shared memory.
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
        y[n] = total;
    }
}

void launch_one_token(int N, int K, const __nv_bfloat16* x, const std::uint8_t* W,
                      const float* scales, float* y) {
    one_token_kernel<<<course::ceil_div(N, kOneTokenRows), kOneTokenBlock>>>(N, K, x, W, scales, y);
    CUDA_CHECK_LAUNCH();
}

// ---- A batch of tokens: the products on the tensor cores ------------------------------------

constexpr int kRowsPerBlock = 16;  // an mma's A: 16 rows of W; all warps of a block share them
constexpr int kWarps = 8;          // split K: warp w takes groups w, w + 8, w + 16, ...
constexpr int kThreads = kWarps * 32;
// Each lane copies its next groups of W (2 uint4: rows g and g + 8) and their scales into a ring
// of kStages slots of shared memory with cp.async, kStages - 1 groups ahead of the one it
// multiplies: 96 bytes of W a lane in flight, in shared memory rather than registers (held in
// registers, ptxas issued the next group's loads only after this group's arithmetic).
constexpr int kStages = 4;
// 32 warps an SM at one to 8 tokens (at most 64 registers a thread; the rings 40 KB a block): at
// N = 8192, 512 blocks of 8 warps are one wave on 132 SMs, with 96 KB of W an SM in flight where
// 3.3 TB/s at a microsecond's latency needs some 25 KB. Half as many at 9 to 16 tokens, whose
// second tile of B and its accumulators need some 90 registers.
constexpr int kMinBlocksPerSm = 32 / kWarps;
static_assert(kLoadsPerGroup == 4, "a group is 4 uint4s of a row: lanes t = 0 .. 3 of an mma");

// The bf16 pair (136.0, 136.0): gemm_w4a16's. ((word >> 4 p) & 0x000F000F) ^ 0x43084308 is the
// pair 136 + q of nibbles p and p + 4 (bits 0x4300 are 128.0, and nibble ^ 8 is q + 8); minus
// 136, each is q exactly. The kernel takes it as an argument, not a literal: in a register it
// lets ptxas make the mask and the XOR one LOP3 (with two literals it emits two).
constexpr std::uint32_t kBf16Pair136 = 0x43084308u;

// Nibbles p (low half) and p + 4 (high half) of `word` as a bf16 pair; pair136 is kBf16Pair136.
__device__ std::uint32_t nibble_pair(unsigned word, int p, std::uint32_t pair136) {
    const std::uint32_t biased = ((word >> (4 * p)) & 0x000F000Fu) ^ pair136;
    const __nv_bfloat162 q = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                     *reinterpret_cast<const __nv_bfloat162*>(&pair136));
    return *reinterpret_cast<const std::uint32_t*>(&q);
}

// The order of k inside an mma. Lane (g, t) = (lane / 4, lane % 4) holds uint4 4 G + t of rows g
// and g + 8 (group G: 32 consecutive k each, word w being k 8 w .. 8 w + 7 of them, nibble i k
// 8 w + i). The k16 step s = 2 w + h takes word w's nibbles 2 h, 2 h + 1 and their partners
// 2 h + 4, 2 h + 5: A's pair at the mma's k (2t, 2t + 1) is nibbles (2 h, 2 h + 4), at (2t + 8,
// 2t + 9) nibbles (2 h + 1, 2 h + 5). B must give the same k: x's uint4 under word w is
// (x0 x1, x2 x3, x4 x5, x6 x7), so b[0] = (x_{2h}, x_{2h+4}) and b[1] = (x_{2h+1}, x_{2h+5}): the
// low halves, then the high halves, of its words h and h + 2.
__device__ void a_fragment(const uint4& row_g, const uint4& row_g8, int s, std::uint32_t pair136,
                           std::uint32_t (&a)[4]) {
    const unsigned lo[4] = {row_g.x, row_g.y, row_g.z, row_g.w};
    const unsigned hi[4] = {row_g8.x, row_g8.y, row_g8.z, row_g8.w};
    const int w = s / 2, p = 2 * (s % 2);
    a[0] = nibble_pair(lo[w], p, pair136);      // row g,     k (2t, 2t + 1)
    a[1] = nibble_pair(hi[w], p, pair136);      // row g + 8, k (2t, 2t + 1)
    a[2] = nibble_pair(lo[w], p + 1, pair136);  // row g,     k (2t + 8, 2t + 9)
    a[3] = nibble_pair(hi[w], p + 1, pair136);  // row g + 8, k (2t + 8, 2t + 9)
}

__device__ void b_fragment(const uint4& x8, int s, std::uint32_t& b0, std::uint32_t& b1) {
    const unsigned pairs[4] = {x8.x, x8.y, x8.z, x8.w};
    const int h = s % 2;
    const unsigned first = pairs[h], second = pairs[h + 2];
    b0 = __byte_perm(first, second, 0x5410);  // the low halves:  x_{2h},   x_{2h+4}
    b1 = __byte_perm(first, second, 0x7632);  // the high halves: x_{2h+1}, x_{2h+5}
}

// One group's products (32 k per lane, 128 per row) of the lane's rows g and g + 8 with 8 tokens'
// x (x8: the uint4s under the lane's words): its 8 k16 steps into the C fragment `sum`.
__device__ void group_products(const uint4& w_g, const uint4& w_g8, const uint4 (&x8)[4],
                               std::uint32_t pair136, float (&sum)[4]) {
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        std::uint32_t a[4], b0, b1;
        a_fragment(w_g, w_g8, s, pair136, a);
        b_fragment(x8[s / 2], s, b0, b1);
        tc::mma_bf16(sum, a, b0, b1);
    }
}

// Block b computes rows 16 b .. 16 b + 15 for every token; its warps split K by groups and each
// holds, per lane, the C fragments of its groups' sum: c[j][0..1] rows g, tokens 8 j + 2 t, + 1;
// c[j][2..3] row g + 8. A group's 8 k16 steps accumulate into a zeroed fragment, which is then
// scaled by the group's scale of each row and added: one FFMA per group and value.
template <int kTokenTiles>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm / kTokenTiles)
    gemv_w4a16_fast_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                           const std::uint8_t* __restrict__ W, const float* __restrict__ scales,
                           float* __restrict__ y, std::uint32_t pair136) {
    // A lane's slot s holds its uint4s of rows g and g + 8 and their scales for one group; only
    // the lane that copies a slot reads it, so the ring needs no barrier (cp.async's wait is the
    // lane's own). Lane-major, so that a warp's reads of one row are 512 consecutive bytes.
    __shared__ uint4 w_ring[kStages][kWarps][2][32];
    __shared__ float scale_ring[kStages][kWarps][2][32];
    __shared__ float partial[kWarps][kTokenTiles][32][4];  // each warp's fragments, for the sum

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int g = lane / 4, t = lane % 4;
    const int first_row = blockIdx.x * kRowsPerBlock;
    const int groups = K / kInt4Group;
    // Where lane (g, t) copies from next: its uint4 of rows g and g + 8 in the warp's next group,
    // and their scales. A row past N copies nothing (zeros; its sums are never stored) from row
    // N - 1 (an address in bounds all the same).
    bool has_row[2];
    const uint4* w_from[2];
    const float* scales_from[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        has_row[r] = first_row + g + 8 * r < N;
        const std::size_t n = min(first_row + g + 8 * r, N - 1);
        // 64-bit offsets: N * K / 2 bytes can pass 2^31.
        w_from[r] = reinterpret_cast<const uint4*>(W + n * K / 2) + kLoadsPerGroup * warp + t;
        scales_from[r] = scales + n * groups + warp;
    }
    // The lane's places in the ring: slot s, row r is w_slots[s * kSlotStride + 32 r] (and the
    // same in scale_slots).
    constexpr int kSlotStride = kWarps * 2 * 32;
    uint4* const w_slots = &w_ring[0][warp][0][lane];
    float* const scale_slots = &scale_ring[0][warp][0][lane];
    // The warp's next group into slot `slot`, then a commit: past the row's end an empty one, so
    // that the waits count the same in every step.
    int next = warp;
    const auto copy_next = [&](int slot) {
        if (next < groups) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                tc::cp_async_16(w_slots + slot * kSlotStride + 32 * r, w_from[r], has_row[r]);
                tc::cp_async_4(scale_slots + slot * kSlotStride + 32 * r, scales_from[r],
                               has_row[r]);
            }
        }
        tc::cp_async_commit();
        next += kWarps;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            w_from[r] += kLoadsPerGroup * kWarps;
            scales_from[r] += kWarps;
        }
    };
    // Lane (g, t) feeds B's column g: token 8 j + g (B's columns past M are zeros), whose uint4
    // 4 (4 G + t) + w of x is the lane's word w of group G.
    const uint4* x_at[kTokenTiles];
#pragma unroll
    for (int j = 0; j < kTokenTiles; ++j)
        x_at[j] = reinterpret_cast<const uint4*>(
                      x + static_cast<std::size_t>(min(8 * j + g, M - 1)) * K) +
                  4 * (kLoadsPerGroup * warp + t);

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) copy_next(s);
    float c[kTokenTiles][4] = {};
    for (int G = warp, slot = 0; G < groups; G += kWarps) {
        // The group kStages - 1 ahead into the slot the last step freed, then wait for this one.
        copy_next(slot == 0 ? kStages - 1 : slot - 1);
        tc::cp_async_wait<kStages - 1>();
        const uint4 w_g = w_slots[slot * kSlotStride], w_g8 = w_slots[slot * kSlotStride + 32];
        const float scale_g = scale_slots[slot * kSlotStride];
        const float scale_g8 = scale_slots[slot * kSlotStride + 32];
        slot = slot == kStages - 1 ? 0 : slot + 1;
#pragma unroll
        for (int j = 0; j < kTokenTiles; ++j) {
            uint4 x8[4];  // x under words 0 .. 3 of the lane's uint4s
#pragma unroll
            for (int v = 0; v < 4; ++v) x8[v] = 8 * j + g < M ? __ldg(x_at[j] + v) : uint4{};
            x_at[j] += 4 * kLoadsPerGroup * kWarps;
            float sum[4] = {};
            group_products(w_g, w_g8, x8, pair136, sum);
            c[j][0] += sum[0] * scale_g;
            c[j][1] += sum[1] * scale_g;
            c[j][2] += sum[2] * scale_g8;
            c[j][3] += sum[3] * scale_g8;
        }
    }

    // The warps' sums: one barrier, then a thread per value of the block's fragments.
#pragma unroll
    for (int j = 0; j < kTokenTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) partial[warp][j][lane][i] = c[j][i];
    __syncthreads();
    for (int v = threadIdx.x; v < kTokenTiles * 32 * 4; v += kThreads) {
        const int j = v / 128, from = v / 4 % 32, i = v % 4;
        const int n = first_row + from / 4 + 8 * (i / 2);
        const int m = 8 * j + 2 * (from % 4) + i % 2;
        if (n >= N || m >= M) continue;
        float total = 0.0f;
#pragma unroll
        for (int other = 0; other < kWarps; ++other) total += partial[other][j][from][i];
        y[static_cast<std::size_t>(m) * N + n] = total;
    }
}

template <int kTokenTiles>
void launch(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* W, const float* scales,
            float* y) {
    gemv_w4a16_fast_kernel<kTokenTiles>
        <<<course::ceil_div(N, kRowsPerBlock), kThreads>>>(M, N, K, x, W, scales, y, kBf16Pair136);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void gemv_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* W,
                const float* scales, float* y) {
    // One token: the kernel above, on every GPU (CUDA cores only). A batch: bf16 mma.sync needs
    // device code for sm_80 or newer (tensor_core.h compiles it to a trap below), so a build for
    // a T4 runs the readable kernel.
    if (M == 1)
        launch_one_token(N, K, x, W, scales, y);
    else if (course::compiled_arch(gemv_w4a16_fast_kernel<1>) < 80)
        readable::gemv_w4a16(M, N, K, x, W, scales, y);
    else if (M <= 8)
        launch<1>(M, N, K, x, W, scales, y);
    else
        launch<2>(M, N, K, x, W, scales, y);
}
