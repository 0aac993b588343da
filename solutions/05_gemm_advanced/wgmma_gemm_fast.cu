// 05_gemm_advanced/wgmma_gemm_fast: the warp-specialized wgmma GEMM as a persistent kernel, and
// the same kernel as the trainer's GEMM (either layout of each operand, an epilogue, Stream-K).
// Fast reference (the readable one is wgmma_gemm.cu).
//
// Teaches: what a block per tile leaves on the table once the main loop runs at the tensor cores'
// pace: each block fills its ring from empty (the first tiles' copies are waited for with nothing
// to overlap them) and writes its tile of C while its SM's tensor cores idle, and a new block
// starts only when the old one has left. Here one block per SM stays for the whole product and
// walks the tiles (grouped order, a stride of the grid): the producer runs on into the next tile's
// copies as soon as a stage is free, so that the consumers find their ring full when they come
// back from writing C, and each consumer releases its last stage of a tile before writing it.
// Same tiles, stages, barriers, wgmma and register split as the readable kernel (its constants,
// tensor maps and float store are used as they are); only the loops around them change.
//
// Beyond the exercise (gemm_bf16_epilogue.h, a stretch no hint teaches): the products of a
// training step. Each operand may be MN-major (m or n contiguous, a transposed matrix): TMA copies
// it in boxes of 64 m (n) by 64 k, and wgmma reads it with its transpose bit and a descriptor of
// that layout, so a transposed weight or activation is never copied. The epilogue adds a bias,
// applies GPT-2's GELU (keeping its input) or multiplies by its derivative, and stores bf16; or it
// adds into float. Its stores go through shared memory: each warp stages its accumulators (32 KB
// beside the stages), 64 columns at a time and swizzled against bank conflicts, then reads them
// back by rows and stores 16-byte vectors: whole sectors, and one small loop per kind of epilogue
// where an unrolled store per register pair made the kernel's code too large for the instruction
// cache. A weight gradient has few output tiles for a long K (the tokens: 768 x 768 is 18 tiles of
// 128 x 256 for 132 SMs): there the blocks share the product's k tiles evenly (Stream-K, Osama et
// al. 2023), a tile shared by several blocks gets their partial tiles added up, in a fixed order,
// by the last one to finish it: the same bits on every run.
//
// Run:  grader run 05/wgmma_gemm --solutions      (the "wgmma_gemm (fast)" row)
// Contract: gemm_bf16.h, gemm_bf16_epilogue.h     Notes:   notes/05_gemm_advanced.md
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>

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

// The epilogue's staging, beside the stages in shared memory: each consumer warp owns kWarpRows
// rows of its consumer's 64 and stages them kChunkColumns columns (kChunkRegisters accumulators
// per thread) at a time, then reads them back kVector columns per thread (16 bytes of bf16).
constexpr int kConsumerWarps = kWarpgroupThreads / 32;
constexpr int kWarpRows = kWgmmaM / kConsumerWarps;
constexpr int kChunkColumns = 64;
constexpr int kChunks = kBN / kChunkColumns;
constexpr int kChunkRegisters = kAccumulators / kChunks;
constexpr int kVector = 8;
constexpr int kStagingFloats = kWarpRows * kChunkColumns;  // per warp
constexpr int kStagingBytes = kConsumers * kConsumerWarps * kStagingFloats * 4;
constexpr int kFastSharedBytes = kSharedBytes + kStagingBytes;  // the staging after the stages
// The static shared memory beside them: persistent_gemm's barriers (72 bytes), which ptxas rounds
// up to 1024 so that the dynamic region starts on 1024 bytes, as shared_raw's __align__ asks.
constexpr int kStaticSharedBytes = 1024;
static_assert(kFastSharedBytes + kStaticSharedBytes <= 227 * 1024,
              "the stages and the staging fit the 227 KB an H100 block may opt into");
static_assert(kWarpRows == 16 && kChunkColumns % kVector == 0 && kBN % kChunkColumns == 0,
              "a warp's 16 rows of the wgmma D layout, read back in whole vectors");
static_assert(kStagingFloats / kVector % 32 == 0, "every lane reads as many vectors back");
static_assert(kChunkRegisters % 2 == 0, "a chunk stages whole register pairs");

