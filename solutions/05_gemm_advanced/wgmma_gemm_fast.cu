// 05_gemm_advanced/wgmma_gemm_fast: the warp-specialized wgmma GEMM as a persistent kernel, and
// the same kernel as the trainer's GEMM (either layout of each operand, an epilogue, split K).
// Fast reference (the readable one is wgmma_gemm.cu).
//
// Teaches: what a block per tile leaves on the table once the main loop runs at the tensor cores'
// pace: each block fills its ring from empty (the first tiles' copies are waited for with nothing
// to overlap them) and writes its tile of C while its SM's tensor cores idle, and a new block
// starts only when the old one has left. Here one block per SM stays for the whole product and
// walks the tiles (grouped order, a stride of the grid): the producer runs on into the next tile's
// copies as soon as a stage is free, so that the consumers find their ring full when they come
// back from writing C, and each consumer releases its last stage of a tile before writing it.
// Same tiles, stages, barriers, wgmma and register split as the readable kernel (its constants
// and tensor maps are used as they are); only the loops around them change.
//
// Beyond the exercise (gemm_bf16_epilogue.h, a stretch no hint teaches): the products of a
// training step. Each operand may be MN-major (m or n contiguous, a transposed matrix): TMA copies
// it in boxes of 64 m (n) by 64 k, and wgmma reads it with its transpose bit and a descriptor of
// that layout, so a transposed weight or activation is never copied. The epilogue adds a bias,
// applies GPT-2's GELU (keeping its input) or multiplies by its derivative, and stores bf16; or it
// adds into float, where a weight gradient's few output tiles (768 x 768 is 18 tiles of 128 x 256
// for 132 SMs) split their long K (the tokens) over several blocks, whose partial tiles the last
// one to finish adds up in a fixed order: the same bits on every run.
//
// Run:  grader run 05/wgmma_gemm --solutions      (the "wgmma_gemm (fast)" row)
// Contract: gemm_bf16.h, gemm_bf16_epilogue.h     Notes:   notes/05_gemm_advanced.md
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "gemm_bf16_epilogue.h"
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
using readable::kBTileBytes;
using readable::kConsumerRegisters;
using readable::kConsumers;
using readable::kGroupRows;
using readable::kProducerRegisters;
using readable::kSharedBytes;
using readable::kStageBytes;
using readable::kStages;
using readable::kThreads;
using readable::kWarpgroupThreads;
using readable::kWgmmaK;
using readable::kWgmmaM;

