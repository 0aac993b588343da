// 07_attention/flash_wgmma_fast: flash_wgmma.cu made persistent, for short sequences, with
// FlashAttention-3's pipelined consumers. Fast reference (the readable one is flash_wgmma.cu).
//
// Teaches: what a block's start and end cost when it has little to do, the order of the work, and
// how the products keep the tensor cores busy through the softmax.
// At the GPT trainer's shape (T 1024, causal) a block of the readable kernel visits 1 to 8 K/V
// tiles; its barriers' set-up, the wait for its Q tile and first K/V tile, and its output's stores
// (during which the SM's tensor cores idle) come 12 times per SM. Here one block per SM (the grid
// is the SM count) loops over (query tile, head) work items, and its producer runs ahead across
// them: once both consumers' last S = Q K^T of an item is done (a q_empty mbarrier, the Q tile's
// "empty" as the ring's stages have), it loads the next item's Q, and the ring's stages go on from
// one item's K/V tiles to the next's, so the next item's first tiles land while the consumers
// finish the last one and store its output. The ring's stage and parity follow a count of the
// tiles over all items, the Q barriers' parity the count of items. A block's first item is its
// own (blockIdx.x); the producer takes each next one from a counter in global memory
// (atomicAdd: the first free block takes the next item, as the hardware hands out blocks) and
// passes it to the consumers in shared memory with the Q tile's barrier. The items' order: heads
// in sections whose K and V fit in L2 with room to spare, and within a section the heaviest query
// tiles (causal: the last ones, which see every key) of all its heads first. Heaviest first over
// a section, not within a head as in the readable kernel, evens out the SMs' work (at the
// trainer's shape 53 tile-units on the busiest SM against 57, the perfect share 52.4); sections
// keep the heads read at one time few enough that their K and V stay in L2.
//
// And the consumers keep the tensor cores busy through their softmax, as FlashAttention-3 does
// (the readable kernel leaves that to the warp scheduler). P stays in registers: O += P V is
// wgmma's register-A form, P's bf16 pairs packed from S's accumulators into the A fragments, no
// shared tile, proxy fence or barrier. Each consumer issues tile j's S = Q K^T and tile j - 1's
// O += P V together, waits for S alone (wgmma.wait_group 1) and runs tile j's softmax while P V
// runs, then waits for it before rescaling O and packing the new P. The consumers take turns at
// issuing, in a ring (a named barrier each, its turn handed over by the previous one's bar.arrive),
// so one's products run under the others' softmax; at D 64 not causal there are three of them
// (kConsumersD64: a 192-row query tile), as in FlashAttention-3, because there a tile's products
// are short beside its softmax. O is rescaled only when a row maximum of the warp grew,
// the exponentials are ex2.approx.ftz (exp2f without its handling of results below 2^-126), the
// wgmma descriptors are made once and advanced, and the ring has more stages (kStagesD64,
// kStagesD128) in the shared memory P no longer needs: a stage is now released a softmax later.
// The masks, the online softmax's arithmetic, and Q's, K's and V's layouts are the readable
// kernel's.
//
// Besides the contract, this file defines flash_wgmma_packed (flash_wgmma_packed.h), the GPT
// trainer's call: q, k and v read where its qkv projection wrote them, each token's row of 3C
// holding them side by side, and O written token-major, [B][T][H][D], so the trainer copies no
// head out and back (module 08). One kernel serves both: its tensor maps are 3D, (column, row,
// sequence), a box of 64 columns of one head and up to 128 rows of one sequence. The contract's
// heads are sequences of one head each, rows of D; the trainer's a sequence of H heads side by
// side, rows of 3C, head h at column h D. Either way a box that runs past T is zeros.
//
// Run:  grader run 07/flash_wgmma --solutions    (the "flash_wgmma (fast)" row; a Hopper GPU)
// Contract: flash_wgmma.h   Instructions: hopper_attention.h   Notes: notes/07_attention.md
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "course/launch.h"
#include "flash_wgmma.h"
#include "flash_wgmma_packed.h"
#include "hopper_attention.h"
#include "tensor_core.h"

