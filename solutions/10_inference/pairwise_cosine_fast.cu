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
// 64 rows against the same 128 columns, 128 accumulators per thread (of the 168 registers ptxas
// gives a thread of this 384-thread block, setmaxnreg notwithstanding). It reads 32 KB per k step
// from L2 where a shared 128 x 256 read 48 KB for twice the products: the price of a tile per
// consumer. The wgmma descriptors are advanced from each stage's, not made afresh per wgmma. The
// epilogue computes the readable one's d = 1 - dot * inverse[i] * inverse[j] and stores it through
// shared memory, as wgmma_gemm_fast stores C, so that its stores are whole 16-byte vectors: each
// warp stages its 16 rows of a half, whole, and reads them back a half warp per row. A row of the
// packed triangle is a contiguous run (row i holds j = i + 1 .. N - 1), but it starts wherever row
// i - 1 ended: the staging rotates each row by its run's offset from a 16-byte boundary, so that a
// boundary of the output is one of the staging; only the up to 4 floats at the ends of a unit's
// row (and the pairs at the diagonal and at N) are stored one by one. The epilogue runs on one warp
// per scheduler (the other consumer's warps wait on their wgmma), so nothing hides its latencies
// but its own order: the norms are loaded before the products (the rows' into registers, the
// columns' into a list in shared memory), a unit whose every pair is stored takes a path without
// tests, and the read-back issues its loads before its stores (dev/tuning/10_inference.md has each
// step's figure, and the ways not taken: stores straight from the accumulators, TMA's bulk copies
// of the staged rows). The sums meet once per block, one atomic each. Where the GPU is not a Hopper
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
constexpr int kStages = 5;  // shared stages in the ring (what the 227 KB hold beside the staging)
constexpr int kConsumers = 2;  // consumer warpgroups
constexpr int kWarpgroupThreads = 128;
constexpr int kConsumerThreads = kConsumers * kWarpgroupThreads;
constexpr int kThreads = kWarpgroupThreads + kConsumerThreads;  // the producer warpgroup first
constexpr int kWgmmaM = 64, kWgmmaN = 128, kWgmmaK = 16;        // wgmma.m64n128k16
constexpr int kHalves = kBM / kWgmmaM;                          // an accumulator each
constexpr int kHalfAccumulators = kWgmmaM * kWgmmaN / kWarpgroupThreads;  // floats per thread
constexpr int kTileBytes = kBM * kBK * 2;  // the i tile and the j tile alike
constexpr int kStageBytes = 2 * kTileBytes;
// The epilogue's staging: each consumer warp owns kWarpRows rows of each half and stages them
// whole (kBN floats a row), one half after the other, then reads them back.
constexpr int kWarpRows = 16;                        // a warp's rows of the wgmma D layout
constexpr int kColumnPairs = kHalfAccumulators / 4;  // a thread's column pairs (8 columns apart)
constexpr int kStagingFloats = kWarpRows * kBN;      // per warp
constexpr int kStagingBytes = kConsumerThreads / 32 * kStagingFloats * 4;
// Each consumer's list of its unit's column norms (1 / |x_j|), which every warp reads.
constexpr int kColumnNormsBytes = kConsumers * kBN * 4;
// The stages, the staging, the column norms, + room to align the stages to 1 KB.
constexpr int kSharedBytes = kStages * kStageBytes + kStagingBytes + kColumnNormsBytes + 1024;
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
constexpr int kNormsBarrier = kTurnBarrier + kConsumers;  // consumer c's column norms: + c

static_assert(kBM == kHalves * kWgmmaM && kBN == kWgmmaN, "a unit is one consumer's wgmma pair");
static_assert(kBM == kBN, "a unit is a square of the triangle, its two tiles one box of X");
static_assert(kConsumers == 2,
              "the consumers take turns: each hands the tensor cores to the other");
