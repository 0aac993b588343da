// 07_attention/flash_wgmma_backward: the backward pass of flash attention on Hopper's own path,
// the FlashAttention-3 design: a block owns 128 keys whose K and V tiles TMA copies once; a
// producer thread streams the query side (Q and dO tiles of 64 queries) through a ring of two
// stages; two consumer warpgroups, 64 keys each, run the five products of a tile with wgmma
// straight from shared memory and keep dK and dV in registers to the end. Reference solution.
//
// Teaches: flash_backward's algorithm (P recomputed from L, key tiles outer, dQ by atomics) on
// flash_wgmma's pipeline. S^T = K Q^T and dP^T = V dO^T are flash_wgmma's S = Q K^T with the roles
// swapped (the keys are wgmma's M here); P^T and dS^T come out of the accumulators in registers,
// go to shared memory in bf16 with st.shared, and wgmma reads them only after a proxy fence
// (fence.proxy.async) and a barrier of both consumers: as the A operand of dV += P^T dO and
// dK += dS^T Q (K-major, queries contiguous), and as the transposed (M-major) A operand of
// dQ = dS K: the consumers take turns at dQ, one summing both consumers' keys, and add it to dQ in
// global memory with atomics. Why so (a first version ran at a fifth of cuDNN's speed): notes
// section 8 and dev/tuning/07_attention.md.
//
// The instructions come wrapped in hopper_attention.h (and module 05's hopper.h, which it
// includes), given like the contract.
//
// Run:  grader run 07/flash_wgmma_backward --solutions    (a Hopper GPU: built for sm_90a)
// Contract: flash_wgmma_backward.h   Instructions: hopper_attention.h
// Notes:    notes/07_attention.md
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "flash_wgmma_backward.h"
#include "hopper_attention.h"

