// 05_gemm_advanced/wgmma_gemm_fast: the warp-specialized wgmma GEMM as a persistent kernel. Fast
// reference (the readable one is wgmma_gemm.cu).
//
// Teaches: what a block per tile leaves on the table once the main loop runs at the tensor cores'
// pace: each block fills its ring from empty (the first tiles' copies are waited for with nothing
// to overlap them) and writes its tile of C while its SM's tensor cores idle, and a new block
// starts only when the old one has left. Here one block per SM stays for the whole product and
// walks the tiles (grouped order, a stride of the grid): the producer runs on into the next tile's
// copies as soon as a stage is free, so that the consumers find their ring full when they come
// back from writing C, and each consumer releases its last stage of a tile before writing it.
// Same tiles, stages, barriers, wgmma and register split as the readable kernel (its constants,
// device helpers and tensor maps are used as they are); only the loops around them change.
//
// Run:  grader run 05/wgmma_gemm --solutions      (the "wgmma_gemm (fast)" row)
// Contract: gemm_bf16.h                           Notes:   notes/05_gemm_advanced.md
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "hopper.h"
#include "wgmma_gemm.h"

// The readable solution, whole: its tiles, stages and register split serve here as they are.
namespace readable {
#include "wgmma_gemm.cu"
}  // namespace readable
using readable::kAccumulators;
using readable::kATileBytes;
using readable::kBK;
using readable::kBM;
using readable::kBN;
using readable::kConsumerRegisters;
using readable::kConsumers;
using readable::kGroupRows;
using readable::kProducerRegisters;
using readable::kSharedBytes;
using readable::kStageBytes;
using readable::kStages;
using readable::kThreads;
using readable::kWarpgroupThreads;

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_fast_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap a_map,
                           const __grid_constant__ CUtensorMap b_map, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t full[kStages];   // phase done: the stage's copies have landed
    __shared__ std::uint64_t empty[kStages];  // phase done: every consumer is done reading it
    unsigned char* const stages =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    const auto a_tile = [&](int stage) { return stages + stage * kStageBytes; };
    const auto b_tile = [&](int stage) { return stages + stage * kStageBytes + kATileBytes; };

    const int tiles_m = course::ceil_div(M, kBM), tiles_n = course::ceil_div(N, kBN);
    const int tiles = tiles_m * tiles_n;
    const int k_tiles = course::ceil_div(K, kBK);
    const int warpgroup = threadIdx.x / kWarpgroupThreads;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            hopper::mbarrier_init(&full[s], 1);
            hopper::mbarrier_init(&empty[s], kConsumers * kWarpgroupThreads);
        }
        hopper::fence_barrier_init();
    }
    __syncthreads();

    // Both roles walk the same tiles and count the same loads: load number `load` (over all the
    // block's tiles) goes to stage load % kStages in pass load / kStages of the ring.
    if (warpgroup == 0) {
        hopper::set_registers_decrease<kProducerRegisters>();
        if (threadIdx.x == 0) {
            int load = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const course::Coord tile = course::grouped_tile(t, tiles_m, tiles_n, kGroupRows);
                for (int kt = 0; kt < k_tiles; ++kt, ++load) {
                    const int stage = load % kStages;
                    hopper::mbarrier_wait(&empty[stage], (load / kStages % 2) ^ 1);
                    hopper::mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
                    hopper::tma_load_2d(a_tile(stage), &a_map, kt * kBK, tile.row * kBM,
                                        &full[stage]);
                    hopper::tma_load_2d(b_tile(stage), &b_map, kt * kBK, tile.col * kBN,
                                        &full[stage]);
                }
            }
        }
    } else {
        hopper::set_registers_increase<kConsumerRegisters>();
        const int consumer = warpgroup - 1;
        const int thread = threadIdx.x % kWarpgroupThreads;
        int load = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const course::Coord tile = course::grouped_tile(t, tiles_m, tiles_n, kGroupRows);
            float acc[kAccumulators] = {};
            for (int kt = 0; kt < k_tiles; ++kt, ++load) {
                const int stage = load % kStages;
                hopper::mbarrier_wait(&full[stage], load / kStages % 2);
                readable::issue_stage(acc, a_tile(stage), b_tile(stage), consumer);
                hopper::wgmma_wait<1>();
                hopper::fence_accumulators(acc);
                if (kt > 0) hopper::mbarrier_arrive(&empty[(load - 1) % kStages]);
            }
            // The tile's last stage goes back to the producer before C is written: its next
            // copies overlap the stores below.
            hopper::wgmma_wait<0>();
            hopper::fence_accumulators(acc);
            if (k_tiles > 0) hopper::mbarrier_arrive(&empty[(load - 1) % kStages]);

            readable::store_tile(C, acc, M, N, tile.row * kBM, tile.col * kBN, consumer, thread);
        }
    }
#endif
}

void gemm_bf16(int M, int N, int K, const course::TensorElement* A, const course::TensorElement* B,
               float* C) {
    int device = 0, major = 0, multiprocessors = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    if (course::kFp16TensorCores || major != 9 ||
        course::compiled_arch(wgmma_gemm_fast_kernel) != 90)
        throw std::runtime_error("wgmma_gemm: needs a Hopper GPU and device code for sm_90a");
    static const std::size_t available = course::opt_in_shared_bytes(wgmma_gemm_fast_kernel);
    if (available < static_cast<std::size_t>(kSharedBytes))
        throw std::runtime_error("wgmma_gemm: needs " + std::to_string(kSharedBytes) +
                                 " bytes of shared memory per block; " + std::to_string(available) +
                                 " here");
    const CUtensorMap a_map = hopper::tensor_map(A, M, K, kBM, kBK);
    const CUtensorMap b_map = hopper::tensor_map(B, N, K, kBN, kBK);
    // One block per SM (a block holds most of an SM's shared memory), none more than tiles.
    const int tiles = course::ceil_div(M, kBM) * course::ceil_div(N, kBN);
    const int blocks = tiles < multiprocessors ? tiles : multiprocessors;
    wgmma_gemm_fast_kernel<<<blocks, kThreads, kSharedBytes>>>(M, N, K, a_map, b_map, C);
    CUDA_CHECK_LAUNCH();
}