namespace {

// An MN-major operand tile is copied in boxes of kBox elements of m (or n), the 128 bytes of the
// swizzle span, by kBK rows of k: 2 boxes for A's 128 rows, 4 for B's 256. A box is the 64 m (n)
// that one consumer's wgmma reads as a unit.
constexpr int kBox = 64;
constexpr int kBoxBytes = kBox * kBK * 2;
static_assert(kATileBytes == (kBM / kBox) * kBoxBytes && kBTileBytes == (kBN / kBox) * kBoxBytes,
              "a tile is whole boxes in either layout");
static_assert(kWgmmaM * course::kSwizzleRowBytes == kBoxBytes,
              "a consumer's 64 rows start kBoxBytes apart in either layout");

// Split K: at most kMaxSplits blocks per output tile, and what writing (or reading back) one
// block's partial tile costs, in k tiles of the main loop: 128 KB at about 75 GB/s per SM (an
// H100's L2 bandwidth shared by its 132 SMs) is 1.7 us, a k tile's 4.2 MFLOP at 5.6 TFLOP/s per
// SM 0.75 us.
constexpr int kMaxSplits = 16;
constexpr int kPartialCost = 2;

// Where a tile's products go: gemm_bf16's float C (written), or a gemm_bf16_epilogue's epilogue.
struct Output {
    float* c = nullptr;
    GemmEpilogue epilogue;
};

// K split over `count` blocks per output tile (1: not split). partials: [tile][split][consumer]
// one consumer's accumulators as float4s, [register / 4][thread]; arrivals: [tile][consumer], the
// splits done so far, 0 between launches.
struct Splits {
    int count = 1;
    float* partials = nullptr;
    int* arrivals = nullptr;
};

// One block's share of the product: split `split` of output tile (row0, col0), k tiles
// [first, last) (split s of n takes [s k_tiles / n, (s + 1) k_tiles / n): never empty, since n is
// at most k_tiles).
struct Unit {
    int tile, split, row0, col0, first, last;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the Hopper instructions exist in sm_90a code only

// GPT-2's GELU, the tanh approximation (module 08's gelu.h has the same constants).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__device__ Unit unit_of(int index, int tiles_m, int tiles_n, int k_tiles, int splits) {
    const int tile = index / splits, split = index % splits;
    const course::Coord t = course::grouped_tile(tile, tiles_m, tiles_n, kGroupRows);
    return {tile,
            split,
            t.row * kBM,
            t.col * kBN,
            split * k_tiles / splits,
            (split + 1) * k_tiles / splits};
}

// Boxes of kBox that an MN-major tile starting at `first` (of `extent` m or n) copies: those that
// reach into the matrix. A box wholly past its edge is not copied: its rows of shared memory feed
// only products past M (or N), which are never stored.
__device__ int boxes_in(int first, int extent, int tile) {
    return min(tile / kBox, course::ceil_div(extent - first, kBox));
}

// The bytes the copies of one stage of `unit` deliver: whole tiles where K-major (TMA fills past
// the edges with zeros and counts them), the boxes copied where MN-major.
template <GemmMajor kA, GemmMajor kB>
__device__ int stage_bytes(const Unit& unit, int M, int N) {
    const int a = kA == GemmMajor::kK ? kATileBytes : boxes_in(unit.row0, M, kBM) * kBoxBytes;
    const int b = kB == GemmMajor::kK ? kBTileBytes : boxes_in(unit.col0, N, kBN) * kBoxBytes;
    return a + b;
}

// The copies of one stage: A's tile at rows (or, MN-major, columns) row0.., B's at col0.., both
// at k0. K-major, one box per tile; MN-major, boxes of kBox along m (n), each kBK rows of k.
template <GemmMajor kA, GemmMajor kB>
__device__ void load_stage(unsigned char* a_tile, unsigned char* b_tile, const CUtensorMap* a_map,
                           const CUtensorMap* b_map, const Unit& unit, int M, int N, int k0,
                           std::uint64_t* full) {
    if constexpr (kA == GemmMajor::kK) {
        hopper::tma_load_2d(a_tile, a_map, k0, unit.row0, full);
    } else {
        for (int box = 0; box < boxes_in(unit.row0, M, kBM); ++box)
            hopper::tma_load_2d(a_tile + box * kBoxBytes, a_map, unit.row0 + box * kBox, k0, full);
    }
    if constexpr (kB == GemmMajor::kK) {
        hopper::tma_load_2d(b_tile, b_map, k0, unit.col0, full);
    } else {
        for (int box = 0; box < boxes_in(unit.col0, N, kBN); ++box)
            hopper::tma_load_2d(b_tile + box * kBoxBytes, b_map, unit.col0 + box * kBox, k0, full);
    }
}

// The descriptor of k16 step `step` of an operand tile starting at `start` (shared address).
// K-major: course::wgmma_descriptor_k_major_128b, the step 32 bytes into the rows. MN-major (PTX
// ISA, "Shared Memory Matrix Layout", the MN-major 128-byte swizzle; CUTLASS's make_gmma_desc for
// Major::MN): a row is 64 m (n) of one k, groups of 8 rows of k are 1024 bytes apart (the stride
// dimension byte offset), boxes of 64 m (n) kBoxBytes apart (the leading dimension byte offset),
// and the step starts 16 rows of k further.
template <GemmMajor kMajor>
__device__ std::uint64_t operand_descriptor(std::uint32_t start, int step) {
    if constexpr (kMajor == GemmMajor::kK)
        return course::wgmma_descriptor_k_major_128b(start + 32 * step);
    else
        return course::wgmma_descriptor(start + kWgmmaK * course::kSwizzleRowBytes * step,
                                        kBoxBytes, 8 * course::kSwizzleRowBytes,
                                        course::WgmmaSwizzle::k128B);
}

// One stage's products for a consumer: its 64 rows of A by the whole B tile, as one wgmma group
// between the fences the accumulators need; an MN-major operand sets its transpose bit.
template <GemmMajor kA, GemmMajor kB>
__device__ void issue_stage(float (&acc)[kAccumulators], const unsigned char* a_stage,
                            const unsigned char* b_stage, int consumer) {
    const std::uint32_t a_start = hopper::shared_address(a_stage) + consumer * kBoxBytes;
    const std::uint32_t b_start = hopper::shared_address(b_stage);
    hopper::fence_accumulators(acc);
    hopper::wgmma_fence();
#pragma unroll
    for (int s = 0; s < kBK / kWgmmaK; ++s)
        hopper::wgmma_m64n256k16<kA == GemmMajor::kMN, kB == GemmMajor::kMN>(
            acc, operand_descriptor<kA>(a_start, s), operand_descriptor<kB>(b_start, s), true);
    hopper::wgmma_commit();
}

// GELU(x) = 0.5 x (1 + tanh u) = x sigmoid(2 u), u = sqrt(2 / pi) (x + 0.044715 x^3): the same
// function in an exp and a division. tanhf is a long sequence with branches, and the epilogue
// unrolls one GELU per accumulator (128 per thread per tile): with tanhf the kernel's code grew
// to some 11,800 instructions, its warps stalled on instruction fetch, and the trainer's products
// with GELU ran at a quarter of cuBLAS's rate (ncu, dev/tuning/trainer_fast_table.md). __expf's
// error (a few units in the last place) and the division's stay far under bf16's rounding; where
// exp(-2u) overflows, x / inf is the limit, 0. 1 + tanh u near -1 loses no digits this way.
__device__ float gelu_sigmoid(float x) {  // sigmoid(2u) = 0.5 (1 + tanh u)
    return __fdividef(1.0f, 1.0f + __expf(-2.0f * kGeluScale * (x + kGeluCubic * x * x * x)));
}

__device__ float gelu(float x) { return x * gelu_sigmoid(x); }

// d/dx of gelu(): s + x s' with s = sigmoid(2u), s' = 2 s (1 - s) du/dx (the chain rule through
// the sigmoid and u).
__device__ float gelu_derivative(float x) {
    const float s = gelu_sigmoid(x);
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du_dx;
}

// What a tile's products become, one kind per launch (Output): each kind is its own unrolled
// loop, so that a tile runs only its kind's code, not every kind's branches 64 times over.
enum class Store { kFloat, kAccumulate, kBf16, kBf16Gelu, kBf16GeluBackward };

// Two neighbouring products (v0, v1) of one row, at element `index` of the M x N output, column
// `col` (even: N is a multiple of 8, so a pair is inside the output or outside it).
template <Store kStore>
__device__ void store_pair(const Output& out, int index, int col, float v0, float v1) {
    const GemmEpilogue& e = out.epilogue;
    if constexpr (kStore == Store::kFloat) {
        *reinterpret_cast<float2*>(out.c + index) = make_float2(v0, v1);
    } else if constexpr (kStore == Store::kAccumulate) {
        float2* c = reinterpret_cast<float2*>(e.accumulate + index);
        const float2 old = *c;
        *c = make_float2(old.x + v0, old.y + v1);
    } else {
        if (kStore != Store::kBf16GeluBackward && e.bias) {
            const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162*>(e.bias + col);
            v0 += __low2float(b);
            v1 += __high2float(b);
        }
        if constexpr (kStore == Store::kBf16Gelu) {
            *reinterpret_cast<__nv_bfloat162*>(e.gelu_input + index) =
                __floats2bfloat162_rn(v0, v1);
            v0 = gelu(v0);
            v1 = gelu(v1);
        } else if constexpr (kStore == Store::kBf16GeluBackward) {
            const __nv_bfloat162 g =
                *reinterpret_cast<const __nv_bfloat162*>(e.gelu_backward_input + index);
            v0 *= gelu_derivative(__low2float(g));
            v1 *= gelu_derivative(__high2float(g));
        }
        *reinterpret_cast<__nv_bfloat162*>(e.out + index) = __floats2bfloat162_rn(v0, v1);
    }
}

// A consumer's 64 x 256 accumulators into the output at (row0 + 64 consumer, col0). Registers
// 4 j + {0, 1} are two neighbouring columns of one row, 4 j + {2, 3} the same eight rows below.
// Every matrix has fewer than 2^31 elements: an int index holds.
template <Store kStore>
__device__ void store_tile_as(const float (&acc)[kAccumulators], const Output& out, int M, int N,
                              int row0, int col0, int consumer, int thread) {
#pragma unroll
    for (int reg = 0; reg < kAccumulators; reg += 2) {
        const course::Coord e = course::wgmma_d_element(thread, reg);
        const int row = row0 + consumer * kWgmmaM + e.row, col = col0 + e.col;
        if (row < M && col < N) store_pair<kStore>(out, row * N + col, col, acc[reg], acc[reg + 1]);
    }
}

__device__ void store_tile(const float (&acc)[kAccumulators], const Output& out, int M, int N,
                           int row0, int col0, int consumer, int thread) {
    const GemmEpilogue& e = out.epilogue;
    if (out.c)
        store_tile_as<Store::kFloat>(acc, out, M, N, row0, col0, consumer, thread);
    else if (e.accumulate)
        store_tile_as<Store::kAccumulate>(acc, out, M, N, row0, col0, consumer, thread);
    else if (e.gelu_input)
        store_tile_as<Store::kBf16Gelu>(acc, out, M, N, row0, col0, consumer, thread);
    else if (e.gelu_backward_input)
        store_tile_as<Store::kBf16GeluBackward>(acc, out, M, N, row0, col0, consumer, thread);
    else
        store_tile_as<Store::kBf16>(acc, out, M, N, row0, col0, consumer, thread);
}

// The 128 threads of one consumer warpgroup (named barrier 1 or 2; 0 is __syncthreads).
__device__ void consumer_barrier(int consumer) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + consumer), "n"(kWarpgroupThreads) : "memory");
}