// Stream-K's cost rule (schedule(), below) counts in k tiles of one block's main loop: a k tile is
// 4.2 MFLOP, 0.75 us at 5.6 TFLOP/s per SM. Writing one block's partial tile (128 KB) or reading
// one back costs kPartialCost of them: 128 KB at about 75 GB/s per SM (an H100's L2 bandwidth
// shared by its 132 SMs) is 1.7 us.
constexpr int kPartialCost = 2;

// The floats of one partial tile: each consumer's accumulators, [consumer][register / 4][thread]
// as float4s.
constexpr int kPartialFloats = kConsumers * kAccumulators * kWarpgroupThreads;

// How a launch's blocks share its output tiles (schedule()): the first sk_tiles tiles of the
// grouped order by Stream-K, the others data-parallel, whole, a stride of the grid each.
// Stream-K: the grid shares the sk_tiles x k_tiles k iterations evenly (block b takes
// [b S / grid, (b + 1) S / grid) of the S, tile after tile), so that a tile's k tiles may be
// split among consecutive blocks, its contributors. Position p of that sequence is tile
// (p % sk_classes) (sk_tiles / sk_classes) + p / sk_classes of the grouped order: positions
// sk_classes apart run their same k tiles at the same time (their blocks started the same
// distance before them), and this makes each such class of tiles neighbours that share their
// operands' k tiles in L2, as a data-parallel wave's tiles do. partials: slot p + b holds
// contributor b's partial tile of position p (p + b differ for every pair, since a tile's
// contributors follow its predecessor's); arrivals: [p][consumer] the contributors done so far,
// 0 between launches.
struct Schedule {
    int sk_tiles = 0;
    int sk_classes = 1;
    float* partials = nullptr;
    int* arrivals = nullptr;
};

// One block's walk through the schedule: its Stream-K iterations [begin, end), in `segments`
// pieces of tiles, then its data-parallel tiles: `units` in all.
struct Share {
    long long begin, end;
    int segments, units;
};

