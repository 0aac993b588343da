// 07_attention/flash_wgmma: flash attention on Hopper's own path, the FlashAttention-3 design: the
// copy engine (TMA) brings K/V tiles into a ring of shared stages and signals mbarriers, one
// producer thread issues every copy, two consumer warpgroups compute S = Q K^T and O += P V with
// wgmma straight from shared memory and run the online softmax on the accumulators in registers.
//
// Teaches: module 05's wgmma_gemm pipeline (tensor maps, full/empty mbarriers and their phase
// parity, warp specialization with setmaxnreg) carried into attention: a Q tile loaded once, K/V
// tiles streamed; S in wgmma's accumulator layout, which the softmax reads as flash_tc's mma.sync
// fragments (4 lanes per row); P written back to shared memory by the threads (st.shared), which
// wgmma reads only after a proxy fence (fence.proxy.async) and a barrier of the warpgroup; V read
// N-major (transposed B) with its own descriptor.
// The instructions come wrapped in hopper_attention.h (and module 05's hopper.h, which it
// includes), given like the contract.
//
// Run:  grader run 07/flash_wgmma          Stuck:   grader hint 07/flash_wgmma   (a Hopper GPU)
// Contract: flash_wgmma.h   Instructions: hopper_attention.h   Notes: notes/07_attention.md
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "flash_wgmma.h"
#include "hopper_attention.h"