__device__ float4* partial_of(const Splits& splits, const Unit& unit, int split, int consumer) {
    const long long slot =
        (static_cast<long long>(unit.tile) * splits.count + split) * kConsumers + consumer;
    return reinterpret_cast<float4*>(splits.partials) +
           slot * (kAccumulators / 4) * kWarpgroupThreads;
}

// A consumer's share of a split tile: its partial sums go to the workspace and are counted; the
// consumer that counts the tile's last split (whichever block that is) adds every split's
// partial, in split order (the same bits whatever the order they finished in), into acc, and
// returns true: it stores the tile. The others return false.
__device__ bool gather_splits(float (&acc)[kAccumulators], const Splits& splits, const Unit& unit,
                              int consumer, int thread, int* last_split) {
    float4* mine = partial_of(splits, unit, unit.split, consumer);
#pragma unroll
    for (int q = 0; q < kAccumulators / 4; ++q)
        mine[q * kWarpgroupThreads + thread] =
            make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
    __threadfence();  // this thread's partial is visible to the whole GPU before it is counted
    consumer_barrier(consumer);
    if (thread == 0) {
        int* arrivals = splits.arrivals + unit.tile * kConsumers + consumer;
        const bool last = atomicAdd(arrivals, 1) == splits.count - 1;
        if (last) *arrivals = 0;  // the next launch counts from 0
        *last_split = last;
    }
    consumer_barrier(consumer);
    if (!*last_split) return false;
    __threadfence();  // the other splits' partials, counted before ours, are read after the count
#pragma unroll
    for (int r = 0; r < kAccumulators; ++r) acc[r] = 0.0f;
    for (int s = 0; s < splits.count; ++s) {
        const float4* partial = partial_of(splits, unit, s, consumer);
#pragma unroll
        for (int q = 0; q < kAccumulators / 4; ++q) {
            // __ldcg: from L2, where the other SMs' stores are; never a stale line of this L1.
            const float4 v = __ldcg(partial + q * kWarpgroupThreads + thread);
            acc[4 * q] += v.x;
            acc[4 * q + 1] += v.y;
            acc[4 * q + 2] += v.z;
            acc[4 * q + 3] += v.w;
        }
    }
    return true;
}

