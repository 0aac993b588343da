// 10_inference/pairwise_cosine_fast: the pairwise cosine distances on Hopper's own path, module
// 05's TMA + mbarrier + wgmma pipeline over the upper triangle's tiles, with the normalization and
// the mean in its epilogue. Fast reference (the readable one is pairwise_cosine.cu).
//
// Teaches: what the readable solution's mma.sync pipeline leaves to an H100: module 05's wgmma_gemm
// (a producer thread's TMA copies into a ring of stages, two consumer warpgroups multiplying with
// wgmma.mma_async from shared memory, "full" and "empty" mbarriers between them, setmaxnreg)
// applied to X against itself, as its fast reference runs it: a persistent kernel, one block per SM
// walking its units of work with a stride of the grid, so that the producer runs on into the next
// unit's copies while the consumers write the last one's distances. Unlike wgmma_gemm's, the two
// consumers do not share a unit: each owns every other one of the block's (CUTLASS's "ping-pong"
// schedule), and they take turns at the tensor cores through two named barriers, so that one
// multiplies while the other writes its distances. (Sharing 128 x 256 units, both wrote at once and
// the tensor cores idled meanwhile: 64.2% of cuBLAS's rate at N 8192.) A unit is a 128 x 128 square
// of the triangle, i <= j, one consumer's: two wgmma.m64n128k16 per k16 step, its upper and lower
// 64 rows against the same 128 columns, 128 accumulators per thread (what 240 registers hold). It
// reads 32 KB per k step from L2 where a shared 128 x 256 read 48 KB for twice the products: the
// price of a tile per consumer. The epilogue computes the readable one's d = 1 - dot * inverse[i] *
// inverse[j], and stores it as wgmma_gemm_fast's epilogue stores C: through shared memory, each
// warp staging its 16 rows 64 columns at a time and reading them back by rows, so that its stores
// are whole 16-byte vectors, each half warp one row's 256 contiguous bytes. A row of the packed
// triangle is a contiguous run (row i holds j = i + 1 .. N - 1), but it starts wherever row i - 1
// ended: the staging rotates each row by its run's offset from a 16-byte boundary, so that every 16
// bytes read back land on one; only the unit that wraps around (a group the next chunk finishes)
// and the pairs at the diagonal and at N are stored float by float. (Stored straight from the
// accumulators instead, 128 scattered 4-byte stores per thread and tile, each warp's store half of
// 8 sectors, this kernel ran at 32.2% of cuBLAS's rate at N 8192 on an H100, slower than the
// readable solution.) The sums meet once per block, one atomic each. Where the GPU is not a Hopper
// (compute capability 9.0) or this build has no sm_90a code, the readable solution runs.
//
// Run:  grader run 10/pairwise_cosine --solutions      (the "pairwise_cosine (fast)" row)
// Contract: pairwise_cosine.h   Instructions: ../05_gemm_advanced/hopper.h,
//           ../07_attention/hopper_attention.h (wgmma.m64n128k16)
// Notes: notes/10_inference.md, section 6; notes/05_gemm_advanced.md (TMA, mbarriers, wgmma)
#include <cstdint>
#include <stdexcept>
#include <string>

#include "../05_gemm_advanced/hopper.h"
#include "../07_attention/hopper_attention.h"
#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "pairwise_cosine.h"
#include "tensor_core.h"

// The readable solution, whole: its norm pass, its triangle walk, and the whole computation
// wherever Hopper's path cannot run.
namespace readable {
#include "pairwise_cosine.cu"
}  // namespace readable