namespace {

constexpr int kBlockM = 128;   // query rows per block: 64 per consumer warpgroup
constexpr int kBlockN = 128;   // keys per K/V tile: the n of S's wgmma
constexpr int kStages = 2;     // K/V stages in the ring
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kWarpgroupThreads = 128;
constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;  // the producer warpgroup first
constexpr int kWgmmaM = 64, kWgmmaK = 16;                       // wgmma.m64nNk16
constexpr int kChunkCols = 64;  // bf16 per 128-byte swizzled row: a tile is stored in such chunks
constexpr int kScores = kWgmmaM * kBlockN / kWarpgroupThreads;  // S's accumulators per thread
// Registers per thread after the split (setmaxnreg), as in module 05's wgmma_gemm: the producer
// warpgroup keeps 24, each consumer thread gets 240 (S's 64 accumulators, O's up to 64, the rest).
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

// Shared memory of one block, in bytes from a 1024-byte boundary. Every tile is stored as chunks
// of 64 columns (128-byte rows, TMA's 128-byte swizzle): the Q tile (kBlockM rows), kStages K and
// V tiles (kBlockN rows), and one P tile (64 rows x kBlockN keys) per consumer.
template <int kD>
struct Smem {
    static constexpr int kChunks = kD / kChunkCols;
    static constexpr int kQBytes = kBlockM * kD * 2;
    static constexpr int kKVBytes = kBlockN * kD * 2;  // one K or V tile
    static constexpr int kPBytes = kWgmmaM * kBlockN * 2;
    static constexpr int kQ = 0;
    static constexpr int kK = kQ + kQBytes;                 // stage s at kK + s * 2 * kKVBytes
    static constexpr int kP = kK + kStages * 2 * kKVBytes;  // consumer c at kP + c * kPBytes
    static constexpr int kBytes = kP + kConsumers * kPBytes + 1024;  // + room to align to 1 KB
};

static_assert(kBlockM == kConsumers * kWgmmaM, "one 64-row wgmma per consumer warpgroup");
static_assert(kChunkCols * 2 == course::kSwizzleRowBytes, "a chunk's row is one swizzled row");
static_assert(Smem<64>::kChunks == 1 && Smem<128>::kChunks == 2, "D = 64 or 128: whole chunks");
static_assert(kBlockM <= 256 && kBlockN <= 256, "a TMA box side is at most 256 elements");
static_assert(kBlockN % kChunkCols == 0 && kBlockN % kWgmmaK == 0, "whole chunks, whole k16 steps");
static_assert(kScores == 64, "hopper::wgmma_m64n128k16 has 64 accumulators per thread");
static_assert(Smem<128>::kBytes <= 227 * 1024, "an H100 block has 227 KB of shared memory");
static_assert(kWarpgroupThreads * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536,
              "the register file holds the split");

template <int kD>
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_kernel(const __grid_constant__ CUtensorMap q_map,
                       const __grid_constant__ CUtensorMap k_map,
                       const __grid_constant__ CUtensorMap v_map, __nv_bfloat16* __restrict__ O,
                       float* __restrict__ L, int T, float scale, bool causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // TODO: shared memory as Smem<kD> lays it out, from the first 1024-byte boundary of
    //       extern __shared__ __align__(1024) unsigned char shared_raw[] (TMA's 128-byte swizzle
    //       and the descriptors need it). Three kinds of mbarrier (__shared__ std::uint64_t):
    //       q_full ("the Q tile has landed"), full[kStages] ("the stage's K and V have landed")
    //       and empty[kStages] ("every consumer thread is done with the stage").
    // TODO: this block's query tile (causal: the heaviest first, gridDim.x - 1 - blockIdx.x), its
    //       head (blockIdx.y) and how many K/V tiles it visits (causal: up to the one holding its
    //       last query).
    // TODO: thread 0 initializes the barriers (hopper::mbarrier_init: q_full and full with 1
    //       arrival, the producer's; empty with one per consumer thread), then
    //       hopper::fence_barrier_init(); a __syncthreads() before anyone uses them.
    // TODO: warpgroup 0 is the producer: hopper::set_registers_decrease<kProducerRegisters>(),
    //       then thread 0 alone: announce the Q tile's bytes to q_full
    //       (hopper::mbarrier_arrive_expect_tx) and copy it, one hopper::tma_load_2d per 64
    //       columns; then for each K/V tile: wait until the consumers emptied its stage (which
    //       parity in the first pass?), announce 2 * Smem<kD>::kKVBytes to full[stage], copy K's
    //       and V's chunks. The tensor maps' rows are head * T + the tile's first row.
    // TODO: warpgroups 1 and 2 are the consumers (hopper::set_registers_increase<
    //       kConsumerRegisters>()), consumer c owning query rows 64 c .. 64 c + 63 of the tile.
    //       Wait for q_full (parity 0), then per K/V tile:
    //       - wait for full[stage]; S = Q K^T: hopper::fence_accumulators(s) and
    //         hopper::wgmma_fence(), one hopper::wgmma_m64n128k16<0> per k16 step of D
    //         (descriptors course::wgmma_descriptor_k_major_128b: 32 bytes per step, the next 64
    //         columns a chunk further), hopper::wgmma_commit(); hopper::wgmma_wait<0>(), fence s.
    //       - mask (keys past T; causal, keys after the query), online softmax on the
    //         accumulators (course::wgmma_d_element: accumulator 4 n + i is row g + 8 (i / 2),
    //         column 8 n + 2 t + i % 2, as flash_tc's fragments), rescale o.
    //       - P (bf16) to this consumer's P tile, swizzled as TMA would lay it out
    //         (course::swizzled_bf16_offset within each chunk of 64 keys); then
    //         hopper::fence_proxy_async() and hopper::named_barrier_sync(1 + c, 128) before wgmma
    //         reads it.
    //       - O += P V: one wgmma per 16 keys, A = P (K-major), B = V N-major
    //         (hopper::wgmma_m64n64k16<1> or wgmma_m64n128k16<1>; course::
    //         wgmma_descriptor_mn_major_128b(v + 16 * 128 * step, kBlockN * 128)), commit,
    //         hopper::wgmma_wait<0>(), fence o; then release the stage (hopper::mbarrier_arrive
    //         on empty[stage]).
    // TODO: add the 4 lanes' row sums, write O (bf16) and L = scale * m + logf(l) for rows < T.
#endif
}

template <int kD>
void launch(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
            __nv_bfloat16* O, float* L, int heads_total, int T, float scale, bool causal) {
    const auto kernel = flash_wgmma_kernel<kD>;
    // sm_90a code runs on compute capability 9.0 only, and only a build for it has the body.
    int device = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major != 9 || course::compiled_arch(kernel) != 90)
        throw std::runtime_error("flash_wgmma: needs a Hopper GPU and device code for sm_90a");
    // Above 48 KB a block's shared memory must be asked for (once per process is enough).
    static const std::size_t available = course::opt_in_shared_bytes(kernel);
    if (available < static_cast<std::size_t>(Smem<kD>::kBytes))
        throw std::runtime_error("flash_wgmma: needs " + std::to_string(Smem<kD>::kBytes) +
                                 " bytes of shared memory per block; " + std::to_string(available) +
                                 " here");
    // TODO: the tensor maps of Q, K and V with hopper::tensor_map: each tensor one matrix of
    //       heads_total * T rows of kD, copied in boxes of 128 rows x kChunkCols columns. A grid
    //       of ceil_div(T, kBlockM) x heads_total blocks of kThreads threads with Smem<kD>::kBytes
    //       of dynamic shared memory, the maps passed by value; then CUDA_CHECK_LAUNCH().
    COURSE_TODO("flash_wgmma: write the kernel and launch it, then delete this line");
}

}  // namespace

void flash_wgmma(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                 __nv_bfloat16* O, float* L, int batch, int heads, int T, int D, float scale,
                 bool causal) {
    if (D == 64)
        launch<64>(Q, K, V, O, L, batch * heads, T, scale, causal);
    else
        launch<128>(Q, K, V, O, L, batch * heads, T, scale, causal);
}