// The readable solution, whole: its tile sizes, shared-memory layout and wgmma helpers are this
// kernel's. (Every header it includes is included above, so that none of them lands inside the
// namespace.)
namespace readable {
#include "flash_wgmma.cu"
}  // namespace readable

namespace {

using readable::kBlockN;
using readable::kChunkCols;
using readable::kScores;
using readable::kWarpgroupThreads;
using readable::kWgmmaK;
using readable::kWgmmaM;

// The K and V of the heads read at one time (a section's) kept to a third of an H100's 50 MB L2:
// the rest holds the Q tiles, the outputs and what other SMs read of the section's heads.
constexpr long long kSectionBytes = 16LL << 20;
// K/V stages in the ring (a stage holds a K and a V tile: 32 KB at D 64, 64 KB at D 128). A
// consumer now holds two stages at a time (tile j's, whose S it computes, and tile j - 1's, whose
// V its P V still reads): with two stages the copy of tile j + 1 could start only once tile j - 1
// is released, a softmax before the consumers need it.
constexpr int kStagesD64 = 4;
constexpr int kStagesD128 = 3;
// Consumer warpgroups at D 64 (not causal, causal), 64 query rows each: a block's query tile is 64
// rows per consumer. At D 64 a tile's products take half as long as at D 128 and its softmax as
// long (one exponential per score), so one consumer's softmax outlasts what the other's products
// cover. A third consumer (FlashAttention-3's choice at D 64)
// puts two consumers' products under each softmax, gives each SM sub-partition three warps to
// switch between, and reads each K/V tile for 192 queries instead of 128. Causal keeps two: a
// taller query tile has more of its diagonal tiles masked (products computed over counted: 12.5%
// more at T 4096 with 192 rows, 3% with 128; 50% against 12.5% at the GPT trainer's T 1024). D 128
// has two: its products are twice as long, and S's 64 and O's 64 accumulators with P's 32 registers
// would not fit the 160 registers a thread of three consumers may have.
constexpr int kConsumersD64 = 3;
constexpr int kConsumersD64Causal = 2;
// The named barriers of the consumers' turns: consumer c waits at kTurnBarrier + c.
constexpr int kTurnBarrier = 1;
static_assert(kTurnBarrier >= 1 &&
                  kTurnBarrier + std::max(kConsumersD64, kConsumersD64Causal) - 1 <= 15,
              "named barriers are 1 to 15 (0 is __syncthreads')");

// A block of kConsumers consumer warpgroups: its query tile, threads (the producer warpgroup
// first), register split (setmaxnreg; the readable kernel's 24 and 240 with two consumers, 24 and
// 160 with three: 128 x (24 + 3 x 160) registers of the SM's 65,536) and shared memory, in bytes
// from a 1024-byte boundary: the readable kernel's layout (the Q tile, then the K and V tiles of
// each stage; its chunks and K/V tile bytes) with kBlockM query rows, kStages stages and no P tiles
// after them, P staying in registers.
template <int kD, int kConsumers>
struct Shape : readable::Smem<kD> {
    static constexpr int kBlockM = kConsumers * kWgmmaM;  // query rows per block
    static constexpr int kThreads = (1 + kConsumers) * kWarpgroupThreads;
    static constexpr int kProducerRegisters = readable::kProducerRegisters;
    static constexpr int kConsumerRegisters = kConsumers == 2 ? readable::kConsumerRegisters : 160;
    static constexpr int kStages = kD == 64 ? kStagesD64 : kStagesD128;
    static constexpr int kQBytes = kBlockM * kD * 2;
    static constexpr int kK = kQBytes;  // Q at 0; stage s at kK + s * 2 * kKVBytes
    static constexpr int kBytes =
        kK + kStages * 2 * readable::Smem<kD>::kKVBytes + 1024;  // + room to align to 1 KB