namespace {

// wgmma_gemm's pipeline (solutions/05_gemm_advanced/wgmma_gemm.cu, which says why each), a
// 128 x 128 tile per consumer.
constexpr int kBM = 128;    // rows i per unit: two 64-row wgmma, its halves
constexpr int kBN = 128;    // columns j per unit: the n of its wgmma; the triangle's square
constexpr int kBK = 64;     // k per stage: 64 bf16 = one 128-byte swizzled row
constexpr int kStages = 6;  // shared stages in the ring (what the 227 KB hold beside the staging)
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kWarpgroupThreads = 128;
constexpr int kConsumerThreads = kConsumers * kWarpgroupThreads;
constexpr int kThreads = kWarpgroupThreads + kConsumerThreads;  // the producer warpgroup first
constexpr int kWgmmaM = 64, kWgmmaN = 128, kWgmmaK = 16;        // wgmma.m64n128k16
constexpr int kHalves = kBM / kWgmmaM;                          // an accumulator each
constexpr int kHalfAccumulators = kWgmmaM * kWgmmaN / kWarpgroupThreads;  // floats per thread
constexpr int kTileBytes = kBM * kBK * 2;  // the i tile and the j tile alike
constexpr int kStageBytes = 2 * kTileBytes;
// The epilogue's staging (wgmma_gemm_fast's): each consumer warp owns kWarpRows rows of each half
// and stages them kChunkColumns columns (kChunkRegisters accumulators per thread) at a time, then
// reads them back 4 columns (16 bytes) per thread: kChunks chunks, the halves one after the other.
constexpr int kWarpRows = 16;  // a warp's rows of the wgmma D layout
constexpr int kChunkColumns = 64;
constexpr int kChunkRegisters = kHalfAccumulators * kChunkColumns / kBN;
constexpr int kChunks = kHalves * kBN / kChunkColumns;
constexpr int kStagingFloats = kWarpRows * kChunkColumns;  // per warp
constexpr int kStagingBytes = kConsumerThreads / 32 * kStagingFloats * 4;
// The stages, then the staging, + room to align the stages to 1 KB.
constexpr int kSharedBytes = kStages * kStageBytes + kStagingBytes + 1024;
// The static shared memory beside them: the barriers and the warps' sums (128 bytes), which ptxas
// rounds up to 1024 so that the dynamic region starts on 1024 bytes, as shared_raw's __align__
// asks (wgmma_gemm_fast.cu).
constexpr int kStaticSharedBytes = 1024;
constexpr int kProducerRegisters = 24;
constexpr int kConsumerRegisters = 240;
// The named barriers (0 is __syncthreads()'s): the consumers' sums, then the turns at the tensor
// cores, consumer c waiting at kTurnBarrier + c for the other to hand it over.
constexpr int kSumBarrier = 1;
constexpr int kTurnBarrier = 2;

static_assert(kBM == kHalves * kWgmmaM && kBN == kWgmmaN, "a unit is one consumer's wgmma pair");
static_assert(kBM == kBN, "a unit is a square of the triangle, its two tiles one box of X");
static_assert(kConsumers == 2,
              "the consumers take turns: each hands the tensor cores to the other");
static_assert(kSumBarrier < kTurnBarrier && kTurnBarrier + kConsumers <= 16,
              "the turns' barriers are their own, among the 16 an SM has");
static_assert(kBK * 2 == course::kSwizzleRowBytes && kBK % kWgmmaK == 0,
              "a stage's rows are one 128-byte swizzled row of whole k16 steps");
static_assert(kTileBytes % 1024 == 0 && kWgmmaM * course::kSwizzleRowBytes % 1024 == 0,
              "every tile and half starts on 1024 bytes, where the swizzle pattern starts");
static_assert(kHalfAccumulators == 64, "hopper::wgmma_m64n128k16 has 64 accumulators per thread");
static_assert(kWarpgroupThreads * (kProducerRegisters + kConsumers * kConsumerRegisters) <= 65536,
              "the register file holds the split");
static_assert(kSharedBytes + kStaticSharedBytes <= 227 * 1024,
              "the stages and the staging fit the 227 KB an H100 block may opt into");
static_assert(kWarpRows * (kWarpgroupThreads / 32) == kWgmmaM && kBN % kChunkColumns == 0 &&
                  kChunkRegisters * kChunks == kHalves * kHalfAccumulators,
              "each warp of a consumer stages its own 16 rows of each half, chunk after chunk");
static_assert(kChunkColumns / 4 == 16 && kWarpRows % 2 == 0,
              "a half warp reads back one row's 16 units of 4 floats, the two halves two rows");

// A unit of work: the kBM x kBN tile of X X^T at (row0, col0).
struct Unit {
    int row0, col0;
};

// The units: the squares of the triangle, i <= j (a pair i < j lies in square (i / kBM, j / kBN)).
__host__ __device__ int unit_count(int N) {
    const int squares = course::ceil_div(N, kBN);
    return squares * (squares + 1) / 2;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the Hopper instructions exist in sm_90a code only

// Unit u: square u of the triangle (the readable solution's walk, rows of squares - si squares).
__device__ Unit unit_of(int unit, int squares) {
    int si, sj;
    readable::triangle_tile(unit, squares, si, sj);
    return {si * kBM, sj * kBN};
}

// The accumulators are written in the background while wgmma runs (hopper.h says why).
__device__ void fence_accumulators(float (&acc)[kHalves][kHalfAccumulators]) {
#pragma unroll
    for (int h = 0; h < kHalves; ++h) hopper::fence_accumulators(acc[h]);
}

// wgmma_gemm's issue_stage, for two halves: each k16 step multiplies the A tile's upper and lower
// 64 rows (8 KB apart, whole swizzle patterns) by the whole B tile, the k16 steps 32 bytes apart
// in their rows, one wgmma group between the fences the accumulators need.
__device__ void issue_stage(float (&acc)[kHalves][kHalfAccumulators], const unsigned char* a_stage,
                            const unsigned char* b_stage) {
    const std::uint32_t a_start = hopper::shared_address(a_stage);
    const std::uint32_t b_start = hopper::shared_address(b_stage);
    fence_accumulators(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kBK / kWgmmaK; ++s)
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
            hopper::wgmma_m64n128k16<0>(
                acc[h],
                course::wgmma_descriptor_k_major_128b(
                    a_start + h * kWgmmaM * course::kSwizzleRowBytes + 32 * s),
                course::wgmma_descriptor_k_major_128b(b_start + 32 * s), true);
    hopper::wgmma_commit();
}

// Where row `row`'s run of the packed triangle would hold column 0: triangle_index(row, col, N)
// is run_origin(row, N) + col for every col > row (row 0's origin is -1). In int: the triangle has
// 33.5M places at N 8192, and the rows reach N + 127.
__device__ int run_origin(int row, int N) { return row * N - row * (row + 1) / 2 - row - 1; }

// How many floats row `row`'s run is past a 16-byte boundary at column 0, and so at the first
// column of every chunk (chunks start at multiples of 64 columns): the distances are 16-byte
// aligned (the contract), so the boundaries fall on columns 4 k - shift.
__device__ int run_shift(int row, int N) { return run_origin(row, N) & 3; }

// Where position `position` of row `row` of a warp's staged chunk lies: rows of kChunkColumns
// floats, their 16-byte units XORed with a pattern of the row (wgmma_gemm_fast's swizzle, which
// keeps the read-back's 16-byte loads free of bank conflicts: a quarter warp reads 8 units of one
// row, 8 different units). Column c of the chunk's row is staged at position (c + shift) % 64, the
// row's columns rotated by its run's shift: position 4 u then holds a column on a 16-byte boundary
// of the output (positions 0 .. shift - 1 hold the chunk's last columns, the start of a group
// that the next chunk finishes).
__device__ int staged(int row, int position) {
    const int pattern = row % 4 * 2 + row / 4 % 2;
    return row * kChunkColumns + ((position / 4) ^ pattern) * 4 + position % 4;
}

// A consumer's unit, its 128 x 128 dot products, normalized, into the packed triangle where
// row < col < N; returns the sum of the distances it wrote. Each warp holds 16 rows of each half
// (the wgmma D layout: register reg of a half is the product at course::wgmma_d_element(thread,
// reg)) and writes them a chunk of kChunkColumns columns at a time, the upper half's two chunks,
// then the lower's: the distances into its own `staging` (no other warp reads it: a __syncwarp
// orders the writes and the reads), read back by rows, 4 columns per thread: a half warp is one
// row's 64 columns, 16 16-byte stores into its contiguous run.
__device__ float store_distances(const float (&acc)[kHalves][kHalfAccumulators],
                                 const float* inverse, float* distances, int N, const Unit& unit,
                                 int consumer, int thread, float* staging) {
    const int warp = thread / 32, lane = thread % 32;
    float* const mine = staging + (consumer * (kWarpgroupThreads / 32) + warp) * kStagingFloats;
    const int unit_of_lane = lane % 16;  // the 16-byte unit of its rows this lane reads back
    float sum = 0.0f;
#pragma unroll 1
    for (int chunk = 0; chunk < kChunks; ++chunk) {
        const int half = chunk / (kBN / kChunkColumns);
        const int first_row = unit.row0 + half * kWgmmaM + warp * kWarpRows;
        // The thread's two rows of the half (registers 4 k + {0, 1} and 4 k + {2, 3}): their
        // norms. Rows and columns past N (the last square's) read row N - 1's: never stored.
        float inverse_row[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = course::wgmma_d_element(thread, 2 * h).row % kWarpRows;
            inverse_row[h] = inverse[min(first_row + r, N - 1)];
        }
        // Registers need constant indices: every store is unrolled, the chunk's are taken
        // (register reg of the two halves, one after the other, is in chunk reg / kChunkRegisters).
#pragma unroll
        for (int reg = 0; reg < kHalves * kHalfAccumulators; ++reg) {
            if (reg / kChunkRegisters != chunk) continue;
            const float product = acc[reg / kHalfAccumulators][reg % kHalfAccumulators];
            const course::Coord e = course::wgmma_d_element(thread, reg % kHalfAccumulators);
            const int r = e.row % kWarpRows;
            mine[staged(r, (e.col + run_shift(first_row + r, N)) % kChunkColumns)] =
                1.0f - product * inverse_row[reg % 4 / 2] * inverse[min(unit.col0 + e.col, N - 1)];
        }
        __syncwarp();
        const int chunk_col = unit.col0 + chunk % (kBN / kChunkColumns) * kChunkColumns;
#pragma unroll
        for (int r = lane / 16; r < kWarpRows; r += 2) {
            const int row = first_row + r;
            const int origin = run_origin(row, N) + chunk_col;  // the chunk's column 0's place
            const int shift = run_shift(row, N);
            const float4 v = *reinterpret_cast<const float4*>(mine + staged(r, 4 * unit_of_lane));
            // Position 4 u holds column 4 u - shift of the chunk, at a place on a 16-byte
            // boundary; unit 0 wraps: its positions below shift hold the chunk's last columns.
            // The stores are __stcs (evict first): the 134 MB of distances are never read again,
            // and X's lines should stay in L2 for the other SMs' copies. (It also keeps the float4
            // one 16-byte store: nvcc split a float4 assignment here into 4 scalar ones.)
            const int first = 4 * unit_of_lane - shift;
            if (first >= 0 && row < chunk_col + first && chunk_col + first + 3 < N) {
                __stcs(reinterpret_cast<float4*>(distances + origin + first), v);
                sum += (v.x + v.y) + (v.z + v.w);
            } else {
                const float d[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const int c = first + k < 0 ? first + k + kChunkColumns : first + k;
                    if (row < chunk_col + c && chunk_col + c < N) {
                        __stcs(distances + origin + c, d[k]);
                        sum += d[k];
                    }
                }
            }
        }
        __syncwarp();  // read back before the next chunk is staged over it
    }
    return sum;
}

#endif

}  // namespace

// Both roles walk the same units (unit = blockIdx.x, then a stride of the grid; the block's l-th is
// consumer l % 2's) and count the same loads (the l-th unit's are loads l k_tiles onward): load
// number `load` of the block goes to stage load % kStages in pass load / kStages of the ring,
// whose phase parity is that pass's parity (wgmma_gemm.cu says why the producer's first wait, on
// the phase "before the first", returns at once).
__global__ void __launch_bounds__(kThreads, 1)
    pairwise_cosine_wgmma_kernel(const __grid_constant__ CUtensorMap map,
                                 const float* __restrict__ inverse, float* __restrict__ distances,
                                 float* mean, int N, int D) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t full[kStages];   // phase done: the stage's copies have landed
    __shared__ std::uint64_t empty[kStages];  // phase done: its unit's consumer is done reading it
    constexpr int kConsumerWarps = kConsumerThreads / 32;
    __shared__ float warp_sums[kConsumerWarps];
    unsigned char* const stages =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    const auto a_tile = [&](int stage) { return stages + stage * kStageBytes; };
    const auto b_tile = [&](int stage) { return stages + stage * kStageBytes + kTileBytes; };

