// 05_gemm_advanced/wgmma_gemm: C = A B^T on Hopper's own path: the copy engine (TMA) fills a
// ring of shared stages and signals mbarriers, warpgroups multiply with wgmma.mma_async straight
// from shared memory, and the warps specialize: one producer thread issues every copy, two
// consumer warpgroups do every product.
//
// Teaches: TMA tensor maps (a matrix's shape, its tile and its swizzle, described once on the
// host; one instruction then copies a whole tile, zero-filled past the matrix's edges); mbarriers
// with a transaction count (a "full" barrier per stage completes when the copies' bytes have
// landed, an "empty" one when every consumer is done reading) and their phase parity; wgmma, one
// 64 x 256 x 16 product by 128 threads, its operands described by shared-memory descriptors, its
// completion awaited with commit and wait groups; warp specialization with setmaxnreg (the
// producer gives its registers to the consumers, who hold 128 accumulators each).
// The instructions themselves come wrapped in hopper.h (given, like the contract).
//
// Run:  grader run 05/wgmma_gemm           Stuck:   grader hint 05/wgmma_gemm    (a Hopper GPU)
// Contract: gemm_bf16.h   Instructions: hopper.h   Notes: notes/05_gemm_advanced.md
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "hopper.h"
#include "wgmma_gemm.h"

namespace {

constexpr int kBM = 128;       // rows of C per block: a 64-row half per consumer warpgroup
constexpr int kBN = 256;       // columns of C per block: the n of one wgmma
constexpr int kBK = 64;        // k per stage: 64 bf16 = one 128-byte swizzled row
constexpr int kStages = 4;     // shared stages in the ring
constexpr int kGroupRows = 8;  // tile rows per group of the block order
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kWarpgroupThreads = 128;
constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;    // the producer warpgroup first
constexpr int kWgmmaM = 64, kWgmmaK = 16;                         // wgmma.m64n256k16
constexpr int kAccumulators = kWgmmaM * kBN / kWarpgroupThreads;  // floats of C per thread
constexpr int kATileBytes = kBM * kBK * 2;
constexpr int kBTileBytes = kBN * kBK * 2;
constexpr int kStageBytes = kATileBytes + kBTileBytes;      // what the copies of one stage deliver
constexpr int kSharedBytes = kStages * kStageBytes + 1024;  // + room to align the stages to 1 KB
// Registers per thread after the split (setmaxnreg): the kernel starts with 65536 / 384 = 168
// each; the producer warpgroup keeps 24, which leaves 240 to each consumer thread.
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;

static_assert(kBM == kConsumers * kWgmmaM, "one 64-row wgmma per consumer warpgroup");
static_assert(kBK * 2 == course::kSwizzleRowBytes && kBK % kWgmmaK == 0,
              "a stage's rows are one 128-byte swizzled row of whole k16 steps");
static_assert(kATileBytes % 1024 == 0 && kBTileBytes % 1024 == 0,
              "every tile starts on 1024 bytes, where the 128-byte swizzle pattern starts");
static_assert(kBM <= 256 && kBN <= 256, "a TMA box side is at most 256 elements");
static_assert(kAccumulators == 128, "hopper::wgmma_m64n256k16 has 128 accumulators per thread");
static_assert(kWarpgroupThreads * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536,
              "the register file holds the split");
static_assert(kStages >= 2 && kGroupRows >= 1, "a ring, and groups of tile rows");

}  // namespace

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap a_map,
                      const __grid_constant__ CUtensorMap b_map, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // TODO: the stages in dynamic shared memory (extern __shared__ __align__(1024) unsigned char
    //       shared_raw[]), rounded up to the next 1024-byte boundary (TMA's 128-byte swizzle and
    //       the descriptors assume it; kSharedBytes has the room): stage s's A tile at s *
    //       kStageBytes, its B tile kATileBytes further. Two arrays of kStages barriers
    //       (__shared__ std::uint64_t): full[s], "stage s's copies have landed", and empty[s],
    //       "every consumer thread is done with stage s".
    // TODO: thread 0 initializes them (hopper::mbarrier_init: full with 1 arrival, the
    //       producer's; empty with one per consumer thread), then hopper::fence_barrier_init();
    //       a __syncthreads() before anyone uses them.
    // TODO: this block's tile: course::grouped_tile(blockIdx.x, tiles_m, tiles_n, kGroupRows).
    // TODO: warpgroup 0 is the producer: hopper::set_registers_decrease<kProducerRegisters>(),
    //       then thread 0 alone, for each k tile kt (stage kt % kStages, pass kt / kStages):
    //       wait until the consumers have emptied the stage (which parity, in the first pass,
    //       when nothing has been emptied yet? notes, section 7), announce kStageBytes to
    //       full[stage] (hopper::mbarrier_arrive_expect_tx), and copy A's box at (kt * kBK,
    //       row0) and B's at (kt * kBK, col0) with hopper::tma_load_2d.
    // TODO: warpgroups 1 and 2 are the consumers (hopper::set_registers_increase<
    //       kConsumerRegisters>()), consumer c computing rows 64 c .. 64 c + 63 of the block's
    //       tile into float acc[kAccumulators] = {}. For each k tile: wait for full[stage] in this
    //       pass's parity; hopper::fence_accumulators(acc), hopper::wgmma_fence(); one
    //       hopper::wgmma_m64n256k16 per k16 step s, its descriptors course::
    //       wgmma_descriptor_k_major_128b(start + 32 * s) where start is the shared address of
    //       this consumer's 64 rows of the A tile, and of the B tile; hopper::wgmma_commit();
    //       hopper::wgmma_wait<1>() (the previous stage's products are done), fence the
    //       accumulators again, and release the previous stage (hopper::mbarrier_arrive on its
    //       empty barrier). After the loop, hopper::wgmma_wait<0>() and a last fence.
    // TODO: accumulator r of consumer thread t is element course::wgmma_d_element(t, r) of its
    //       64 x 256 tile: store the pairs (r, r + 1) as float2s where row < M and col < N.
#endif
}

void gemm_bf16(int M, int N, int K, const course::TensorElement* A,
               const course::TensorElement* B, float* C) {
    // sm_90a code runs on compute capability 9.0 only, and only a build for it has the body.
    int device = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (course::kFp16TensorCores || major != 9 || course::compiled_arch(wgmma_gemm_kernel) != 90)
        throw std::runtime_error("wgmma_gemm: needs a Hopper GPU and device code for sm_90a");
    // Above 48 KB a block's shared memory must be asked for (once per process is enough).
    static const std::size_t available = course::opt_in_shared_bytes(wgmma_gemm_kernel);
    if (available < static_cast<std::size_t>(kSharedBytes))
        throw std::runtime_error("wgmma_gemm: needs " + std::to_string(kSharedBytes) +
                                 " bytes of shared memory per block; " + std::to_string(available) +
                                 " here");
    // TODO: the tensor maps of A (boxes of kBM rows x kBK columns) and B (kBN x kBK) with
    //       hopper::tensor_map, then a 1D grid of one block per tile of kThreads threads with
    //       kSharedBytes of dynamic shared memory, the maps passed by value; launch
    //       wgmma_gemm_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("wgmma_gemm: write the kernel and launch it, then delete this line");
}