    static_assert(kConsumers == 2 || (kConsumers == 3 && kD == 64),
                  "two consumers, or three at D 64 (registers)");
    static_assert(kQBytes % 1024 == 0, "the K/V tiles start on 1024 bytes (the swizzle)");
    static_assert(kBlockM <= 256, "a TMA box side is at most 256 elements");
    static_assert(kWarpgroupThreads * (kProducerRegisters + kConsumers * kConsumerRegisters) <=
                      65536,
                  "the register file holds the split");
    // An H100 block has 227 KB of shared memory, of which the kernel's static barriers take 1 KB.
    static_assert(kBytes <= 226 * 1024, "the ring's stages fit beside Q");
};
static_assert(kWgmmaK == 16 && kBlockN % 16 == 0, "P's A fragments: one per k16 step of keys");

// Items taken after the blocks' first ones, one counter per device (launches on one stream: the
// launcher zeroes it before each).
__device__ int items_taken;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the Hopper instructions exist in sm_90a code only

// The consumers take turns at issuing their products (ping-pong); false leaves the order to the
// warp schedulers, as the readable kernel does.
constexpr bool kPingPong = true;
// A consumer whose 64 rows of an item all lie past T computes nothing: at T 4096 the last query
// tile of 192 rows has one consumer's rows (3% of the products at D 64 not causal). False computes
// them as the readable kernel does (on the zeros TMA fills in past T, the rows never stored).
constexpr bool kSkipRowsPastT = true;
// The consumer's number made warp-uniform for ptxas (below); false: as threadIdx.x gives it.
constexpr bool kUniformConsumer = true;
// The wait for P V in both arms of the rescale's branch, which ptxas keeps after the softmax's
// exponentials (a block boundary it does not move the wait across). Before the branch, ptxas
// hoists it, as far as above every exponential (0 of the 66 MUFU.EX2 before it in this file's
// build; 33 in the tenth session's), and the softmax no longer runs under P V.
constexpr bool kWaitInRescaleBranch = true;

// The readable issue_scores with the descriptors made once: S = Q K^T for a consumer's 64 rows
// (q: its rows of the Q tile) and the tile's kBlockN keys (k: the stage's K tile), both K-major,
// the k16 steps 32 bytes apart in a 128-byte row, the next 64 d a chunk further. The products
// here and below add constants to a few descriptors (course::wgmma_descriptor_advance), where
// each made afresh costs some 5 integer instructions per wgmma: about 5% of a consumer's
// instructions per tile at D 64.
template <int kD, int kBlockM>
__device__ void issue_scores(float (&s)[kScores], std::uint64_t q, std::uint64_t k) {
    hopper::fence_accumulators(s);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kD / kWgmmaK; ++kk) {
        const int chunk = kk / (kChunkCols / kWgmmaK), step = kk % (kChunkCols / kWgmmaK);
        hopper::wgmma_m64n128k16<0>(
            s, course::wgmma_descriptor_advance(q, chunk * kBlockM * 128 + 32 * step),
            course::wgmma_descriptor_advance(k, chunk * kBlockN * 128 + 32 * step), kk > 0);
    }
    hopper::wgmma_commit();
}

// d += A B, one k16 step of O += P V: A (64 x 16 bf16) from registers, each warp's 16 rows as
// mma.sync's A fragment (tensor_core.h's table: a[0] row g, keys 2t, 2t+1; a[1] row g + 8; a[2],
// a[3] the same 8 keys on), B N-major in shared memory (V, [key][d]: a transposed B). d is this
// warpgroup's 64 x 64 (or 64 x 128) accumulators. The operands after B's descriptor: scale-d 1
// (accumulate), the scales of A and B 1, B's transpose 1 (N-major); the register form has no
// transpose of A.
__device__ inline void wgmma_rs_m64n64k16(float (&d)[32], const std::uint32_t (&a)[4],
                                          std::uint64_t b_descriptor) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_descriptor));
}
__device__ inline void wgmma_rs_m64n128k16(float (&d)[64], const std::uint32_t (&a)[4],
                                           std::uint64_t b_descriptor) {
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
          "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
          "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
          "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
          "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_descriptor));
}

// P of a tile, packed to bf16 in registers: p[kk] is the A fragment of keys 16 kk .. 16 kk + 15.
// S's accumulators 4 n + i (row g or g + 8, keys 8 n + 2 t + i % 2) are that fragment's pairs
// already: k16 step kk takes accumulator groups n = 2 kk (keys 2t, 2t+1) and 2 kk + 1 (8 keys on).
using PFragments = std::uint32_t[kBlockN / kWgmmaK][4];