static_assert(kSumBarrier < kTurnBarrier && kNormsBarrier + kConsumers <= 16,
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
static_assert(kWarpRows * (kWarpgroupThreads / 32) == kWgmmaM && kBN == 8 * kColumnPairs,
              "each warp of a consumer stages its own 16 rows of each half, whole");
static_assert(kBN == 128, "a staged row's rotation wraps at 128 floats (rotation() says why)");

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

// wgmma_gemm's issue_stage, for two halves, from the descriptors of the stage's A and B tiles:
// each k16 step multiplies the A tile's upper and lower 64 rows (8 KB apart, whole swizzle
// patterns) by the whole B tile, the k16 steps 32 bytes apart in their rows, one wgmma group
// between the fences the accumulators need. The descriptors are advanced from the tiles', not
// made afresh for each wgmma: made so, they were 133 instructions a stage for its 8 wgmma, and
// the products fell behind while the other consumer's epilogue shared the warp schedulers.
__device__ void issue_stage(float (&acc)[kHalves][kHalfAccumulators], std::uint64_t a_tile,
                            std::uint64_t b_tile) {
    fence_accumulators(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kBK / kWgmmaK; ++s)
#pragma unroll
        for (int h = 0; h < kHalves; ++h)
            hopper::wgmma_m64n128k16<0>(
                acc[h],
                course::wgmma_descriptor_advance(a_tile,
                                                 h * kWgmmaM * course::kSwizzleRowBytes + 32 * s),
                course::wgmma_descriptor_advance(b_tile, 32 * s), true);
    hopper::wgmma_commit();
}

// Where row `row`'s run of the packed triangle would hold column 0: triangle_index(row, col, N)
// is run_origin(row, N) + col for every col > row (row 0's origin is -1). In int: the triangle has
// 33.5M places at N 8192, and the rows reach N + 127.
__device__ int run_origin(int row, int N) { return row * N - row * (row + 1) / 2 - row - 1; }

// Where a staged row holds its column c: at (c + rotation) % kBN. Column c of row `row` lands in
// the output at run_origin(row, N) + col0 + c, a 16-byte boundary when c + run_origin is a
// multiple of 4; the rotation is that origin's remainder mod 4 (so that a boundary of the output
// is one of the staging, as the read-back's 16-byte loads and stores ask) plus 8 floats per row of
// the warp's quarter (so that the 8 rows a staging store writes start in different banks: about 2
// wavefronts a store, which the column pairs' even offsets allow no fewer of). Below 32: a
// thread's column c = 8 p + (0 .. 7) wraps only for p >= 12 (staged_position).
__device__ int rotation(int row_in_warp, int row, int N) {
    return (run_origin(row, N) & 3) + 8 * (row_in_warp % 4);
}

// Where a thread's column pair p, column c = 8 p + offset (offset = its column in the pair's 8
// plus the rotation, under 40), is staged: only pairs 12 .. 15 can wrap past kBN.
__device__ int staged_position(int p, int offset) {
    const int position = 8 * p + offset;
    return p < 12 ? position : (position < kBN ? position : position - kBN);
}

// The rows r = lane / 4 + 8 k (k = 0, 1) of a warp's 16, the thread's rows in the wgmma D layout.
__device__ int thread_row(int lane, int k) { return lane / 4 + 8 * k; }

// The warp's 16 staged rows into the packed triangle: a half warp per row, each lane 16 bytes at
// a time from the staging (a 16-byte boundary of the output is one of the staging: rotation()) to
// the row's run, the body's 31 or 32 vectors in two passes of the half warp, and the up to 4 floats
// at the ends of the unit's 128 columns (3 before the first boundary, 1 after the last, say) one
// by one. kMasked: the row's stored columns are cut by the diagonal or by N (and the ends may be
// up to 6 + 3 floats where no whole vector fits).
template <bool kMasked>
__device__ void store_rows(const float* staging, float* distances, int N, const Unit& unit,
                           int first_row, int lane) {
    constexpr int kRows = kWarpRows / 2;  // the half warp's rows
    const int e = lane % 16;              // the lane's place in its half warp
    // All the lane's reads first, then its stores: the loads' latencies overlap, where a store
    // right after its load waited for it (one warp a scheduler runs the epilogue: no other warp
    // hides the wait).
    float4 body[kRows][2];
    float end[kRows];
    float* place[kRows];  // where the row's column 0 of the unit goes
    int body_begin[kRows], body_end[kRows], end_column[kRows];
    bool has_end[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
        const int r = 2 * i + lane / 16, row = first_row + r;
        const int origin = run_origin(row, N) + unit.col0;
        place[i] = distances + origin;
        const float* const staged_row = staging + r * kBN;
        const int rotate = rotation(r, row, N);
        const auto staged = [&](int c) { return staged_row + ((c + rotate) & (kBN - 1)); };
        // The row's stored columns of the unit (row < col0 + c < N: none for rows past N), and
        // its body: from the first 16-byte boundary at or after c_begin to the last at or before
        // c_end.
        const int c_begin = kMasked ? min(max(row + 1 - unit.col0, 0), kBN) : 0;
        const int c_end = kMasked ? max(min(kBN, N - unit.col0), c_begin) : kBN;
        const int aligned = c_begin + (-(origin + c_begin) & 3);  // a boundary, body or not
        int begin = aligned;
        int stop = c_end - ((origin + c_end) & 3);
        if (kMasked && begin >= stop) begin = stop = c_end;
        body_begin[i] = begin;
        body_end[i] = stop;
#pragma unroll
        for (int pass = 0; pass < 2; ++pass)  // (read whether stored or not: one branch less)
            body[i][pass] = *reinterpret_cast<const float4*>(staged(aligned + 4 * (e + 16 * pass)));
        // The ends: lane e holds the e-th float of those before the body, then of those after.
        const int before = begin - c_begin, after = c_end - stop;
        end_column[i] = e < before ? c_begin + e : stop + e - before;
        has_end[i] = e < before + after;
        end[i] = *staged(end_column[i]);
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
            const int c = body_begin[i] + 4 * (e + 16 * pass);
            if (c < body_end[i]) __stcs(reinterpret_cast<float4*>(place[i] + c), body[i][pass]);
        }
        if (has_end[i]) __stcs(place[i] + end_column[i], end[i]);
    }
}