// One unit of a block's walk: k tiles [first, last) of the output tile at (row0, col0); position:
// its place in the Stream-K sequence, -1 for a data-parallel tile. A unit of every k tile
// (first 0, last k_tiles) is the block's alone.
struct Unit {
    int position, row0, col0, first, last;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the Hopper instructions exist in sm_90a code only

// GPT-2's GELU, the tanh approximation (module 08's gelu.h has the same constants).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// Iteration `block` S / grid of the Stream-K sequence: where that block's share begins.
__device__ long long share_begin(const Schedule& schedule, int k_tiles, int block) {
    return static_cast<long long>(schedule.sk_tiles) * k_tiles * block / gridDim.x;
}

// The block whose share holds iteration i: the last b with b S / grid <= i, that is b S < (i + 1)
// grid.
__device__ int block_of(const Schedule& schedule, int k_tiles, long long i) {
    const long long total = static_cast<long long>(schedule.sk_tiles) * k_tiles;
    return static_cast<int>(((i + 1) * gridDim.x - 1) / total);
}

__device__ Share share_of(const Schedule& schedule, int tiles, int k_tiles) {
    Share share;
    share.begin = share_begin(schedule, k_tiles, blockIdx.x);
    share.end = share_begin(schedule, k_tiles, blockIdx.x + 1);
    share.segments = share.end > share.begin
                         ? static_cast<int>((share.end - 1) / k_tiles - share.begin / k_tiles + 1)
                         : 0;
    const int whole = tiles - schedule.sk_tiles - static_cast<int>(blockIdx.x);
    share.units = share.segments + (whole > 0 ? course::ceil_div(whole, gridDim.x) : 0);
    return share;
}

// Unit n of the block's walk: the producer and the consumers both walk it with this.
__device__ Unit unit_of(const Schedule& schedule, const Share& share, int tiles_m, int tiles_n,
                        int k_tiles, int n) {
    Unit unit;
    int tile;
    if (n < share.segments) {
        const int p = static_cast<int>(share.begin / k_tiles) + n;
        const long long start = static_cast<long long>(p) * k_tiles;
        unit.position = p;
        unit.first = static_cast<int>(max(share.begin, start) - start);
        unit.last = static_cast<int>(min(share.end, start + k_tiles) - start);
        tile = p % schedule.sk_classes * (schedule.sk_tiles / schedule.sk_classes) +
               p / schedule.sk_classes;
    } else {
        unit.position = -1;
        unit.first = 0;
        unit.last = k_tiles;
        tile = schedule.sk_tiles + blockIdx.x + (n - share.segments) * gridDim.x;
    }
    const course::Coord t = course::grouped_tile(tile, tiles_m, tiles_n, kGroupRows);
    unit.row0 = t.row * kBM;
    unit.col0 = t.col * kBN;
    return unit;
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

// What gemm_bf16_epilogue's tile products become, one kind per launch (GemmEpilogue): each kind is
// its own loop, so that a tile runs only its kind's code.
enum class Store { kAccumulate, kBf16, kBf16Gelu, kBf16GeluBackward };

// Eight floats (32 bytes) from and to global memory.
__device__ void load_floats(const float* p, float (&v)[kVector]) {
    const float4 lo = reinterpret_cast<const float4*>(p)[0],
                 hi = reinterpret_cast<const float4*>(p)[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w, v[4] = hi.x, v[5] = hi.y, v[6] = hi.z,
    v[7] = hi.w;
}

__device__ void store_floats(float* p, const float (&v)[kVector]) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

// Eight bf16 (16 bytes) as floats, and floats rounded to eight bf16. The loads go through the
// read-only path (__ldg): bias and gelu_backward_input are never written by the kernel, so the
// compiler may issue a chunk's loads together, ahead of its stores.
__device__ void load_bf16s(const __nv_bfloat16* p, float (&v)[kVector]) {
    const uint4 bits = __ldg(reinterpret_cast<const uint4*>(p));
    const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&bits);
#pragma unroll
    for (int i = 0; i < kVector / 2; ++i) {
        v[2 * i] = __low2float(pairs[i]);
        v[2 * i + 1] = __high2float(pairs[i]);
    }
}

__device__ void store_bf16s(__nv_bfloat16* p, const float (&v)[kVector]) {
    uint4 bits;
    auto* pairs = reinterpret_cast<__nv_bfloat162*>(&bits);
#pragma unroll
    for (int i = 0; i < kVector / 2; ++i) pairs[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(p) = bits;
}

// Eight neighbouring products v of one row into the output, at element `index` of the M x N
// output, column `col` (a multiple of 8, as N is: the eight are inside the output or outside it).
template <Store kStore>
__device__ void store_vector(const GemmEpilogue& e, int index, int col, float (&v)[kVector]) {
    if constexpr (kStore == Store::kAccumulate) {
        float* const c = e.accumulate + index;
        float sum[kVector];
        load_floats(c, sum);
#pragma unroll
        for (int i = 0; i < kVector; ++i) sum[i] += v[i];
        store_floats(c, sum);
    } else {
        if (kStore != Store::kBf16GeluBackward && e.bias) {
            float b[kVector];
            load_bf16s(e.bias + col, b);
#pragma unroll
            for (int i = 0; i < kVector; ++i) v[i] += b[i];
        }
        if constexpr (kStore == Store::kBf16Gelu) {
            store_bf16s(e.gelu_input + index, v);
#pragma unroll
            for (int i = 0; i < kVector; ++i) v[i] = gelu(v[i]);
        } else if constexpr (kStore == Store::kBf16GeluBackward) {
            float g[kVector];
            load_bf16s(e.gelu_backward_input + index, g);
#pragma unroll
            for (int i = 0; i < kVector; ++i) v[i] *= gelu_derivative(g[i]);
        }
        store_bf16s(e.out + index, v);
    }
}

// Where column `col` (even) of row `row` of a warp's staged chunk lies. Rows of kChunkColumns
// floats, their 16-byte units XORed with a pattern of the row (a swizzle), which keeps both sides
// free of bank conflicts: a register pair's 8-byte stores put 4 rows x 8 columns in each half
// warp's access (patterns 0, 2, 4, 6 or 1, 3, 5, 7: the units land in 8 different groups of 4
// banks), and the read-back's 16-byte loads take one unit of 8 consecutive rows per quarter warp
// (8 different patterns).
__device__ int staged(int row, int col) {
    const int pattern = row % 4 * 2 + row / 4 % 2;
    return row * kChunkColumns + ((col / 4) ^ pattern) * 4 + col % 4;
}

// A consumer's 64 x 256 accumulators into the epilogue's output at (row0 + 64 consumer, col0),
// through shared memory: each warp holds 16 of the rows (the wgmma D layout: registers 4 j + {0, 1}
// are two neighbouring columns of one row, 4 j + {2, 3} the same eight rows below), and stages them
// a chunk of kChunkColumns columns at a time in its own `staging` (no other warp reads it: a
// __syncwarp orders the writes and the reads), then reads them back by rows, 8 columns per thread,
// applies the kind's epilogue and stores whole 16-byte vectors (32 bytes of float): every sector
// a warp writes, written whole, and the kind's code once per chunk instead of once per register
// pair. (gemm_bf16's float C needs none of it: there four threads' register pairs are already
// 32 contiguous bytes, a whole sector, and readable::store_tile stores them as they are.) Every
// matrix has fewer than 2^31 elements: an int index holds.
template <Store kStore>
__device__ void store_tile_as(const float (&acc)[kAccumulators], const GemmEpilogue& e, int M,
                              int N, int row0, int col0, int consumer, int thread, float* staging) {
    const int warp = thread / 32, lane = thread % 32;
    float* const mine = staging + (consumer * kConsumerWarps + warp) * kStagingFloats;
    const int first_row = row0 + consumer * kWgmmaM + warp * kWarpRows;
#pragma unroll 1
    for (int chunk = 0; chunk < kChunks; ++chunk) {
        // Registers need constant indices: every pair's store is unrolled, the chunk's are taken.
#pragma unroll
        for (int reg = 0; reg < kAccumulators; reg += 2) {
            if (reg / kChunkRegisters != chunk) continue;
            const course::Coord e = course::wgmma_d_element(thread, reg);
            *reinterpret_cast<float2*>(mine + staged(e.row % kWarpRows, e.col % kChunkColumns)) =
                make_float2(acc[reg], acc[reg + 1]);
        }
        __syncwarp();
        // Unrolled: the chunk's loads of global memory (gelu_backward_input, accumulate) in flight
        // together.
#pragma unroll
        for (int i = lane; i < kStagingFloats / kVector; i += 32) {
            const int r = i % kWarpRows, c = i / kWarpRows * kVector;  // a half warp: 16 rows
            const float4 lo = *reinterpret_cast<const float4*>(mine + staged(r, c));
            const float4 hi = *reinterpret_cast<const float4*>(mine + staged(r, c + 4));
            float v[kVector] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
            const int row = first_row + r, col = col0 + chunk * kChunkColumns + c;
            if (row < M && col < N) store_vector<kStore>(e, row * N + col, col, v);
        }
        __syncwarp();  // read back before the next chunk is staged over it
    }
}

__device__ void store_tile(const float (&acc)[kAccumulators], const GemmEpilogue& e, int M, int N,
                           int row0, int col0, int consumer, int thread, float* staging) {
    if (e.accumulate)
        store_tile_as<Store::kAccumulate>(acc, e, M, N, row0, col0, consumer, thread, staging);
    else if (e.gelu_input)
        store_tile_as<Store::kBf16Gelu>(acc, e, M, N, row0, col0, consumer, thread, staging);
    else if (e.gelu_backward_input)
        store_tile_as<Store::kBf16GeluBackward>(acc, e, M, N, row0, col0, consumer, thread,
                                                staging);
    else
        store_tile_as<Store::kBf16>(acc, e, M, N, row0, col0, consumer, thread, staging);
}

// What the epilogue of a consumer's 64 rows of a tile will read from global memory
// (gelu_backward_input, or accumulate), asked of L2 when the tile's main loop starts (the unit
// with its first k tile: a whole tile, or the share of the contributor that usually finishes a
// shared one last, since it reaches the tile at the end of its share, the others at the start of
// theirs): the epilogue's loads then wait for L2, not for DRAM, and its chunks one after the
// other cost little. One 128-byte line per thread and step.
__device__ void prefetch_epilogue(const GemmEpilogue& e, int M, int N, int row0, int col0,
                                  int consumer, int thread) {
    const char* base = e.accumulate ? reinterpret_cast<const char*>(e.accumulate)
                                    : reinterpret_cast<const char*>(e.gelu_backward_input);
    if (base == nullptr) return;
    const int bytes = e.accumulate ? 4 : 2;  // per element
    const int lines = kBN * bytes / 128;     // per row of the tile
    const int columns = 128 / bytes;         // per line
    for (int i = thread; i < kWgmmaM * lines; i += kWarpgroupThreads) {
        const int row = row0 + consumer * kWgmmaM + i / lines, col = col0 + i % lines * columns;
        if (row < M && col < N)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(
                base + (static_cast<long long>(row) * N + col) * bytes));
    }
}

// The 128 threads of one consumer warpgroup (named barrier 1 or 2; 0 is __syncthreads).
__device__ void consumer_barrier(int consumer) {
    hopper::named_barrier_sync(1 + consumer, kWarpgroupThreads);
}

// Contributor `block`'s partial of Stream-K position p, this consumer's part (Schedule).
__device__ float4* partial_of(const Schedule& schedule, int p, int block, int consumer) {
    return reinterpret_cast<float4*>(schedule.partials) +
           (static_cast<long long>(p + block) * kPartialFloats +
            consumer * kAccumulators * kWarpgroupThreads) /
               4;
}

// A consumer's segment of a tile shared by several blocks: its partial sums go to the workspace
// and are counted; the consumer that counts the tile's last contributor (whichever block that
// is) adds every contributor's partial, in contributor order from zero (the same bits whatever
// the order they finished in), into acc, and returns true: it stores the tile. The others return
// false. No block waits for another: a block's segments never depend on one still to run.
__device__ bool gather_partials(float (&acc)[kAccumulators], const Schedule& schedule, int k_tiles,
                                const Unit& unit, int consumer, int thread, int* last_arrival) {
    const long long start = static_cast<long long>(unit.position) * k_tiles;
    const int first = block_of(schedule, k_tiles, start);
    const int last = block_of(schedule, k_tiles, start + k_tiles - 1);
    float4* mine = partial_of(schedule, unit.position, blockIdx.x, consumer);
#pragma unroll
    for (int q = 0; q < kAccumulators / 4; ++q)
        mine[q * kWarpgroupThreads + thread] =
            make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
    __threadfence();  // this thread's partial is visible to the whole GPU before it is counted
    consumer_barrier(consumer);
    if (thread == 0) {
        int* arrivals = schedule.arrivals + unit.position * kConsumers + consumer;
        // atomicAdd returns the count before this one: the last of n contributors sees n - 1.
        const bool is_last = atomicAdd(arrivals, 1) == last - first;
        if (is_last) *arrivals = 0;  // the next launch counts from 0
        *last_arrival = is_last;
    }
    consumer_barrier(consumer);
    if (!*last_arrival) return false;
    __threadfence();  // the other contributors' partials, counted before ours, are read after
#pragma unroll
    for (int r = 0; r < kAccumulators; ++r) acc[r] = 0.0f;
    for (int block = first; block <= last; ++block) {
        const float4* partial = partial_of(schedule, unit.position, block, consumer);
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

// The persistent kernel's body: one block per SM walks its units (Schedule: its Stream-K
// segments, then its data-parallel tiles), the producer thread runs ahead into the next unit's
// copies, the consumers release each unit's last stage before storing it. Both roles count the
// same loads: load number `load` (over all the block's units) goes to stage load % kStages in
// pass load / kStages of the ring. Output: gemm_bf16's float C (a float*: every unit whole, its
// schedule data-parallel), or a GemmEpilogue.
template <GemmMajor kA, GemmMajor kB, class Output>
__device__ __forceinline__ void persistent_gemm(int M, int N, int K, const CUtensorMap* a_map,
                                                const CUtensorMap* b_map, const Output& out,
                                                const Schedule& schedule) {
    constexpr bool kEpilogue = std::is_same_v<Output, GemmEpilogue>;
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t full[kStages];   // phase done: the stage's copies have landed
    __shared__ std::uint64_t empty[kStages];  // phase done: every consumer is done reading it
    __shared__ int last_arrival[kConsumers];  // gather_partials' answer, per consumer
    unsigned char* const stages =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    const auto a_tile = [&](int stage) { return stages + stage * kStageBytes; };
    const auto b_tile = [&](int stage) { return stages + stage * kStageBytes + kATileBytes; };

    const int tiles_m = course::ceil_div(M, kBM), tiles_n = course::ceil_div(N, kBN);
    const int k_tiles = course::ceil_div(K, kBK);
    const Share share = share_of(schedule, tiles_m * tiles_n, k_tiles);
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
            for (int n = 0; n < share.units; ++n) {
                const Unit unit = unit_of(schedule, share, tiles_m, tiles_n, k_tiles, n);
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
        for (int n = 0; n < share.units; ++n) {
            const Unit unit = unit_of(schedule, share, tiles_m, tiles_n, k_tiles, n);
            if constexpr (kEpilogue) {
                if (unit.first == 0)
                    prefetch_epilogue(out, M, N, unit.row0, unit.col0, consumer, thread);
            }
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

            if constexpr (kEpilogue) {
                const bool whole = unit.first == 0 && unit.last == k_tiles;
                if (whole || gather_partials(acc, schedule, k_tiles, unit, consumer, thread,
                                             &last_arrival[consumer]))
                    store_tile(acc, out, M, N, unit.row0, unit.col0, consumer, thread,
                               reinterpret_cast<float*>(stages + kStages * kStageBytes));
            } else {
                readable::store_tile(out, acc, M, N, unit.row0, unit.col0, consumer, thread);
            }
        }
    }
}

#endif

}  // namespace

__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_fast_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap a_map,
                           const __grid_constant__ CUtensorMap b_map, float* __restrict__ C) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    persistent_gemm<GemmMajor::kK, GemmMajor::kK>(M, N, K, &a_map, &b_map, C, Schedule{});
#endif
}

// gemm_bf16_epilogue's kernel for one pair of operand layouts.
template <GemmMajor kA, GemmMajor kB>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_epilogue_kernel(int M, int N, int K, const __grid_constant__ CUtensorMap a_map,
                         const __grid_constant__ CUtensorMap b_map,
                         const __grid_constant__ GemmEpilogue epilogue,
                         const __grid_constant__ Schedule schedule) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    persistent_gemm<kA, kB>(M, N, K, &a_map, &b_map, epilogue, schedule);
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
    // The stages alone: the float C is stored from registers, without the epilogue's staging.
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

using EpilogueKernel = void (*)(int, int, int, CUtensorMap, CUtensorMap, GemmEpilogue, Schedule);

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

// A launch's share-out (Schedule) and grid.
struct Plan {
    int sk_tiles = 0, sk_classes = 1, blocks = 0;
};

// Data-parallel, or Stream-K over some of the tiles: the estimate of the busiest block's time,
// in k tiles (kPartialCost), decides. Data-parallel, ceil(T / P) Kt for T tiles of Kt k tiles on
// P SMs: the last wave's idle SMs wait (72 tiles on 132 SMs: 60 SMs idle the whole product).
// Stream-K over g blocks, S of the k iterations: ceil(S / g), plus kPartialCost for each of at
// most 2 partials the block writes (where its share begins and ends inside a tile) and each of
// the c partials the last contributor of a tile reads back (c: a tile's contributors, at most
// ceil((Kt - 1) / floor(S / g)) + 1). The hybrid where T >= P (Osama et al.'s "data-parallel +
// two-tile Stream-K", CUTLASS's default): the last partial wave and one full wave by Stream-K
// (each block 1 to 2 tiles' iterations: c at most 3), the other waves whole; where T < P, every
// tile by Stream-K over the g in (T, P] of least estimate. Stream-K only where its estimate saves
// an eighth of the data-parallel one: the partials' cost is a napkin figure (L2 shared with the
// main loop's copies), so a few percent is within its error, and the trainer's weight gradients
// save 40-80% by it (3072 x 768 x 16384, 72 tiles, Kt 256: 256 against 140 + 2 (2 + 3) = 150;
// 768 x 768: 256 against 35 + 2 (2 + 9) = 57), where a product with many tiles has a nearly full
// last wave (the LM head's 50304 x 768 x 16384, 1179 tiles: 8.9 waves, 2304 against 2295) and
// stays whole. The partials: at most S_tiles + g - 1 slots (Schedule), under 3 P: 50 MB on 132
// SMs.
Plan schedule(int tiles, int k_tiles, int multiprocessors) {
    const long long data_parallel =
        static_cast<long long>(course::ceil_div(tiles, multiprocessors)) * k_tiles;
    Plan best{0, 1, std::min(tiles, multiprocessors)};
    long long best_cost = data_parallel;
    const auto consider = [&](int sk_tiles, int blocks) {
        const long long iterations = static_cast<long long>(sk_tiles) * k_tiles;
        if (blocks > iterations) return;  // every block has at least one k tile
        const long long contributors = course::ceil_div(k_tiles - 1, iterations / blocks) + 1;
        const long long cost = static_cast<long long>(tiles - sk_tiles) / blocks * k_tiles +
                               course::ceil_div(iterations, blocks) +
                               kPartialCost * (2 + contributors);
        if (8 * cost < 7 * data_parallel && cost < best_cost) {
            best = {sk_tiles, sk_tiles / std::gcd(sk_tiles, blocks), blocks};
            best_cost = cost;
        }
    };
    if (tiles < multiprocessors)
        for (int blocks = tiles + 1; blocks <= multiprocessors; ++blocks) consider(tiles, blocks);
    else if (tiles % multiprocessors != 0)
        consider(multiprocessors + tiles % multiprocessors, multiprocessors);
    return best;
}

// The Stream-K workspace, grown to the largest request and reused (the products run one after
// another on the default stream): `slots` partial tiles, and the arrival counts of `positions`
// tiles, zeroed when made (every launch leaves them at 0).
Schedule stream_k_workspace(const Plan& plan) {
    static float* partials = nullptr;
    static int* arrivals = nullptr;
    static std::size_t partial_floats = 0, arrival_ints = 0;
    Schedule schedule;
    schedule.sk_tiles = plan.sk_tiles;
    schedule.sk_classes = plan.sk_classes;
    if (plan.sk_tiles == 0) return schedule;
    const std::size_t floats =
        static_cast<std::size_t>(plan.sk_tiles + plan.blocks - 1) * kPartialFloats;
    if (floats > partial_floats) {
        if (partials) CUDA_CHECK(cudaFree(partials));
        CUDA_CHECK(cudaMalloc(&partials, floats * sizeof(float)));
        partial_floats = floats;
    }
    const std::size_t ints = static_cast<std::size_t>(plan.sk_tiles) * kConsumers;
    if (ints > arrival_ints) {
        if (arrivals) CUDA_CHECK(cudaFree(arrivals));
        CUDA_CHECK(cudaMalloc(&arrivals, ints * sizeof(int)));
        CUDA_CHECK(cudaMemset(arrivals, 0, ints * sizeof(int)));
        arrival_ints = ints;
    }
    schedule.partials = partials;
    schedule.arrivals = arrivals;
    return schedule;
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
    if (available[a][b] < static_cast<std::size_t>(kFastSharedBytes))
        throw std::runtime_error("wgmma_gemm: needs " + std::to_string(kFastSharedBytes) +
                                 " bytes of shared memory per block; " +
                                 std::to_string(available[a][b]) + " here");

    const CUtensorMap a_map = operand_map(A, a_major, M, K, kBM);
    const CUtensorMap b_map = operand_map(B, b_major, N, K, kBN);
    const int tiles = course::ceil_div(M, kBM) * course::ceil_div(N, kBN);
    const Plan plan = schedule(tiles, course::ceil_div(K, kBK), multiprocessors);
    const Schedule work = stream_k_workspace(plan);
    kernel<<<plan.blocks, kThreads, kFastSharedBytes>>>(M, N, K, a_map, b_map, epilogue, work);
    CUDA_CHECK_LAUNCH();
}