namespace {

constexpr int kBlockN = 128;   // keys per block: 64 per consumer warpgroup (the M of its wgmma)
constexpr int kBlockM = 64;    // queries per Q/dO tile: the n of S^T's wgmma, the k of dV's
constexpr int kStages = 2;     // Q/dO stages in the ring
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kWarpgroupThreads = 128;
constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // the producer warpgroup first
constexpr int kWgmmaM = 64, kWgmmaK = 16;                       // wgmma.m64nNk16
constexpr int kChunkCols = 64;  // bf16 per 128-byte swizzled row: a tile is stored in such chunks
constexpr int kScores = kWgmmaM * kBlockM / kWarpgroupThreads;  // S^T's accumulators per thread
// k16 steps through a consumer's P^T or dS^T tile: its 64 queries (dV, dK) or its 64 keys (dQ).
constexpr int kAStepsPerTile = kBlockM / kWgmmaK;
// Registers per thread after the split (setmaxnreg), as in flash_wgmma: the producer warpgroup
// keeps 24, each consumer thread gets 240 (dK's and dV's accumulators, up to 64 each, all along;
// S^T's and dP^T's 32 each, then dQ's up to 64; the rest).
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

// Shared memory of one block, in bytes from a 1024-byte boundary. Every tile is stored as chunks
// of 64 columns (128-byte rows, TMA's 128-byte swizzle): the K and V tiles (kBlockN rows), kStages
// Q and dO tiles (kBlockM rows), per consumer a P^T tile and two dS^T tiles (its 64 keys x kBlockM
// queries: one chunk each). dS^T alternates between its two buffers from one query tile to the
// next: the consumer that computes a tile's dQ reads both consumers' dS^T tiles, and the other
// consumer may already be writing the next tile's meanwhile.
template <int kD>
struct Smem {
    static constexpr int kChunks = kD / kChunkCols;
    static constexpr int kKVBytes = kBlockN * kD * 2;  // one K or V tile
    static constexpr int kQBytes = kBlockM * kD * 2;   // one Q or dO tile
    static constexpr int kPBytes = kWgmmaM * kBlockM * 2;
    static constexpr int kK = 0;
    static constexpr int kV = kK + kKVBytes;
    static constexpr int kQ = kV + kKVBytes;               // stage s at kQ + s * 2 * kQBytes
    static constexpr int kP = kQ + kStages * 2 * kQBytes;  // consumer c's P^T at kP + c * kPBytes
    // Buffer b of consumer c's dS^T at kDS + (b * kConsumers + c) * kPBytes.
    static constexpr int kDS = kP + kConsumers * kPBytes;
    static constexpr int kBytes = kDS + 2 * kConsumers * kPBytes + 1024;  // + room to align to 1 KB
};

static_assert(kBlockN == kConsumers * kWgmmaM, "one 64-key wgmma row block per consumer");
static_assert(kBlockM == kChunkCols, "a P^T or dS^T row (kBlockM queries) is one swizzled row");
static_assert(kChunkCols * 2 == course::kSwizzleRowBytes, "a chunk's row is one swizzled row");
static_assert(Smem<64>::kChunks == 1 && Smem<128>::kChunks == 2, "D = 64 or 128: whole chunks");
static_assert(kBlockM <= 256 && kBlockN <= 256, "a TMA box side is at most 256 elements");
static_assert(kBlockM % kWgmmaK == 0, "whole k16 steps through a Q/dO tile");
static_assert(kAStepsPerTile * kWgmmaK == kBlockM && kBlockM == kWgmmaM,
              "dS^T is square: as many k16 steps through its keys as through its queries");
static_assert(kScores == 32, "hopper::wgmma_m64n64k16 has 32 accumulators per thread");
static_assert(Smem<128>::kBytes <= 227 * 1024, "an H100 block has 227 KB of shared memory");
static_assert(kWarpgroupThreads * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536,
              "the register file holds the split");

// D_i = dO_i . O_i, one warp per row (the backward's first step, as in flash_backward).
__global__ void row_dot_kernel(const __nv_bfloat16* O, const __nv_bfloat16* dO, float* delta,
                               long long rows, int D) {
    const long long row = static_cast<long long>(blockIdx.x) * 8 + threadIdx.x / 32;
    if (row >= rows) return;
    float sum = 0.0f;
    for (int d = threadIdx.x % 32; d < D; d += 32)
        sum += __bfloat162float(O[row * D + d]) * __bfloat162float(dO[row * D + d]);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) delta[row] = sum;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the Hopper instructions exist in sm_90a code only

// acc = A B^T for a consumer's 64 keys and the tile's kBlockM queries: S^T = K Q^T (A = K rows,
// B = the Q tile) or dP^T = V dO^T (A = V rows, B = the dO tile). Both operands K-major (d
// contiguous): flash_wgmma's S = Q K^T with the keys as M; the k16 steps 32 bytes apart in a
// 128-byte row, the next 64 d a chunk further. Issued only: the caller commits and waits.
template <int kD>
__device__ void issue_rows_times_rows(float (&acc)[kScores], std::uint32_t a_rows,
                                      std::uint32_t b_tile) {
#pragma unroll
    for (int kk = 0; kk < kD / kWgmmaK; ++kk) {
        const int chunk = kk / (kChunkCols / kWgmmaK), step = kk % (kChunkCols / kWgmmaK);
        hopper::wgmma_m64n64k16<0>(
            acc, course::wgmma_descriptor_k_major_128b(a_rows + chunk * kBlockN * 128 + 32 * step),
            course::wgmma_descriptor_k_major_128b(b_tile + chunk * kBlockM * 128 + 32 * step),
            kk > 0);
    }
}

// acc (64 x kD) (+)= A X for A a consumer's 64 x 64 tile (P^T or dS^T: rows are keys, 128 bytes of
// queries each) and X a tile of rows of kD (the Q or dO tile, or the consumer's rows of the K
// tile) read N-major (d contiguous, a transposed B) as V in flash_wgmma: a k16 step is 16 rows of
// X, the next 64 d `chunk_bytes` further. A is read K-major (kTransposeA 0: A = P^T or dS^T, the
// k16 step 32 bytes into its rows) or M-major (1: A = dS, the k16 step 16 rows of dS^T further;
// wgmma_gemm's fast reference reads its transposed operands so). Issued only.
template <int kD, int kTransposeA>
__device__ void issue_tile_times_rows(float (&acc)[kD / 2], std::uint32_t a_tile,
                                      std::uint32_t x_rows, std::uint32_t chunk_bytes,
                                      bool accumulate) {
#pragma unroll
    for (int kk = 0; kk < kAStepsPerTile; ++kk) {
        const std::uint64_t a =
            kTransposeA
                ? course::wgmma_descriptor_mn_major_128b(a_tile + kk * kWgmmaK * 128, kWgmmaM * 128)
                : course::wgmma_descriptor_k_major_128b(a_tile + 32 * kk);
        const std::uint64_t b =
            course::wgmma_descriptor_mn_major_128b(x_rows + kk * kWgmmaK * 128, chunk_bytes);
        if constexpr (kD == 64)
            hopper::wgmma_m64n64k16<1, kTransposeA>(acc, a, b, accumulate || kk > 0);
        else
            hopper::wgmma_m64n128k16<1, kTransposeA>(acc, a, b, accumulate || kk > 0);
    }
}

#endif

template <int kD>
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_backward_kernel(const __grid_constant__ CUtensorMap q_map,
                                const __grid_constant__ CUtensorMap k_map,
                                const __grid_constant__ CUtensorMap v_map,
                                const __grid_constant__ CUtensorMap do_map,
                                const float* __restrict__ L, const float* __restrict__ delta,
                                float* __restrict__ dQ, float* __restrict__ dK,
                                float* __restrict__ dV, int T, float scale, bool causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using S = Smem<kD>;
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t kv_full;         // phase 0 done: the K and V tiles have landed
    __shared__ std::uint64_t full[kStages];   // phase done: the stage's Q and dO have landed
    __shared__ std::uint64_t empty[kStages];  // phase done: every consumer is done with it
    // TMA's 128-byte swizzle and the descriptors' base offset 0 need tiles on 1024 bytes.
    unsigned char* const smem =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    const auto q_tile = [&](int stage) { return smem + S::kQ + stage * 2 * S::kQBytes; };
    const auto do_tile = [&](int stage) { return q_tile(stage) + S::kQBytes; };

    const int n0 = blockIdx.x * kBlockN;  // this block's keys: n0 .. n0 + kBlockN - 1
    const int head = blockIdx.y;
    // Query tiles that see these keys: all, or (causal) from the one holding the first key on.
    // (Causal, the first blocks visit the most tiles: the grid's order already runs them first.)
    const int first_tile = causal ? n0 / kBlockM : 0;
    const int query_tiles = course::ceil_div(T, kBlockM);
    const int warpgroup = threadIdx.x / kWarpgroupThreads;

    if (threadIdx.x == 0) {
        hopper::mbarrier_init(&kv_full, 1);
        for (int s = 0; s < kStages; ++s) {
            // full: the producer's arrive (and the copies' bytes); empty: every consumer thread's.
            hopper::mbarrier_init(&full[s], 1);
            hopper::mbarrier_init(&empty[s], kConsumers * kWarpgroupThreads);
        }
        hopper::fence_barrier_init();
    }
    __syncthreads();  // the barriers exist before anyone uses them

    if (warpgroup == 0) {
        // The producer warpgroup: its registers go to the consumers, and one thread issues every
        // copy. The tensor maps see the [heads][T] rows as one matrix: a box that runs past T
        // holds the next head's rows (masked: P and dS are 0 there) or, past the last head,
        // zeros.
        hopper::set_registers_decrease<kProducerRegisters>();
        if (threadIdx.x == 0) {
            const int row = head * T;
            hopper::mbarrier_arrive_expect_tx(&kv_full, 2 * S::kKVBytes);
            for (int c = 0; c < S::kChunks; ++c) {
                hopper::tma_load_2d(smem + S::kK + c * kBlockN * 128, &k_map, c * kChunkCols,
                                    row + n0, &kv_full);
                hopper::tma_load_2d(smem + S::kV + c * kBlockN * 128, &v_map, c * kChunkCols,
                                    row + n0, &kv_full);
            }
            for (int tile = first_tile; tile < query_tiles; ++tile) {
                const int i = tile - first_tile, stage = i % kStages;
                // Pass p through the ring waits for the consumers' release of pass p - 1: parity
                // (p % 2) ^ 1, which in the first pass is the phase "before the first", complete.
                const int pass_parity = i / kStages % 2;
                hopper::mbarrier_wait(&empty[stage], pass_parity ^ 1);
                hopper::mbarrier_arrive_expect_tx(&full[stage], 2 * S::kQBytes);
                for (int c = 0; c < S::kChunks; ++c) {
                    hopper::tma_load_2d(q_tile(stage) + c * kBlockM * 128, &q_map, c * kChunkCols,
                                        row + tile * kBlockM, &full[stage]);
                    hopper::tma_load_2d(do_tile(stage) + c * kBlockM * 128, &do_map, c * kChunkCols,
                                        row + tile * kBlockM, &full[stage]);
                }
            }
        }
        return;
    }

    hopper::set_registers_increase<kConsumerRegisters>();
    // Consumer c owns keys n0 + 64 c .. n0 + 64 c + 63: rows 64 c .. of the K and V tiles. In
    // wgmma's accumulator layout (course::wgmma_d_element) warp w of the warpgroup holds rows
    // 16 w .. 16 w + 15: accumulator 4 n + i is row g (i = 0, 1) or g + 8 (i = 2, 3), column
    // 8 n + 2 t + i % 2. For S^T and dP^T a row is a key and a column a query; for dK and dV a row
    // is a key and a column a d; for dQ a row is a query and a column a d.
    // Read from lane 0, so that ptxas sees the value is the same in every lane: the consumers
    // branch on it around wgmma (whose turn at dQ), which a warpgroup must take as one. (With
    // threadIdx.x / 128 itself, ptxas assumes the branch may diverge and serializes every wgmma,
    // warning C7520; CUTLASS reads its warpgroup index so too.)
    const int consumer = __shfl_sync(0xffffffffu, warpgroup, 0) - 1;
    const int thread = threadIdx.x % kWarpgroupThreads;
    const int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
    const int key0 = n0 + consumer * kWgmmaM;  // this consumer's first key
    const std::uint32_t k_address = hopper::shared_address(smem + S::kK);
    const std::uint32_t k_rows = k_address + consumer * kWgmmaM * course::kSwizzleRowBytes;
    const std::uint32_t v_rows =
        hopper::shared_address(smem + S::kV) + consumer * kWgmmaM * course::kSwizzleRowBytes;
    auto* p_tile = reinterpret_cast<__nv_bfloat16*>(smem + S::kP + consumer * S::kPBytes);
    const std::uint32_t p_address = hopper::shared_address(p_tile);
    const auto ds_tile = [&](int buffer, int c) {  // consumer c's dS^T in buffer `buffer`
        return smem + S::kDS + (buffer * kConsumers + c) * S::kPBytes;
    };
    L += static_cast<long long>(head) * T;
    delta += static_cast<long long>(head) * T;
    dQ += static_cast<long long>(head) * T * kD;
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale_log2 = scale * kLog2e;  // exp(scale * x - L) = exp2(scale_log2 * x - L log2e)

    float dv[kD / 2] = {}, dk[kD / 2] = {};  // this consumer's 64 keys x kD, kept to the end

    hopper::mbarrier_wait(&kv_full, 0);
    for (int tile = first_tile; tile < query_tiles; ++tile) {
        const int i = tile - first_tile, stage = i % kStages, q0 = tile * kBlockM;
        const int buffer = i % 2;                         // this tile's dS^T buffers
        const bool dq_here = i % kConsumers == consumer;  // whose turn at dQ
        // L (times log2 e) and D of the tile's 64 queries, two of each per lane (queries
        // q0 + lane and q0 + 32 + lane): loaded before the products so that their latency hides
        // under them, and unconditionally (a query past T reads row T - 1's, masked below), so
        // that the elementwise code is straight-line. A thread's 16 queries come from the lanes
        // that loaded them by shuffles: 4 registers live across the products instead of 32.
        float lane_l[2], lane_d[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int query = min(q0 + 32 * h + lane, T - 1);
            lane_l[h] = L[query] * kLog2e;
            lane_d[h] = delta[query];
        }
        hopper::mbarrier_wait(&full[stage], i / kStages % 2);  // Q and dO have landed
        const std::uint32_t q_address = hopper::shared_address(q_tile(stage));
        const std::uint32_t do_address = hopper::shared_address(do_tile(stage));

        // S^T = K Q^T and dP^T = V dO^T, one wgmma group.
        float s[kScores], dp[kScores];
        hopper::fence_accumulators(s);
        hopper::fence_accumulators(dp);
        hopper::wgmma_fence();
        issue_rows_times_rows<kD>(s, k_rows, q_address);
        issue_rows_times_rows<kD>(dp, v_rows, do_address);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_accumulators(s);
        hopper::fence_accumulators(dp);

        // P^T = exp(scale S^T - L) and dS^T = P^T (dP^T - D) for the visible pairs, 0 elsewhere:
        // a query past T, a key past T (the K/V boxes hold the next head's rows there: their dS
        // would reach dQ) or, causal, a key after the query. Only tiles that reach past T or
        // across the diagonal need the test.
        const bool edge =
            q0 + kBlockM > T || key0 + kWgmmaM > T || (causal && key0 + kWgmmaM - 1 > q0);
#pragma unroll
        for (int r = 0; r < kScores; ++r) {
            const int key = key0 + warp * 16 + g + 8 * (r % 4 / 2);
            const int column = 8 * (r / 4) + 2 * t + r % 2, query = q0 + column;
            const float l_i = __shfl_sync(0xffffffffu, lane_l[column / 32], column % 32);
            const float d_i = __shfl_sync(0xffffffffu, lane_d[column / 32], column % 32);
            const bool visible = !edge || (query < T && key < T && !(causal && key > query));
            const float p = exp2f(fmaf(s[r], scale_log2, -l_i));  // for all: no branches
            s[r] = visible ? p : 0.0f;
            dp[r] = visible ? p * (dp[r] - d_i) : 0.0f;
        }

        // P^T and dS^T to this consumer's tiles in bf16, laid out as TMA lays out a K-major tile
        // (128-byte rows of 64 queries, swizzled): a row is a key. Each store is a pair of
        // queries; the 8 rows of a store's lanes land in 8 different 16-byte chunks.
        auto* ds = reinterpret_cast<__nv_bfloat16*>(ds_tile(buffer, consumer));
#pragma unroll
        for (int n = 0; n < kBlockM / 8; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int offset =
                    course::swizzled_bf16_offset(warp * 16 + g + 8 * h, 8 * n + 2 * t);
                *reinterpret_cast<__nv_bfloat162*>(p_tile + offset) =
                    __floats2bfloat162_rn(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]);
                *reinterpret_cast<__nv_bfloat162*>(ds + offset) =
                    __floats2bfloat162_rn(dp[4 * n + 2 * h], dp[4 * n + 2 * h + 1]);
            }
        // wgmma reads shared memory through the async proxy: this thread's stores must be made
        // visible to it, then every warp of both consumers must be done storing (the consumer at
        // dQ reads the other's dS^T too). The other buffer is free: both consumers passed this
        // barrier only after waiting for the previous tile's products.
        hopper::fence_proxy_async();
        hopper::named_barrier_sync(1, kConsumers * kWarpgroupThreads);

        // dV += P^T dO and dK += dS^T Q (A K-major: a k16 step is 16 queries, 32 bytes into the
        // rows; B the stage's tile read N-major), one wgmma group.
        hopper::fence_accumulators(dv);
        hopper::fence_accumulators(dk);
        hopper::wgmma_fence();
        const std::uint32_t ds_address = hopper::shared_address(ds);
        issue_tile_times_rows<kD, 0>(dv, p_address, do_address, kBlockM * 128, true);
        issue_tile_times_rows<kD, 0>(dk, ds_address, q_address, kBlockM * 128, true);
        hopper::wgmma_commit();
        // Waiting (below) before the loop goes on keeps the accumulators out of the loop's
        // register moves while wgmma writes them (ptxas would otherwise serialize every wgmma of
        // the kernel); the other consumer's products fill the SM meanwhile. Then the stage's Q
        // and dO, and the P^T tile, are free again.
        if (!dq_here) {  // the other consumer's turn at dQ
            hopper::wgmma_wait<0>();
            hopper::fence_accumulators(dv);
            hopper::fence_accumulators(dk);
            hopper::mbarrier_arrive(&empty[stage]);
            continue;
        }
        // dQ = dS K over the block's 128 keys, at one consumer of the two (taking turns), in a
        // second group: per consumer c, A its dS^T tile read M-major (a k16 step is 16 keys, 16
        // rows) and B its 64 rows of the K tile. Summing both consumers' keys in the
        // accumulators, not in global memory, halves dQ's atomics: each dQ element goes out once
        // per block and query tile, not twice. (The group of dV and dK is closed first: a group
        // that only one side of the branch extends makes ptxas inject instructions, C7519.)
        float dq[kD / 2];
        hopper::fence_accumulators(dq);
        hopper::wgmma_fence();
#pragma unroll
        for (int c = 0; c < kConsumers; ++c)
            issue_tile_times_rows<kD, 1>(dq, hopper::shared_address(ds_tile(buffer, c)),
                                         k_address + c * kWgmmaM * course::kSwizzleRowBytes,
                                         kBlockN * 128, c > 0);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_accumulators(dv);
        hopper::fence_accumulators(dk);
        hopper::fence_accumulators(dq);
        hopper::mbarrier_arrive(&empty[stage]);

        // The blocks of the other key tiles add to the same dQ rows at the same time: atomics
        // (float2: two neighbouring d in one instruction, sm_90), into a dQ zeroed before the
        // kernel.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int query = q0 + warp * 16 + g + 8 * h;
            if (query >= T) continue;
#pragma unroll
            for (int n = 0; n < kD / 8; ++n)
                atomicAdd(reinterpret_cast<float2*>(dQ + static_cast<long long>(query) * kD +
                                                    8 * n + 2 * t),
                          make_float2(scale * dq[4 * n + 2 * h], scale * dq[4 * n + 2 * h + 1]));
        }
    }

    // dK = scale * dS^T Q and dV for this consumer's keys below T.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = key0 + warp * 16 + g + 8 * h;
        if (key >= T) continue;
        const long long at = (static_cast<long long>(head) * T + key) * kD;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            *reinterpret_cast<float2*>(dK + at + 8 * n + 2 * t) =
                make_float2(scale * dk[4 * n + 2 * h], scale * dk[4 * n + 2 * h + 1]);
            *reinterpret_cast<float2*>(dV + at + 8 * n + 2 * t) =
                make_float2(dv[4 * n + 2 * h], dv[4 * n + 2 * h + 1]);
        }
    }
