// 07_attention/flash_wgmma_backward: the backward pass of flash attention on Hopper's own path,
// the FlashAttention-3 design: a block owns 128 keys whose K and V tiles TMA copies once; a
// producer thread streams the query side (Q and dO tiles of 64 queries) through a ring of two
// stages; two consumer warpgroups, 64 keys each, run the five products of a tile with wgmma
// straight from shared memory and keep dK and dV in registers to the end.
//
// Teaches: flash_backward's algorithm (P recomputed from L, key tiles outer, dQ by atomics) on
// flash_wgmma's pipeline. S^T = K Q^T and dP^T = V dO^T are flash_wgmma's S = Q K^T with the roles
// swapped (the keys are wgmma's M here); P^T and dS^T come out of the accumulators in registers,
// go to shared memory in bf16 with st.shared, and wgmma reads them only after a proxy fence
// (fence.proxy.async) and a barrier of both consumers: as the A operand of dV += P^T dO and
// dK += dS^T Q (K-major, queries contiguous), and as the transposed (M-major) A operand of
// dQ = dS K: the consumers take turns at dQ, one summing both consumers' keys, and add it to dQ in
// global memory with atomics.
//
// The instructions come wrapped in hopper_attention.h (and module 05's hopper.h, which it
// includes), given like the contract.
//
// Run:    grader run 07/flash_wgmma_backward      Stuck: grader hint 07/flash_wgmma_backward
//         (a Hopper GPU: the exercise is built for sm_90a)
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

// D_i = dO_i . O_i, one warp per row (the backward's first step, as in flash_backward).
__global__ void row_dot_kernel(const __nv_bfloat16* O, const __nv_bfloat16* dO, float* delta,
                               long long rows, int D) {
    // TODO: warp w of the grid owns row w; a strided dot product (__bfloat162float) and a
    //       shuffle sum.
}

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
static_assert(kBlockM == kWgmmaM,
              "dS^T is square: as many k16 steps through its keys as through its queries");
static_assert(kScores == 32, "hopper::wgmma_m64n64k16 has 32 accumulators per thread");
static_assert(Smem<128>::kBytes <= 227 * 1024, "an H100 block has 227 KB of shared memory");
static_assert(kWarpgroupThreads * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536,
              "the register file holds the split");

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
    // TODO: shared memory as Smem<kD> lays it out, from the first 1024-byte boundary of
    //       extern __shared__ __align__(1024) unsigned char shared_raw[]. Three kinds of mbarrier
    //       (__shared__ std::uint64_t): kv_full ("the K and V tiles have landed"), full[kStages]
    //       ("the stage's Q and dO have landed") and empty[kStages] ("every consumer thread is
    //       done with the stage").
    // TODO: this block's keys (n0 = blockIdx.x * kBlockN), its head (blockIdx.y), and the query
    //       tiles that see its keys: all, or (causal) from the tile holding query n0 on.
    // TODO: thread 0 initializes the barriers (kv_full and full: 1 arrival, the producer's;
    //       empty: one per consumer thread), hopper::fence_barrier_init(); a __syncthreads().
    // TODO: warpgroup 0 is the producer (hopper::set_registers_decrease<kProducerRegisters>()),
    //       thread 0 alone: the K and V tiles once (2 * Smem<kD>::kKVBytes announced to kv_full,
    //       one hopper::tma_load_2d per 64 columns of each), then per query tile: wait until the
    //       consumers emptied its stage (the parity of the previous pass), announce
    //       2 * Smem<kD>::kQBytes to full[stage], copy Q's and dO's chunks. The tensor maps' rows
    //       are head * T + the tile's first row.
    // TODO: warpgroups 1 and 2 are the consumers (hopper::set_registers_increase<
    //       kConsumerRegisters>()), consumer c owning keys n0 + 64 c .. n0 + 64 c + 63 (rows
    //       64 c .. of the K and V tiles); c read with __shfl_sync(~0u, threadIdx.x / 128, 0) - 1,
    //       so that ptxas knows a warp agrees on it (the consumers branch on it around wgmma);
    //       dK and dV accumulators (kD / 2 floats each) zeroed. Wait for kv_full (parity 0), then
    //       per query tile i (from 0):
    //       - load L and D of the tile's 64 queries, two of each per lane (q0 + lane and
    //         q0 + 32 + lane, clamped to T - 1), before the products: their latency hides under
    //         them.
    //       - wait for full[stage]; S^T = K Q^T and dP^T = V dO^T in one wgmma group:
    //         hopper::fence_accumulators on both, hopper::wgmma_fence(), one
    //         hopper::wgmma_m64n64k16<0> per k16 step of D for each (both operands K-major:
    //         course::wgmma_descriptor_k_major_128b, 32 bytes per step, the next 64 d a chunk
    //         further), hopper::wgmma_commit(), hopper::wgmma_wait<0>(), fence both again.
    //       - P^T = exp2f(S^T * scale * log2(e) - L_query * log2(e)), dS^T = P^T (dP^T - D_query),
    //         0 where the query or the key is past T or (causal) the key is after the query;
    //         accumulator 4 n + i is key row g + 8 (i / 2) of the warp's 16, query 8 n + 2 t + i %
    //         2 (course::wgmma_d_element): its L and D by __shfl_sync from the lane that loaded
    //         them. No loads and no branches in this loop.
    //       - P^T (bf16 pairs) to this consumer's P^T tile, dS^T to its dS^T tile of buffer i % 2
    //         (rows are keys, course::swizzled_bf16_offset); hopper::fence_proxy_async(), then
    //         hopper::named_barrier_sync(1, 256): both consumers, since dQ reads both dS^T tiles.
    //       - one wgmma group: dV += P^T dO and dK += dS^T Q (A K-major: P^T or dS^T, 32 bytes per
    //         step; B N-major: the stage's dO or Q, wgmma_descriptor_mn_major_128b(tile + 16 * 128
    //         * step, 64 * 128)); hopper::wgmma_m64n64k16 or wgmma_m64n128k16; commit.
    //       - consumer i % 2 alone: a second group, dQ = dS K over the block's 128 keys: for each
    //         consumer's dS^T tile (A read M-major: the template's kTransposeA = 1,
    //         wgmma_descriptor_mn_major_128b(ds + 16 * 128 * step, 64 * 128)) times its 64 rows of
    //         the K tile (B N-major, chunks 128 * 128 bytes apart); commit.
    //       - wait<0>, fence the accumulators; release the stage (hopper::mbarrier_arrive on
    //         empty[stage]); consumer i % 2: atomicAdd scale * dQ (float2 pairs) into global
    //         memory for the queries < T.
    // TODO: write scale * dK and dV for the consumer's keys < T.
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
    // TODO: the tensor maps of Q, K, V and dO with hopper::tensor_map: each tensor one matrix of
    //       heads_total * T rows of kD, copied in boxes of kChunkCols columns by kBlockN rows (K,
    //       V) or kBlockM rows (Q, dO). Then D_i in scratch (cudaMallocAsync, row_dot_kernel),
    //       dQ zeroed (cudaMemsetAsync), a grid of ceil_div(T, kBlockN) x heads_total blocks of
    //       kThreads threads with Smem<kD>::kBytes of dynamic shared memory, the maps passed by
    //       value, CUDA_CHECK_LAUNCH(); cudaFreeAsync the scratch.
    COURSE_TODO("flash_wgmma_backward: write the kernels and launch them, then delete this line");
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