// wgmma reads its register operands in the background too: keep P's registers in place until its
// wait (as fence_accumulators does for the accumulators).
__device__ inline void fence_fragments(PFragments& p) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / kWgmmaK; ++kk)
#pragma unroll
        for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(p[kk][i])::"memory");
}

// O += P V: P from registers, V (kBlockN x kD, [key][d]: N-major, v its descriptor) from the
// stage; a k16 step is 16 keys, 16 rows of V.
template <int kD>
__device__ void issue_output(float (&o)[kD / 2], PFragments& p, std::uint64_t v) {
    hopper::fence_accumulators(o);
    fence_fragments(p);
    hopper::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / kWgmmaK; ++kk) {
        const std::uint64_t b = course::wgmma_descriptor_advance(v, kk * kWgmmaK * 128);
        if constexpr (kD == 64)
            wgmma_rs_m64n64k16(o, p[kk], b);
        else
            wgmma_rs_m64n128k16(o, p[kk], b);
    }
    hopper::wgmma_commit();
}

// A work item: a head and its tile of kBlockM query rows. Items are numbered section by section
// (section_heads heads each, the last one what is left), and within a section by query tile, the
// heaviest first (causal: the last query tile, which sees every key), then by head.
struct Work {
    int head, q0, key_tiles;
};
template <int kBlockM>
__device__ Work work(int item, int heads_total, int section_heads, int T, bool causal) {
    const int q_tiles = course::ceil_div(T, kBlockM);
    const int section = item / (section_heads * q_tiles);  // every section before it is whole
    const int first_head = section * section_heads, in_section = item % (section_heads * q_tiles);
    const int heads = min(section_heads, heads_total - first_head);
    const int level = in_section / heads;
    const int q_block = causal ? q_tiles - 1 - level : level;
    const int q0 = q_block * kBlockM;
    // Key tiles to visit: all of them, or (causal) up to the one holding the tile's last query.
    const int key_tiles =
        causal ? course::ceil_div(min(T, q0 + kBlockM), kBlockN) : course::ceil_div(T, kBlockN);
    return {first_head + in_section % heads, q0, key_tiles};
}

#endif