#endif
}

template <int kD>
void launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
            const __nv_bfloat16* O, const __nv_bfloat16* dO, const float* L, float* dQ, float* dK,
            float* dV, int heads_total, int T, float scale, bool causal) {
    const auto kernel = flash_wgmma_backward_kernel<kD>;
    // sm_90a code runs on compute capability 9.0 only, and only a build for it has the body.
    int device = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major != 9 || course::compiled_arch(kernel) != 90)
        throw std::runtime_error(
            "flash_wgmma_backward: needs a Hopper GPU and device code for sm_90a");
    // Above 48 KB a block's shared memory must be asked for (once per process is enough).
    static const std::size_t available = course::opt_in_shared_bytes(kernel);
    if (available < static_cast<std::size_t>(Smem<kD>::kBytes))
        throw std::runtime_error("flash_wgmma_backward: needs " + std::to_string(Smem<kD>::kBytes) +
                                 " bytes of shared memory per block; " + std::to_string(available) +
                                 " here");
    // One matrix of heads_total * T rows of kD per tensor, copied in boxes of 64 columns: K and V
    // kBlockN rows at a time, Q and dO kBlockM. hopper::tensor_map takes the tensor-core
    // exercises' element (course/tensor_element.h): the cast changes only the pointer's type.
    const int rows = heads_total * T;
    const auto map = [rows](const __nv_bfloat16* tensor, int box_rows) {
        return hopper::tensor_map(reinterpret_cast<const course::TensorElement*>(tensor), rows, kD,
                                  box_rows, kChunkCols);
    };
    const CUtensorMap q_map = map(Q, kBlockM), do_map = map(dO, kBlockM);
    const CUtensorMap k_map = map(K, kBlockN), v_map = map(V, kBlockN);

    // D_i = dO_i . O_i, in stream-ordered scratch freed after the main kernel; dQ, a sum that
    // many blocks add to, zeroed.
    float* delta = nullptr;
    CUDA_CHECK(cudaMallocAsync(&delta, rows * sizeof(float), 0));
    row_dot_kernel<<<course::ceil_div(rows, 8), 256>>>(O, dO, delta, rows, kD);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(dQ, 0, static_cast<std::size_t>(rows) * kD * sizeof(float)));

    const dim3 grid(course::ceil_div(T, kBlockN), heads_total);
    kernel<<<grid, kThreads, Smem<kD>::kBytes>>>(q_map, k_map, v_map, do_map, L, delta, dQ, dK, dV,
                                                 T, scale, causal);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(delta, 0));
}

}  // namespace

void flash_wgmma_backward(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                          const __nv_bfloat16* O, const __nv_bfloat16* dO, const float* L,
                          float* dQ, float* dK, float* dV, int batch, int heads, int T, int D,
                          float scale, bool causal) {
    if (D == 64)
        launch<64>(Q, K, V, O, dO, L, dQ, dK, dV, batch * heads, T, scale, causal);
    else
        launch<128>(Q, K, V, O, dO, L, dQ, dK, dV, batch * heads, T, scale, causal);
}