// The persistent kernel's body: one block per SM walks the units (grouped order, a stride of the
// grid), the producer thread runs ahead into the next unit's copies, the consumers release each
// unit's last stage before storing it. Both roles count the same loads: load number `load` (over
// all the block's units) goes to stage load % kStages in pass load / kStages of the ring.
template <GemmMajor kA, GemmMajor kB>
__device__ __forceinline__ void persistent_gemm(int M, int N, int K, const CUtensorMap* a_map,
                                                const CUtensorMap* b_map, const Output& out,
                                                const Splits& splits) {
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t full[kStages];   // phase done: the stage's copies have landed
    __shared__ std::uint64_t empty[kStages];  // phase done: every consumer is done reading it
    __shared__ int last_split[kConsumers];    // gather_splits' answer, per consumer
    unsigned char* const stages =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    const auto a_tile = [&](int stage) { return stages + stage * kStageBytes; };
    const auto b_tile = [&](int stage) { return stages + stage * kStageBytes + kATileBytes; };

    const int tiles_m = course::ceil_div(M, kBM), tiles_n = course::ceil_div(N, kBN);
    const int k_tiles = course::ceil_div(K, kBK);
    const int units = tiles_m * tiles_n * splits.count;
    const int warpgroup = threadIdx.x / kWarpgroupThreads;

    if (threadIdx.x == 0) {
        for (int s = 0; s < kStages; ++s) {
            hopper::mbarrier_init(&full[s], 1);
            hopper::mbarrier_init(&empty[s], kConsumers * kWarpgroupThreads);
        }
        hopper::fence_barrier_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        hopper::set_registers_decrease<kProducerRegisters>();
        if (threadIdx.x == 0) {
            int load = 0;
            for (int u = blockIdx.x; u < units; u += gridDim.x) {
                const Unit unit = unit_of(u, tiles_m, tiles_n, k_tiles, splits.count);
                const int bytes = stage_bytes<kA, kB>(unit, M, N);
                for (int kt = unit.first; kt < unit.last; ++kt, ++load) {
                    const int stage = load % kStages;
                    hopper::mbarrier_wait(&empty[stage], (load / kStages % 2) ^ 1);
                    hopper::mbarrier_arrive_expect_tx(&full[stage], bytes);
                    load_stage<kA, kB>(a_tile(stage), b_tile(stage), a_map, b_map, unit, M, N,
                                       kt * kBK, &full[stage]);
                }
            }
        }
    } else {
        hopper::set_registers_increase<kConsumerRegisters>();
        const int consumer = warpgroup - 1;
        const int thread = threadIdx.x % kWarpgroupThreads;
        int load = 0;
        for (int u = blockIdx.x; u < units; u += gridDim.x) {
            const Unit unit = unit_of(u, tiles_m, tiles_n, k_tiles, splits.count);
            float acc[kAccumulators] = {};
            for (int kt = unit.first; kt < unit.last; ++kt, ++load) {
                const int stage = load % kStages;
                hopper::mbarrier_wait(&full[stage], load / kStages % 2);
                issue_stage<kA, kB>(acc, a_tile(stage), b_tile(stage), consumer);
                hopper::wgmma_wait<1>();
                hopper::fence_accumulators(acc);
                if (kt > unit.first) hopper::mbarrier_arrive(&empty[(load - 1) % kStages]);
            }
            // The unit's last stage goes back to the producer before the output is written: its
            // next copies overlap the stores below. (A unit has at least one k tile.)
            hopper::wgmma_wait<0>();
            hopper::fence_accumulators(acc);
            hopper::mbarrier_arrive(&empty[(load - 1) % kStages]);

            if (splits.count == 1 ||
                gather_splits(acc, splits, unit, consumer, thread, &last_split[consumer]))
                store_tile(acc, out, M, N, unit.row0, unit.col0, consumer, thread);
        }
    }
}