    const int squares = course::ceil_div(N, kBN);
    const int units = unit_count(N);
    const int k_tiles = D / kBK;  // D is a multiple of 64
    const int warpgroup = threadIdx.x / kWarpgroupThreads;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            hopper::mbarrier_init(&full[s], 1);
            hopper::mbarrier_init(&empty[s], kWarpgroupThreads);
        }
        hopper::fence_barrier_init();
    }
    __syncthreads();  // the barriers exist before anyone uses them

    if (warpgroup == 0) {
        hopper::set_registers_decrease<kProducerRegisters>();
        if (threadIdx.x == 0) {
            int load = 0;
            for (int u = blockIdx.x; u < units; u += gridDim.x) {
                const Unit unit = unit_of(u, squares);
                // The i tile (A) and the j tile (B) are rows of X both: one matrix, one box.
                for (int kt = 0; kt < k_tiles; ++kt, ++load) {
                    const int stage = load % kStages;
                    hopper::mbarrier_wait(&empty[stage], (load / kStages % 2) ^ 1);
                    hopper::mbarrier_arrive_expect_tx(&full[stage], kStageBytes);
                    hopper::tma_load_2d(a_tile(stage), &map, kt * kBK, unit.row0, &full[stage]);
                    hopper::tma_load_2d(b_tile(stage), &map, kt * kBK, unit.col0, &full[stage]);
                }
            }
        }
    } else {
        hopper::set_registers_increase<kConsumerRegisters>();
        const int consumer = warpgroup - 1;
        const int thread = threadIdx.x % kWarpgroupThreads;
        float sum = 0.0f;
        for (int l = consumer, u = blockIdx.x + consumer * gridDim.x; u < units;
             l += kConsumers, u += kConsumers * gridDim.x) {
            const Unit unit = unit_of(u, squares);
            // Wait for the turn: the other consumer has issued all of unit l - 1's products (the
            // block's first unit has no one before it).
            if (l > 0) hopper::named_barrier_sync(kTurnBarrier + consumer, kConsumerThreads);
            float acc[kHalves][kHalfAccumulators] = {};
            int load = l * k_tiles;
            for (int kt = 0; kt < k_tiles; ++kt, ++load) {
                const int stage = load % kStages;
                hopper::mbarrier_wait(&full[stage], load / kStages % 2);
                issue_stage(acc, a_tile(stage), b_tile(stage));
                // This stage's products may still run; the previous stage's are done.
                hopper::wgmma_wait<1>();
                fence_accumulators(acc);
                if (kt > 0) hopper::mbarrier_arrive(&empty[(load - 1) % kStages]);
            }
            // The products are issued: the turn goes to the other consumer, whose unit l + 1's
            // products then run while this one's last stage finishes and its distances are
            // written. (Only where the block has a unit l + 1: no arrival is left unmatched.)
            if (u + gridDim.x < units)
                hopper::named_barrier_arrive(kTurnBarrier + 1 - consumer, kConsumerThreads);
            // The unit's last stage goes back to the producer before the distances are written:
            // its next copies overlap the stores below.
            hopper::wgmma_wait<0>();
            fence_accumulators(acc);
            hopper::mbarrier_arrive(&empty[(load - 1) % kStages]);
            sum += store_distances(acc, inverse, distances, N, unit, consumer, thread,
                                   reinterpret_cast<float*>(stages + kStages * kStageBytes));
        }

        // The mean: a warp sum, the consumer warps' sums through shared memory, one atomic per
        // block (the launcher zeroed mean).
        for (int offset = 16; offset > 0; offset /= 2)
            sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        const int warp = (threadIdx.x - kWarpgroupThreads) / 32;
        if (threadIdx.x % 32 == 0) warp_sums[warp] = sum;
        hopper::named_barrier_sync(kSumBarrier, kConsumerThreads);  // the consumers only
        if (warp == 0 && threadIdx.x % 32 == 0) {
            float block_sum = 0.0f;
            for (int w = 0; w < kConsumerWarps; ++w) block_sum += warp_sums[w];
            atomicAdd(mean, block_sum / (0.5f * N * (N - 1.0f)));
        }
    }