template <int kD, int kConsumers>
__global__ void __launch_bounds__(Shape<kD, kConsumers>::kThreads, 1)
    flash_wgmma_kernel(const __grid_constant__ CUtensorMap q_map,
                       const __grid_constant__ CUtensorMap k_map,
                       const __grid_constant__ CUtensorMap v_map, __nv_bfloat16* __restrict__ O,
                       float* __restrict__ L, int* __restrict__ next_item, int heads_total,
                       int heads_per_row, long long o_row_stride, int section_heads, int T,
                       float scale, bool causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using S = Shape<kD, kConsumers>;
    constexpr int kStages = S::kStages, kBlockM = S::kBlockM;
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t q_full;          // phase r done: round r's item and Q tile are in
    __shared__ std::uint64_t q_empty;         // phase r done: round r's last S has read Q
    __shared__ int round_item;                // the item of the round in progress (items: none)
    __shared__ std::uint64_t full[kStages];   // phase done: the stage's K and V have landed
    __shared__ std::uint64_t empty[kStages];  // phase done: every consumer is done with it
    // TMA's 128-byte swizzle and the descriptors' base offset 0 need tiles on 1024 bytes.
    unsigned char* const smem =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    unsigned char* const q_tile = smem + S::kQ;
    const auto k_tile = [&](int stage) { return smem + S::kK + stage * 2 * S::kKVBytes; };
    const auto v_tile = [&](int stage) { return k_tile(stage) + S::kKVBytes; };

    const int items = course::ceil_div(T, kBlockM) * heads_total;
    const int warpgroup = threadIdx.x / kWarpgroupThreads;

    if (threadIdx.x == 0) {
        hopper::mbarrier_init(&q_full, 1);
        hopper::mbarrier_init(&q_empty, kConsumers * kWarpgroupThreads);
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
        // copy. Head w.head is sequence w.head / heads_per_row of the tensor maps, columns from
        // (w.head % heads_per_row) kD; a box that runs past T is zeros (keys past T are masked,
        // queries past T not stored).
        hopper::set_registers_decrease<S::kProducerRegisters>();
        if (threadIdx.x == 0) {
            int issued = 0;  // K/V tiles issued over all items: tile n goes to stage n % kStages
            int item = blockIdx.x;  // the first item is the block's own, the next ones taken
            for (int round = 0;; ++round) {
                // Round r's item and Q wait for the consumers' last S of round r - 1, after which
                // they no longer read round_item either (parity (r % 2) ^ 1: in round 0 the phase
                // "before the first", complete). The arrive on q_full publishes round_item.
                hopper::mbarrier_wait(&q_empty, (round % 2) ^ 1);
                round_item = item;
                if (item >= items) {  // no work left: the consumers leave too
                    hopper::mbarrier_arrive(&q_full);
                    break;
                }
                const Work w = work<kBlockM>(item, heads_total, section_heads, T, causal);
                const int sequence = w.head / heads_per_row;
                const int col = w.head % heads_per_row * kD;
                hopper::mbarrier_arrive_expect_tx(&q_full, S::kQBytes);
                for (int c = 0; c < S::kChunks; ++c)
                    hopper::tma_load_3d(q_tile + c * kBlockM * 128, &q_map, col + c * kChunkCols,
                                        w.q0, sequence, &q_full);
                // The next item, taken now: the atomic's round trip passes while this item's K/V
                // copies wait for free stages. Items 0 .. gridDim.x - 1 are the blocks' first.
                const int next = gridDim.x + atomicAdd(next_item, 1);
                for (int tile = 0; tile < w.key_tiles; ++tile, ++issued) {
                    const int stage = issued % kStages;
                    // Pass p through the ring waits for the consumers' release of pass p - 1:
                    // parity (p % 2) ^ 1, in the first pass the phase "before the first".
                    const int pass_parity = issued / kStages % 2;
                    hopper::mbarrier_wait(&empty[stage], pass_parity ^ 1);
                    hopper::mbarrier_arrive_expect_tx(&full[stage], 2 * S::kKVBytes);
                    for (int c = 0; c < S::kChunks; ++c) {
                        hopper::tma_load_3d(k_tile(stage) + c * kBlockN * 128, &k_map,
                                            col + c * kChunkCols, tile * kBlockN, sequence,
                                            &full[stage]);
                        hopper::tma_load_3d(v_tile(stage) + c * kBlockN * 128, &v_map,
                                            col + c * kChunkCols, tile * kBlockN, sequence,
                                            &full[stage]);
                    }
                }
                item = next;
            }
        }
        return;
    }

    hopper::set_registers_increase<S::kConsumerRegisters>();
    // Consumer c owns query rows q0 + 64 c .. q0 + 64 c + 63 of each item. In wgmma's
    // accumulator layout (course::wgmma_d_element) warp w of the warpgroup holds rows 16 w ..
    // 16 w + 15 as an mma.sync fragment: accumulator 4 n + i is row g (i = 0, 1) or g + 8
    // (i = 2, 3), columns 8 n + 2 t + i % 2, the 4 lanes of a group sharing a row.
    // The consumer's number is the same in every lane of a warp, but ptxas cannot tell from
    // threadIdx.x; read from lane 0 (as CUTLASS's canonical_warp_group_idx does), it is visibly
    // so, and ptxas keeps what follows from it (the stage, the descriptors) in uniform registers
    // instead of moving them there for each wgmma (SASS: 669 instructions in the loop against 711
    // at D 64, 719 against 779 at D 128).
    const int consumer =
        kUniformConsumer ? __shfl_sync(0xffffffffu, warpgroup - 1, 0) : warpgroup - 1;
    const int thread = threadIdx.x % kWarpgroupThreads;
    const int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
    // The descriptors of this consumer's Q rows, and of stage 0's K and V tiles (a stage s
    // further: advance by s stages' bytes).
    const std::uint64_t q_rows = course::wgmma_descriptor_k_major_128b(
        hopper::shared_address(q_tile) + consumer * kWgmmaM * course::kSwizzleRowBytes);
    const std::uint64_t k_stage0 =
        course::wgmma_descriptor_k_major_128b(hopper::shared_address(k_tile(0)));
    const std::uint64_t v_stage0 =
        course::wgmma_descriptor_mn_major_128b(hopper::shared_address(v_tile(0)), kBlockN * 128);
    const auto k_descriptor = [&](int stage) {
        return course::wgmma_descriptor_advance(k_stage0, stage * 2 * S::kKVBytes);
    };
    const auto v_descriptor = [&](int stage) {
        return course::wgmma_descriptor_advance(v_stage0, stage * 2 * S::kKVBytes);
    };
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale_log2 = scale * kLog2e;  // exp(scale * x) = exp2(scale_log2 * x)
    // The turns, in a ring: this consumer issues its products after the previous one's bar.arrive
    // at its barrier, then hands the turn over at the next one's (a barrier of two warpgroups, the
    // one that waits and the one that arrives). The last consumer hands consumer 0 the first turn.
    const int my_turn = kTurnBarrier + consumer;
    const int next_turn = kTurnBarrier + (consumer + 1) % kConsumers;
    const auto take_turn = [&] {
        if (kPingPong) hopper::named_barrier_sync(my_turn, 2 * kWarpgroupThreads);
    };
    const auto hand_over_turn = [&] {
        if (kPingPong) hopper::named_barrier_arrive(next_turn, 2 * kWarpgroupThreads);
    };
    if (consumer == kConsumers - 1) hand_over_turn();

    int used = 0;  // K/V tiles used over all items, counted as the producer counts them
    for (int round = 0;; ++round) {
        hopper::mbarrier_wait(&q_full, round % 2);  // the round's item, and its Q tile
        const int item = round_item;
        if (item >= items) break;
        const Work w = work<kBlockM>(item, heads_total, section_heads, T, causal);
        if (kSkipRowsPastT && w.q0 + consumer * kWgmmaM >= T) {
            // No row of this consumer's: it takes its turns and releases what the others wait
            // for (each stage once it has landed: a release cannot count into the stage's
            // previous pass), so that their barriers count it as ever.
            for (int tile = 0; tile < w.key_tiles; ++tile, ++used) {
                const int stage = used % kStages;
                hopper::mbarrier_wait(&full[stage], used / kStages % 2);
                take_turn();
                hand_over_turn();
                hopper::mbarrier_arrive(&empty[stage]);
            }
            hopper::mbarrier_arrive(&q_empty);  // (it reads no Q)
            take_turn();                        // the item's last P V's turn
            hand_over_turn();
            continue;
        }
        const int row0 = w.q0 + consumer * kWgmmaM + warp * 16;  // this warp's first query row
        float o[kD / 2] = {};                                    // O's accumulators: 64 rows x kD
        float row_max[2] = {-INFINITY, -INFINITY};  // raw-score maxima of rows g and g + 8
        float row_sum[2] = {0.0f, 0.0f};  // this thread's part of the sums of exp (4 lanes per row)
        PFragments p = {};                // the previous tile's P, which O += P V reads
        int previous_stage = 0;           // the previous tile's stage, whose V that product reads

        // Tile j's S, then (from the second tile) tile j - 1's P V: both products in flight while
        // tile j's softmax runs. The item's last P V comes after the loop.
        for (int tile = 0; tile < w.key_tiles; ++tile, ++used) {
            const int stage = used % kStages;
            hopper::mbarrier_wait(&full[stage], used / kStages % 2);  // K and V have landed
            float s[kScores];
            take_turn();
            issue_scores<kD, kBlockM>(s, q_rows, k_descriptor(stage));
            if (tile > 0) {
                issue_output<kD>(o, p, v_descriptor(previous_stage));
                hand_over_turn();
                hopper::wgmma_wait<1>();  // S done; P V may still run
            } else {
                hand_over_turn();
                hopper::wgmma_wait<0>();
            }
            hopper::fence_accumulators(s);
            // The item's last S was Q's last use: the producer may load the next item's Q into it.
            if (tile == w.key_tiles - 1) hopper::mbarrier_arrive(&q_empty);

            // Mask keys past T and, causal, keys after the query; only tiles that reach past either
            // boundary need it.
            const int key0 = tile * kBlockN;
            if (key0 + kBlockN > T || (causal && key0 + kBlockN > row0)) {
#pragma unroll
                for (int r = 0; r < kScores; ++r) {
                    const int key = key0 + 8 * (r / 4) + 2 * t + r % 2;
                    const int row = row0 + g + 8 * (r % 4 / 2);
                    if (key >= T || (causal && key > row)) s[r] = -INFINITY;
                }
            }

            // Online softmax on the accumulators: a row's kBlockN scores are spread over the 4
            // lanes of a group, its maximum taken with 2 shuffles.
            float correction[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                float tile_max = -INFINITY;
#pragma unroll
                for (int n = 0; n < kBlockN / 8; ++n)
                    tile_max = fmaxf(tile_max, fmaxf(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]));
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
                tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
                const float new_max = fmaxf(row_max[h], tile_max);
                // A row with every key so far masked keeps max -inf: subtract 0 instead of -inf.
                const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale_log2;
                // 0 on the first tile, exactly 1 where the maximum did not grow.
                correction[h] = tc::exp2_ftz(row_max[h] * scale_log2 - max_scaled);
                row_max[h] = new_max;
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
                    for (int i = 2 * h; i < 2 * h + 2; ++i) {
                        s[4 * n + i] = tc::exp2_ftz(fmaf(s[4 * n + i], scale_log2, -max_scaled));
                        sum += s[4 * n + i];
                    }
                row_sum[h] = row_sum[h] * correction[h] + sum;
            }

            // The previous tile's P V is done: its stage and P's registers are free, O is ours.
            // (The wait is on every path, a no-op on the first tile: ptxas cannot tell that two
            // `tile > 0` branches go the same way, and one path past an issued P V without its wait
            // would make it serialize every wgmma of the kernel.)
            const auto wait_for_output = [&] {
                hopper::wgmma_wait<0>();
                hopper::fence_accumulators(o);
                fence_fragments(p);
                if (tile > 0) hopper::mbarrier_arrive(&empty[previous_stage]);
            };
            if (!kWaitInRescaleBranch) wait_for_output();
            // O is rescaled where some row of the warp has a larger maximum (its correction below
            // 1: on the first tile O is 0 whatever it is multiplied by).
            if (__any_sync(0xffffffffu, correction[0] != 1.0f || correction[1] != 1.0f)) {
                if (kWaitInRescaleBranch) wait_for_output();
#pragma unroll
                for (int r = 0; r < kD / 2; ++r) o[r] *= correction[r % 4 / 2];
            } else if (kWaitInRescaleBranch) {
                wait_for_output();
            }
            // This tile's P, in bf16, as the next P V's A fragments.
#pragma unroll
            for (int kk = 0; kk < kBlockN / kWgmmaK; ++kk)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int n = 2 * kk + i / 2, h = i % 2;  // a[i]: row g + 8 h, group n
                    p[kk][i] = tc::pack_bf16(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]);
                }
            previous_stage = stage;
        }
        // The item's last P V.
        take_turn();
        issue_output<kD>(o, p, v_descriptor(previous_stage));
        hand_over_turn();
        hopper::wgmma_wait<0>();
        hopper::fence_accumulators(o);
        fence_fragments(p);
        hopper::mbarrier_arrive(&empty[previous_stage]);

        // The 4 lanes of a row group each summed a quarter of the row: add them up, then normalize.
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
            row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
            const int row = row0 + g + 8 * h;
            if (row >= T) continue;
            const float inv_sum = 1.0f / row_sum[h];
            // Row `row` of head w.head: its sequence's row, at its head's columns.
            __nv_bfloat16* out =
                O + (static_cast<long long>(w.head / heads_per_row) * T + row) * o_row_stride +
                w.head % heads_per_row * kD;