#endif

}  // namespace

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_fast_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap a_map,
                           const __grid_constant__ CUtensorMap b_map, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    Output out;
    out.c = C;
    persistent_gemm<GemmMajor::kK, GemmMajor::kK>(M, N, K, &a_map, &b_map, out, Splits{});
#endif
}

// gemm_bf16_epilogue's kernel for one pair of operand layouts.
template <GemmMajor kA, GemmMajor kB>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_epilogue_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap a_map,
                         const __grid_constant__ CUtensorMap b_map,
                         const __grid_constant__ Output out,
                         const __grid_constant__ Splits splits) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    persistent_gemm<kA, kB>(M, N, K, &a_map, &b_map, out, splits);
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

// ---- gemm_bf16_epilogue (gemm_bf16_epilogue.h): the trainer's products ----

namespace {

using EpilogueKernel = void (*)(int, int, int, CUtensorMap, CUtensorMap, Output, Splits);

// The tensor map of an operand with `rows` rows of the product (M for A, N for B): stored rows x K
// where it is K-major (boxes of tile_rows x kBK), K x rows where MN-major (boxes of kBK x kBox).
// hopper::tensor_map takes the contract's element, which is bf16 wherever this runs (sm_90a); a
// build for sm_75 makes it fp16 but refuses before getting here, and the cast lets it compile.
CUtensorMap operand_map(const __nv_bfloat16* operand, GemmMajor major, int rows, int K,
                        int tile_rows) {
    const auto* matrix = reinterpret_cast<const course::TensorElement*>(operand);
    return major == GemmMajor::kK ? hopper::tensor_map(matrix, rows, K, tile_rows, kBK)
                                  : hopper::tensor_map(matrix, K, rows, kBK, kBox);
}

// How many blocks share each output tile's K where the product is added into float: the count
// whose busiest SM has the fewest k tiles to do, counting kPartialCost per partial written and,
// for the last split, per partial read back. 768 x 768 x 16384 on 132 SMs: 7 (126 blocks instead
// of 18); 50304 x 768 x 16384 (1179 tiles): 1.
int split_count(int tiles, int k_tiles, int multiprocessors) {
    int best = 1;
    long long best_cost =
        static_cast<long long>(course::ceil_div(tiles, multiprocessors)) * k_tiles;
    for (int count = 2; count <= std::min(kMaxSplits, k_tiles); ++count) {
        const long long cost =
            static_cast<long long>(course::ceil_div(tiles * count, multiprocessors)) *
                (course::ceil_div(k_tiles, count) + kPartialCost) +
            static_cast<long long>(count) * kPartialCost;
        if (cost < best_cost) best = count, best_cost = cost;
    }
    return best;
}

// The split products' workspace, grown to the largest request and reused (the products run one
// after another on the default stream): the partial tiles, and the arrival counts, zeroed when
// made (every launch leaves them at 0).
Splits split_workspace(int count, int tiles) {
    static float* partials = nullptr;
    static int* arrivals = nullptr;
    static std::size_t partial_floats = 0, arrival_ints = 0;
    const std::size_t floats =
        static_cast<std::size_t>(tiles) * count * kConsumers * kAccumulators * kWarpgroupThreads;
    if (floats > partial_floats) {
        if (partials) CUDA_CHECK(cudaFree(partials));
        CUDA_CHECK(cudaMalloc(&partials, floats * sizeof(float)));
        partial_floats = floats;
    }
    const std::size_t ints = static_cast<std::size_t>(tiles) * kConsumers;
    if (ints > arrival_ints) {
        if (arrivals) CUDA_CHECK(cudaFree(arrivals));
        CUDA_CHECK(cudaMalloc(&arrivals, ints * sizeof(int)));
        CUDA_CHECK(cudaMemset(arrivals, 0, ints * sizeof(int)));
        arrival_ints = ints;
    }
    return {count, partials, arrivals};
}

}  // namespace