// A consumer's unit, its 128 x 128 dot products, normalized, into the packed triangle where
// row < col < N; returns the sum of the distances it wrote (kMasked: the unit has pairs that are
// not stored, on the diagonal or past N; without it every pair is stored, and no test is made).
// Each warp holds 16 rows of each half (the wgmma D layout: register 4 p + 2 k + b of a half is
// the product of row thread_row(lane, k) and column 8 p + 2 (lane % 4) + b of the warp's 16 x
// 128, course::wgmma_d_element) and writes the halves one after the other: the distances into its
// own `staging` (8 KB, no other warp's; a __syncwarp orders the writes and the reads), then
// store_rows. `inverse_row` holds the norms of the thread's rows, `column_norms` the unit's
// columns'.
template <bool kMasked>
__device__ float store_distances(const float (&acc)[kHalves][kHalfAccumulators],
                                 const float (&inverse_row)[kHalves][2], const float* column_norms,
                                 float* distances, int N, const Unit& unit, int thread,
                                 float* staging) {
    const int warp = thread / 32, lane = thread % 32;
    float sums[4] = {};  // four chains of adds, not one
#pragma unroll
    for (int half = 0; half < kHalves; ++half) {
        const int first_row = unit.row0 + half * kWgmmaM + warp * kWarpRows;
        __syncwarp();   // the previous half's (or unit's) rows are read back
        int offset[2];  // where the thread's columns 8 p + (0, 1) of each row are staged, less 8 p
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const int r = thread_row(lane, k);
            offset[k] = 2 * (lane % 4) + rotation(r, first_row + r, N);
        }
#pragma unroll
        for (int p = 0; p < kColumnPairs; ++p) {
            const float2 inverse_column =
                *reinterpret_cast<const float2*>(column_norms + 8 * p + 2 * (lane % 4));
#pragma unroll
            for (int k = 0; k < 2; ++k)
#pragma unroll
                for (int b = 0; b < 2; ++b) {
                    const int r = thread_row(lane, k);
                    const float product = acc[half][4 * p + 2 * k + b];
                    const float d = 1.0f - product * inverse_row[half][k] *
                                               (b == 0 ? inverse_column.x : inverse_column.y);
                    staging[r * kBN + staged_position(p, offset[k] + b)] = d;
                    const int row = first_row + r, col = unit.col0 + 8 * p + 2 * (lane % 4) + b;
                    if (!kMasked || (row < col && col < N)) sums[p % 4] += d;
                }
        }
        __syncwarp();
        store_rows<kMasked>(staging, distances, N, unit, first_row, lane);
    }
    return (sums[0] + sums[1]) + (sums[2] + sums[3]);
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
        // The consumer's number, read from lane 0 so that ptxas sees it is the same in every lane
        // of a warp, and keeps what follows from it (the stage, the descriptors) in uniform
        // registers (flash_wgmma_fast.cu does the same).
        const int consumer = __shfl_sync(0xffffffffu, warpgroup - 1, 0);
        const int thread = threadIdx.x % kWarpgroupThreads;
        // The descriptors of stage 0's A and B tiles; stage s's are s stages' bytes further.
        const std::uint64_t a_stage0 =
            course::wgmma_descriptor_k_major_128b(hopper::shared_address(a_tile(0)));
        const std::uint64_t b_stage0 =
            course::wgmma_descriptor_k_major_128b(hopper::shared_address(b_tile(0)));
        float* const staging = reinterpret_cast<float*>(stages + kStages * kStageBytes) +
                               (consumer * kWarpgroupThreads + thread) / 32 * kStagingFloats;
        float* const column_norms =
            reinterpret_cast<float*>(stages + kStages * kStageBytes + kStagingBytes) +
            consumer * kBN;
        float sum = 0.0f;
        for (int l = consumer, u = blockIdx.x + consumer * gridDim.x; u < units;
             l += kConsumers, u += kConsumers * gridDim.x) {
            const Unit unit = unit_of(u, squares);
            // Wait for the turn: the other consumer has issued all of unit l - 1's products (the
            // block's first unit has no one before it). Every warp of this consumer is then past
            // unit l - 2's distances, which read the column norms rewritten below.
            if (l > 0) hopper::named_barrier_sync(kTurnBarrier + consumer, kConsumerThreads);
            // The norms the distances need, loaded now and used after the products: the
            // thread's rows' (rows past N read row N - 1's: never stored), and column `thread`
            // of the unit's, for the consumer's list.
            float inverse_row[kHalves][2];
#pragma unroll
            for (int h = 0; h < kHalves; ++h)
#pragma unroll
                for (int k = 0; k < 2; ++k)
                    inverse_row[h][k] =
                        inverse[min(unit.row0 + h * kWgmmaM + thread / 32 * kWarpRows +
                                        thread_row(thread % 32, k),
                                    N - 1)];
            const float inverse_column = inverse[min(unit.col0 + thread, N - 1)];
            float acc[kHalves][kHalfAccumulators] = {};
            int load = l * k_tiles;
            for (int kt = 0; kt < k_tiles; ++kt, ++load) {
                const int stage = load % kStages;
                hopper::mbarrier_wait(&full[stage], load / kStages % 2);
                issue_stage(acc, course::wgmma_descriptor_advance(a_stage0, stage * kStageBytes),
                            course::wgmma_descriptor_advance(b_stage0, stage * kStageBytes));
                // This stage's products may still run; the previous stage's are done.
                hopper::wgmma_wait<1>();
                fence_accumulators(acc);
                if (kt > 0) hopper::mbarrier_arrive(&empty[(load - 1) % kStages]);
            }
            column_norms[thread] = inverse_column;
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
            hopper::named_barrier_sync(kNormsBarrier + consumer, kWarpgroupThreads);  // the list
            // Every pair of the unit is stored (off the diagonal, all its columns below N, and
            // so its rows), or some are not.
            if (unit.col0 > unit.row0 && unit.col0 + kBN <= N)
                sum += store_distances<false>(acc, inverse_row, column_norms, distances, N, unit,
                                              thread, staging);
            else
                sum += store_distances<true>(acc, inverse_row, column_norms, distances, N, unit,
                                             thread, staging);
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
    const int multiprocessors = course::multiprocessor_count();
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