#pragma unroll
            for (int n = 0; n < kD / 8; ++n)
                *reinterpret_cast<__nv_bfloat162*>(out + 8 * n + 2 * t) = __floats2bfloat162_rn(
                    o[4 * n + 2 * h] * inv_sum, o[4 * n + 2 * h + 1] * inv_sum);
            // L = log sum_j exp(scale s_j) = scale max + log(sum of exp(scale (s_j - max))).
            if (t == 0)
                L[static_cast<long long>(w.head) * T + row] = scale * row_max[h] + logf(row_sum[h]);
        }
    }
    // The last consumer handed consumer 0 one turn more than consumer 0 takes in the items (the
    // first): taken here, so that no barrier is left half-arrived when the block exits.
    if (consumer == 0) take_turn();
#endif
}

// Where q, k, v and O lie: `sequences` sequences of T rows, each row `heads_per_row` heads of kD
// side by side; q's, k's and v's rows row_stride elements apart, O's o_row_stride.
struct Layout {
    const __nv_bfloat16 *Q, *K, *V;
    __nv_bfloat16* O;
    int sequences, heads_per_row;
    long long row_stride, o_row_stride;
};

template <int kD, int kConsumers>
void launch(const Layout& at, float* L, int T, float scale, bool causal) {
    using S = Shape<kD, kConsumers>;
    const auto kernel = flash_wgmma_kernel<kD, kConsumers>;
    // sm_90a code runs on compute capability 9.0 only, and only a build for it has the body.
    int device = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major != 9 || course::compiled_arch(kernel) != 90)
        throw std::runtime_error("flash_wgmma: needs a Hopper GPU and device code for sm_90a");
    // Above 48 KB a block's shared memory must be asked for (once per process is enough).
    static const std::size_t available = course::opt_in_shared_bytes(kernel);
    if (available < static_cast<std::size_t>(S::kBytes))
        throw std::runtime_error("flash_wgmma: needs " + std::to_string(S::kBytes) +
                                 " bytes of shared memory per block; " + std::to_string(available) +
                                 " here");
    const int heads_total = at.sequences * at.heads_per_row;
    const int cols = at.heads_per_row * kD;
    const auto map = [&](const __nv_bfloat16* tensor, int box_rows) {
        return hopper::tensor_map_3d(tensor, cols, T, at.sequences, at.row_stride, box_rows,
                                     kChunkCols);
    };
    const CUtensorMap q_map = map(at.Q, S::kBlockM);
    const CUtensorMap k_map = map(at.K, kBlockN);
    const CUtensorMap v_map = map(at.V, kBlockN);
    // One block per SM (the shared memory and registers hold one), or one per item if fewer.
    const int sms = course::multiprocessor_count();
    const int items = course::ceil_div(T, S::kBlockM) * heads_total;
    // Heads per section: their K and V (2 T kD bf16 each) within kSectionBytes.
    const long long head_bytes = 2LL * T * kD * 2;
    const int section_heads =
        static_cast<int>(std::clamp<long long>(kSectionBytes / head_bytes, 1, heads_total));
    // The counter of items taken after the blocks' first, zeroed in stream order before each call.
    int* next_item = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&next_item), items_taken));
    CUDA_CHECK(cudaMemsetAsync(next_item, 0, sizeof(int)));
    kernel<<<std::min(items, sms), S::kThreads, S::kBytes>>>(
        q_map, k_map, v_map, at.O, L, next_item, heads_total, at.heads_per_row, at.o_row_stride,
        section_heads, T, scale, causal);
    CUDA_CHECK_LAUNCH();
}

void run(const Layout& at, float* L, int T, int D, float scale, bool causal) {
    if (D == 128)
        launch<128, 2>(at, L, T, scale, causal);
    else if (causal)
        launch<64, kConsumersD64Causal>(at, L, T, scale, causal);
    else
        launch<64, kConsumersD64>(at, L, T, scale, causal);
}

}  // namespace

void flash_wgmma(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                 __nv_bfloat16* O, float* L, int batch, int heads, int T, int D, float scale,
                 bool causal) {
    // batch * heads sequences of one head: rows of D.
    run({Q, K, V, O, batch * heads, 1, D, D}, L, T, D, scale, causal);
}

void flash_wgmma_packed(const __nv_bfloat16* qkv, __nv_bfloat16* O, float* L, int batch, int heads,
                        int T, int D, float scale, bool causal) {
    // batch sequences of `heads` heads: q, k, v rows of 3C, O's of C.
    const long long C = static_cast<long long>(heads) * D;
    run({qkv, qkv + C, qkv + 2 * C, O, batch, heads, 3 * C, C}, L, T, D, scale, causal);
}