void gemm_bf16_epilogue(int M, int N, int K, const __nv_bfloat16* A, GemmMajor a_major,
                        const __nv_bfloat16* B, GemmMajor b_major, const GemmEpilogue& epilogue) {
    if ((epilogue.out == nullptr) == (epilogue.accumulate == nullptr))
        throw std::invalid_argument("gemm_bf16_epilogue: exactly one of out and accumulate");
    // One kernel per pair of layouts ([A][B], kK first), each asked for its shared memory once.
    static const EpilogueKernel kernels[2][2] = {
        {gemm_epilogue_kernel<GemmMajor::kK, GemmMajor::kK>,
         gemm_epilogue_kernel<GemmMajor::kK, GemmMajor::kMN>},
        {gemm_epilogue_kernel<GemmMajor::kMN, GemmMajor::kK>,
         gemm_epilogue_kernel<GemmMajor::kMN, GemmMajor::kMN>}};
    static std::size_t available[2][2] = {};
    const int a = a_major == GemmMajor::kMN, b = b_major == GemmMajor::kMN;
    const EpilogueKernel kernel = kernels[a][b];

    int device = 0, major = 0, multiprocessors = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
    if (major != 9 || course::compiled_arch(kernel) != 90)
        throw std::runtime_error("wgmma_gemm: needs a Hopper GPU and device code for sm_90a");
    if (available[a][b] == 0) available[a][b] = course::opt_in_shared_bytes(kernel);
    if (available[a][b] < static_cast<std::size_t>(kSharedBytes))
        throw std::runtime_error("wgmma_gemm: needs " + std::to_string(kSharedBytes) +
                                 " bytes of shared memory per block; " +
                                 std::to_string(available[a][b]) + " here");

    const CUtensorMap a_map = operand_map(A, a_major, M, K, kBM);
    const CUtensorMap b_map = operand_map(B, b_major, N, K, kBN);
    const int tiles = course::ceil_div(M, kBM) * course::ceil_div(N, kBN);
    const int count =
        epilogue.accumulate ? split_count(tiles, course::ceil_div(K, kBK), multiprocessors) : 1;
    const Splits splits = count > 1 ? split_workspace(count, tiles) : Splits{};
    Output out;
    out.epilogue = epilogue;
    // One block per SM, none more than the units of work.
    const int blocks = std::min(tiles * count, multiprocessors);
    kernel<<<blocks, kThreads, kSharedBytes>>>(M, N, K, a_map, b_map, out, splits);
    CUDA_CHECK_LAUNCH();
}
