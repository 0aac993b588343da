// 05_gemm_advanced/wgmma_gemm: C = A B^T on Hopper's own path: the copy engine (TMA) fills a
// ring of shared stages and signals mbarriers, warpgroups multiply with wgmma.mma_async straight
// from shared memory, and the warps specialize: one producer thread issues every copy, two
// consumer warpgroups do every product. Reference solution.
//
// Teaches: TMA tensor maps (a matrix's shape, its tile and its swizzle, described once on the
// host; one instruction then copies a whole tile, zero-filled past the matrix's edges); mbarriers
// with a transaction count (a "full" barrier per stage completes when the copies' bytes have
// landed, an "empty" one when every consumer is done reading) and their phase parity; wgmma, one
// 64 x 256 x 16 product by 128 threads, its operands described by shared-memory descriptors, its
// completion awaited with commit and wait groups; warp specialization with setmaxnreg (the
// producer gives its registers to the consumers, who hold 128 accumulators each).
//
// The instructions themselves come wrapped in hopper.h (given, like the contract).
//
// Run:  grader run 05/wgmma_gemm --solutions      (a Hopper GPU: the exercise is built for sm_90a)
// Contract: gemm_bf16.h   Instructions: hopper.h  Notes:   notes/05_gemm_advanced.md
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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the Hopper instructions exist in sm_90a code only

// One stage's products for a consumer: its 64 rows of the A tile by the whole B tile, the k16
// steps 32 bytes apart in their rows (course::wgmma_descriptor_k_major_128b says why), issued as
// one wgmma group between the fences the accumulators need.
__device__ void issue_stage(float (&acc)[kAccumulators], const unsigned char* a_stage,
                            const unsigned char* b_stage, int consumer) {
    const std::uint32_t a_start =
        hopper::shared_address(a_stage) + consumer * kWgmmaM * course::kSwizzleRowBytes;
    const std::uint32_t b_start = hopper::shared_address(b_stage);
    hopper::fence_accumulators(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kBK / kWgmmaK; ++s)
        hopper::wgmma_m64n256k16(acc, course::wgmma_descriptor_k_major_128b(a_start + 32 * s),
                                 course::wgmma_descriptor_k_major_128b(b_start + 32 * s), true);
    hopper::wgmma_commit();
}

// A consumer's 64 x 256 accumulators into C at (row0 + 64 consumer, col0). Registers 4 j + {0, 1}
// are two neighbouring columns of one row, 4 j + {2, 3} the same eight rows below: one 8-byte
// store each. N is a multiple of 8 and the column even, so a pair is inside C or outside it.
__device__ void store_tile(float* C, const float (&acc)[kAccumulators], int M, int N, int row0,
                           int col0, int consumer, int thread) {
#pragma unroll
    for (int reg = 0; reg < kAccumulators; reg += 2) {
        const course::Coord e = course::wgmma_d_element(thread, reg);
        const int row = row0 + consumer * kWgmmaM + e.row, col = col0 + e.col;
        if (row < M && col < N)
            *reinterpret_cast<float2*>(C + row * N + col) = make_float2(acc[reg], acc[reg + 1]);
    }
}

#endif

}  // namespace

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap a_map,
                      const __grid_constant__ CUtensorMap b_map, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t full[kStages];   // phase done: the stage's copies have landed
    __shared__ std::uint64_t empty[kStages];  // phase done: every consumer is done reading it
    // TMA's 128-byte swizzle and the descriptors' base offset 0 need tiles on 1024 bytes.
    unsigned char* const stages =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    const auto a_tile = [&](int stage) { return stages + stage * kStageBytes; };
    const auto b_tile = [&](int stage) { return stages + stage * kStageBytes + kATileBytes; };

    // Blocks in grouped order: the kGroupRows tile rows of a group, one column after the other.
    const course::Coord tile = course::grouped_tile(blockIdx.x, course::ceil_div(M, kBM),
                                                    course::ceil_div(N, kBN), kGroupRows);
    const int row0 = tile.row * kBM, col0 = tile.col * kBN;
    const int k_tiles = course::ceil_div(K, kBK);
    const int warpgroup = threadIdx.x / kWarpgroupThreads;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            // full: the producer's arrive (and the copies' bytes); empty: every consumer thread's.
            hopper::mbarrier_init(&full[s], 1);
            hopper::mbarrier_init(&empty[s], kConsumers * kWarpgroupThreads);
        }
        hopper::fence_barrier_init();
    }
    __syncthreads();  // the barriers exist before anyone uses them

    if (warpgroup == 0) {
        // The producer warpgroup: its registers go to the consumers, and one thread issues the
        // copies of every stage, kStages ahead of the consumers at most.
        hopper::set_registers_decrease<kProducerRegisters>();
        if (threadIdx.x == 0) {
            for (int kt = 0; kt < k_tiles; ++kt) {
                const int stage = kt % kStages;
                // The parity of this pass through the ring: pass p waits for phase p of a stage's
                // barriers. Before refilling, the consumers must have released the stage's
                // previous tiles: phase p - 1 of `empty`, of parity pass_parity ^ 1. In the
                // first pass that is the phase "before the first", which counts as complete.
                const int pass_parity = kt / kStages % 2;
                hopper::mbarrier_wait(&empty[stage], pass_parity ^ 1);
                hopper::mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
                hopper::tma_load_2d(a_tile(stage), &a_map, kt * kBK, row0, &full[stage]);
                hopper::tma_load_2d(b_tile(stage), &b_map, kt * kBK, col0, &full[stage]);
            }
        }
    } else {
        hopper::set_registers_increase<kConsumerRegisters>();
        // Consumer c computes rows 64 c .. 64 c + 63 of the block's tile, all 256 columns.
        const int consumer = warpgroup - 1;
        const int thread = threadIdx.x % kWarpgroupThreads;
        float acc[kAccumulators] = {};

        for (int kt = 0; kt < k_tiles; ++kt) {
            const int stage = kt % kStages;
            hopper::mbarrier_wait(&full[stage], kt / kStages % 2);  // the stage's tiles have landed
            issue_stage(acc, a_tile(stage), b_tile(stage), consumer);
            // This stage's products may still run; the previous stage's are done (at most one
            // group pending), so its tiles may be refilled.
            hopper::wgmma_wait<1>();
            hopper::fence_accumulators(acc);
            if (kt > 0) hopper::mbarrier_arrive(&empty[(kt - 1) % kStages]);
        }
        hopper::wgmma_wait<0>();
        hopper::fence_accumulators(acc);

        store_tile(C, acc, M, N, row0, col0, consumer, thread);
    }
#endif
}

void gemm_bf16(int M, int N, int K, const course::TensorElement* A, const course::TensorElement* B,
               float* C) {
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
    const CUtensorMap a_map = hopper::tensor_map(A, M, K, kBM, kBK);
    const CUtensorMap b_map = hopper::tensor_map(B, N, K, kBN, kBK);
    // A 1D grid: one block per tile, which the kernel places in grouped order.
    const int tiles = course::ceil_div(M, kBM) * course::ceil_div(N, kBN);
    wgmma_gemm_kernel<<<tiles, kThreads, kSharedBytes>>>(M, N, K, a_map, b_map, C);
    CUDA_CHECK_LAUNCH();
}