#endif
}

namespace {

// Hopper's path runs on compute capability 9.0 in a build with its sm_90a code (the manifest's
// fast_arch: cmake/Course.cmake builds this file for 90a where the tree builds for 90); a build
// without it has the kernel above compiled empty.
bool wgmma_runs_here() {
    static const bool runs = [] {
        int device = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
        return major == 9 && course::compiled_arch(pairwise_cosine_wgmma_kernel) == 90;
    }();
    return runs;
}

}  // namespace

void pairwise_cosine(const __nv_bfloat16* X, float* distances, float* mean, float* workspace, int N,
                     int D) {
    if (!wgmma_runs_here()) {
        readable::pairwise_cosine(X, distances, mean, workspace, N, D);
        return;
    }
    static const std::size_t available = course::opt_in_shared_bytes(pairwise_cosine_wgmma_kernel);
    if (available < static_cast<std::size_t>(kSharedBytes))
        throw std::runtime_error("pairwise_cosine: needs " + std::to_string(kSharedBytes) +
                                 " bytes of shared memory per block; " + std::to_string(available) +
                                 " here");
    int device = 0, multiprocessors = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    // hopper::tensor_map takes the tensor-core exercises' element, bf16 wherever this runs.
    const auto* matrix = reinterpret_cast<const course::TensorElement*>(X);
    const CUtensorMap map = hopper::tensor_map(matrix, N, D, kBM, kBK);

    readable::inverse_norms_kernel<<<course::ceil_div(N, readable::kNormRows),
                                     32 * readable::kNormRows>>>(X, workspace, N, D);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(mean, 0, sizeof(float)));  // the blocks add their shares to it
    // One block per SM (a block holds most of an SM's shared memory), none more than the units.
    const int units = unit_count(N);
    const int blocks = units < multiprocessors ? units : multiprocessors;
    pairwise_cosine_wgmma_kernel<<<blocks, kThreads, kSharedBytes>>>(map, workspace, distances,
                                                                     mean, N, D);
    CUDA_CHECK_LAUNCH();
}
