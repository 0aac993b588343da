// 07_attention/flash_wgmma_backward_fast: flash_wgmma_backward.cu with dQ added to global memory by
// the Tensor Memory Accelerator, each tile's elementwise work run under products, and the grid
// made persistent for short sequences. Fast reference (the readable one is
// flash_wgmma_backward.cu, included below).
//
// Teaches: FlashAttention-3's way out of dQ's atomics, its overlap of the softmax's work with
// the tensor cores, and what a block's start and end cost when it has little to do. First the
// atomics. The readable kernel's consumer at dQ sends
// 32 float2 atomics per thread and query tile (D 128): 4096 per tile, issued by its warps before
// they reach the next barrier of both consumers (so both wait for them), each warp's covering 8
// rows, 32 bytes of each: a quarter of a 128-byte line per request to L2. Here that consumer writes
// scale * dQ (64 queries x D floats) to a shared tile, laid out as TMA's 128-byte swizzle lays out
// boxes of 32 floats (conflict-free float2 stores), then fence.proxy.async (the tile was written by
// the generic proxy, TMA reads it through the async one) and a barrier of its warpgroup, and one
// thread hands the whole tile to TMA: cp.reduce.async.bulk.tensor ... .add, one instruction per box
// of 64 rows x 32 floats (D / 32 of them), which adds it into dQ in L2 in whole lines,
// asynchronously. A 3D tensor map ([heads][T][D]) clips a box at T: the rows past T of a last tile
// are not added anywhere. The instructions of one tile form a bulk group; the issuing thread waits
// until TMA has read the tile (cp.async.bulk.wait_group.read) before its next arrival at the
// consumers' dS^T barrier, after which the other consumer, at dQ next, overwrites it: at D 128 one
// tile serves both, and the wait comes a tile's S^T and dP^T after the issue. D 64 has room for a
// dQ tile per consumer (kDqTilesAtD64: the wait moves to the consumer's own next turn, a tile
// later) and a third Q/dO stage (kStagesAtD64).
//
// Then the overlap. In the readable kernel both consumers wait for S^T and dP^T, compute P^T and
// dS^T, store them and meet at a barrier: the tensor cores idle through that work, a quarter of a
// tile at D 128 (dev/tuning/07_attention.md). Here S^T and dP^T are two wgmma groups: after
// wgmma.wait_group 1 (S^T done) P^T is computed and stored while dP^T's products run; dV += P^T dO
// is issued as soon as the consumer's own warps have stored P^T (a barrier of its warpgroup), and
// dS^T is computed while it runs (wait_group 1 again: dP^T done, dV may run on). No accumulator
// of a running group is touched in between, so ptxas keeps the groups asynchronous (else it
// serializes every wgmma, info C7514). The barrier of both consumers becomes one-sided: the
// consumer at dQ waits at its own barrier id for the other's arrival (bar.arrive), and the other
// goes straight on to its dK, so the two drift apart and one's elementwise work runs under the
// other's products, as FlashAttention-3's ping-pong schedules on purpose. The exponential is
// ex2.approx.ftz (flash_tc's), and the mask is tested only in the tiles that reach past T or
// across the diagonal. kPUnderDp, kDvUnderDs and kOtherConsumerWaits undo each step for a sweep.
// The products' shapes, the masks' meaning and the producer's copies are the readable solution's.
//
// Last, the grid. At the GPT trainer's shape (T 1024, causal) a block of 128 keys sees 2 to 16
// query tiles of 64, 9 on average (33 at T 4096): its barriers' set-up, the wait for its K, V and
// first Q/dO tiles before any product, and dK's and dV's stores and the last bulk reduction's
// completion at its end (the tensor cores idle through each) come 11.6 times per SM. As
// flash_wgmma_fast.cu does for the forward, one block per SM (the grid is the SM count) loops over
// (key block, head) work items: its first is its own (blockIdx.x), the producer takes each next
// one from a counter in global memory (atomicAdd; prepare_kernel zeroes it before each call) and
// publishes it in shared memory with the K/V buffer's barrier (kv_full). The producer runs ahead
// across items: the ring's stage and parity count the query tiles over all items, so the next
// item's Q/dO tiles follow this one's as stages come free, and at D 64 its K and V go to a second
// buffer (kKvBuffersAtD64) while the consumers finish this item, which they release (kv_empty)
// once every product of the item has been waited for. The consumers count the tiles the same
// way, so the dS^T buffer, the turn at dQ and the dQ tiles go on across items as in one long
// item: the protocol above is unchanged. The items' order: heads in sections whose Q, dO and dQ
// fit in L2 with room to spare (kSectionBytes), and within a section every head's first key
// block, then every head's second (kLevelMajor), which causal puts heaviest first over the whole
// section: at the trainer's shape 108 tile-units on the busiest SM against 114 in the readable
// grid's order, the perfect share 104.7 (dev/tuning/07_attention.md).
//
// Besides the contract, this file defines flash_wgmma_backward_packed (flash_wgmma_packed.h), the
// GPT trainer's call: q, k, v read where its qkv projection wrote them (rows of 3C), O and dO
// token-major (rows of C), through 3D tensor maps (column, row, sequence) as flash_wgmma_packed
// reads them; and the gradient written where the trainer's projection backward reads it, its
// dqkv in bf16 (rows of 3C, dq, dk, dv where q, k, v are): dK and dV from the epilogue, dQ's float
// sums (added up in scratch, as the contract's dQ is) converted by a last small kernel, as
// FlashAttention-3's backward ends. No head is copied out or back around it. The contract's heads
// are sequences of one head each, its gradients float.
//
// Run:  grader run 07/flash_wgmma_backward --solutions    (the "(fast)" row; a Hopper GPU)
// Contract: flash_wgmma_backward.h   Instructions: hopper_attention.h
// Notes:    notes/07_attention.md, dev/tuning/07_attention.md
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "course/launch.h"
#include "course/tensor_map.h"
#include "flash_wgmma_backward.h"
#include "flash_wgmma_packed.h"
#include "hopper_attention.h"
#include "tensor_core.h"

// The readable solution, whole: its constants and the products' issue functions serve here too.
// (Every header it includes is included above, so that none of them lands inside the namespace.)
namespace readable {
#include "flash_wgmma_backward.cu"
}  // namespace readable

namespace {

using readable::kBlockM;
using readable::kBlockN;
using readable::kChunkCols;
using readable::kConsumerRegisters;
using readable::kConsumers;
using readable::kProducerRegisters;
using readable::kScores;
using readable::kThreads;
using readable::kWarpgroupThreads;
using readable::kWgmmaM;

// Q/dO stages in the ring and dQ tiles at D 64 (1 or 2: one per consumer); D 128 has room for
// 2 stages and 1 dQ tile only (see Smem).
constexpr int kStagesAtD64 = 3;
constexpr int kDqTilesAtD64 = 2;
// K/V buffers at D 64 (1 or 2): with 2 the producer loads the next item's K and V while the
// consumers still work on this item's; with 1 (D 128's only choice) it waits for them to finish.
constexpr int kKvBuffersAtD64 = 2;
// The heads whose Q and dO (bf16) and dQ (float: the bulk reductions add into it in L2), 8 T D
// bytes each, are read at one time (a section's): a third of an H100's 50 MB L2, as flash_wgmma's
// fast reference keeps its sections' K and V.
constexpr long long kSectionBytes = 16LL << 20;
// dQ's shared tile goes to TMA in boxes of 32 floats (128 bytes, the 128-byte swizzle's row) x
// kBlockM queries.
constexpr int kDqBoxCols = 32;
constexpr int kDqBoxBytes = kDqBoxCols * 4 * kBlockM;

// Shared memory of one block, in bytes from a 1024-byte boundary: kKvBuffers K/V buffers (the
// readable kernel's K and V tiles), kStages Q/dO stages, the P^T and dS^T tiles as in the readable
// layout, then kDqTiles dQ tiles, each D / 32 boxes of kBlockM rows x 128 bytes. D 128: 64 KB K/V
// + 64 KB Q/dO + 16 KB P^T + 32 KB dS^T + 32 KB dQ = 208 KB, so a third stage (32 KB), a second
// dQ tile or a second K/V buffer (64 KB) would pass 227 KB. D 64: 192 KB with two K/V buffers,
// the third stage and the second dQ tile.
template <int kD>
struct Smem : readable::Smem<kD> {
    using Readable = readable::Smem<kD>;
    static constexpr int kKvBuffers = kD == 64 ? kKvBuffersAtD64 : 1;
    static constexpr int kStages = kD == 64 ? kStagesAtD64 : 2;
    static constexpr int kDqTiles = kD == 64 ? kDqTilesAtD64 : 1;
    static constexpr int kDqBoxes = kD / kDqBoxCols;
    static constexpr int kDqTileBytes = kDqBoxes * kDqBoxBytes;
    // K/V buffer b: its K tile at b * kKvBufferBytes, its V tile kKVBytes further.
    static constexpr int kKvBufferBytes = 2 * Readable::kKVBytes;
    static constexpr int kQ = kKvBuffers * kKvBufferBytes;  // stage s at kQ + s * 2 * kQBytes
    static constexpr int kP = kQ + kStages * 2 * Readable::kQBytes;
    static constexpr int kDS = kP + kConsumers * Readable::kPBytes;
    // dQ tile u at kDQ + u * kDqTileBytes, its box b a further b * kDqBoxBytes.
    static constexpr int kDQ = kDS + 2 * kConsumers * Readable::kPBytes;
    static constexpr int kBytes = kDQ + kDqTiles * kDqTileBytes + 1024;  // + room to align to 1 KB
};

static_assert(kDqTilesAtD64 == 1 || kDqTilesAtD64 == kConsumers,
              "one dQ tile for both consumers, or one each (the tile i % 2 of query tile i)");
static_assert(kKvBuffersAtD64 == 1 || kKvBuffersAtD64 == 2, "one K/V buffer, or one ahead");
static_assert(kDqBoxCols * 4 == course::kSwizzleRowBytes, "a dQ box row is one swizzled row");
static_assert(kDqBoxBytes % 1024 == 0, "every dQ box on a 1024-byte boundary (the swizzle's)");
static_assert(Smem<64>::kKvBufferBytes % 1024 == 0 && Smem<128>::kKvBufferBytes % 1024 == 0,
              "every K/V buffer on a 1024-byte boundary");
// An H100 block has 227 KB of shared memory, of which the kernel's static barriers take 1 KB.
static_assert(Smem<128>::kBytes <= 226 * 1024 && Smem<64>::kBytes <= 226 * 1024,
              "an H100 block has 227 KB of shared memory");

// Items taken after the blocks' first ones, one counter per device (launches on one stream:
// prepare_kernel zeroes it before each).
__device__ int items_taken;

// Where row t of head h begins in a layout of sequences of T rows, each row heads_per_row heads of
// D elements side by side, rows row_stride elements apart: the contract's (a head a sequence,
// row_stride D) or the trainer's (a sequence a batch entry, every head in a row of C or 3C).
// Index: int, or long long where t is a row over all heads' (its division then stays 64-bit).
template <typename Index>
__device__ long long row_start(Index head, Index t, int T, int heads_per_row, long long row_stride,
                               int D) {
    return (static_cast<long long>(head / heads_per_row) * T + t) * row_stride +
           head % heads_per_row * D;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // what only the kernel's sm_90a body uses

// The items' order within a section of heads: true, key blocks by level (every head's first key
// block, then every head's second, ...: causal, the heaviest first over the whole section);
// false, head after head, as the readable kernel's grid runs them.
constexpr bool kLevelMajor = true;

// A work item: a head and its block of kBlockN keys (n0 on), which sees the query tiles from
// first_tile on. Items are numbered section by section (section_heads heads each, the last one
// what is left); within a section by key block, then head (kLevelMajor), or the reverse.
struct Work {
    int head, n0, first_tile;
};
__device__ Work work(int item, int heads_total, int section_heads, int key_blocks, bool causal) {
    const int section = item / (section_heads * key_blocks);  // every section before it is whole
    const int first_head = section * section_heads;
    const int in_section = item % (section_heads * key_blocks);
    const int heads = min(section_heads, heads_total - first_head);
    const int block = kLevelMajor ? in_section / heads : in_section % key_blocks;
    const int head = first_head + (kLevelMajor ? in_section % heads : in_section / key_blocks);
    const int n0 = block * kBlockN;
    // Causal, the query tiles before the one holding the first key see none of the keys.
    return {head, n0, causal ? n0 / kBlockM : 0};
}

// The overlap of a tile's elementwise work with products (one-constant sweeps; false each gives
// the first fast version's order): S^T and dP^T in two groups, P^T computed while dP^T runs
// (kPUnderDp); dV += P^T dO issued before dS^T is computed, which it then runs under
// (kDvUnderDs); the consumer not at dQ waiting for the other's dS^T too, in step as in the
// readable kernel (kOtherConsumerWaits), instead of arriving and going on.
constexpr bool kPUnderDp = true;
constexpr bool kDvUnderDs = true;
constexpr bool kOtherConsumerWaits = false;

// Offset in floats of (row, col) in a dQ box: rows of 32 floats, 16-byte chunk c of row r stored
// at chunk c ^ (r % 8), as TMA's 128-byte swizzle reads it. A warp's float2 stores (8 rows, the
// same 8 columns) then fall in 8 different chunks of the banks: 2 wavefronts, the least for 256
// bytes (unswizzled, rows 128 bytes apart put all 8 rows in the same banks: 8).
__device__ int swizzled_float_offset(int row, int col) {
    return row * kDqBoxCols + course::swizzle_128b(row, col / 4) * 4 + col % 4;
}

// Adds the box of floats at `source` (shared memory, laid out as `map` swizzles it) to the global
// tensor at (col, row, head), element by element, in L2; the parts of the box past the tensor's
// bounds are left out. Asynchronous: joins this thread's current bulk group (commit it, then wait
// for it before `source` is written again).
__device__ void tma_reduce_add_3d(const CUtensorMap* map, const void* source, int col, int row,
                                  int head) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group"
        " [%0, {%1, %2, %3}], [%4];\n" ::"l"(reinterpret_cast<std::uint64_t>(map)),
        "r"(col), "r"(row), "r"(head), "r"(hopper::shared_address(source))
        : "memory");
}

__device__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }

// Waits until this thread's bulk groups have read their shared memory (their writes to global
// memory may still be under way).
__device__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

// Waits until this thread's bulk groups are complete, writes included.
__device__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

#endif

template <int kD>
__global__ void __launch_bounds__(kThreads, 1) flash_wgmma_backward_kernel(
    const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
    const __grid_constant__ CUtensorMap v_map, const __grid_constant__ CUtensorMap do_map,
    const __grid_constant__ CUtensorMap dq_map, const float* __restrict__ L,
    const float* __restrict__ delta, void* __restrict__ dK, void* __restrict__ dV,
    long long gradient_row_stride, bool bf16_gradients, int* __restrict__ next_item,
    int heads_total, int heads_per_row, int section_heads, int T, float scale, bool causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using S = Smem<kD>;
    constexpr int kStages = S::kStages;
    constexpr int kKvBuffers = S::kKvBuffers;
    extern __shared__ __align__(1024) unsigned char shared_raw[];
    __shared__ std::uint64_t kv_full[kKvBuffers];   // phase done: the item and its K, V are in
    __shared__ std::uint64_t kv_empty[kKvBuffers];  // phase done: both consumers are done with it
    __shared__ int item_of[kKvBuffers];             // the item whose K and V the buffer holds
    __shared__ std::uint64_t full[kStages];
    __shared__ std::uint64_t empty[kStages];
    unsigned char* const smem =
        shared_raw + (1024 - hopper::shared_address(shared_raw) % 1024) % 1024;
    const auto k_tile = [&](int kv) { return smem + S::kK + kv * S::kKvBufferBytes; };
    const auto v_tile = [&](int kv) { return k_tile(kv) + S::kKVBytes; };
    const auto q_tile = [&](int stage) { return smem + S::kQ + stage * 2 * S::kQBytes; };
    const auto do_tile = [&](int stage) { return q_tile(stage) + S::kQBytes; };

    const int key_blocks = course::ceil_div(T, kBlockN);
    const int items = key_blocks * heads_total;
    const int query_tiles = course::ceil_div(T, kBlockM);
    const int warpgroup = threadIdx.x / kWarpgroupThreads;

    if (threadIdx.x == 0) {
        for (int b = 0; b < kKvBuffers; ++b) {
            hopper::mbarrier_init(&kv_full[b], 1);
            hopper::mbarrier_init(&kv_empty[b], kConsumers * kWarpgroupThreads);
        }
        for (int s = 0; s < kStages; ++s) {
            hopper::mbarrier_init(&full[s], 1);
            hopper::mbarrier_init(&empty[s], kConsumers * kWarpgroupThreads);
        }
        hopper::fence_barrier_init();
    }
    __syncthreads();

    if (warpgroup == 0) {
        // The producer, as in the readable kernel, over the block's items: per item (round r)
        // the K/V buffer r % kKvBuffers once both consumers are done with its last item, then
        // the item's Q/dO tiles through the ring of kStages stages, whose stage and parity count
        // the tiles over all items, so that the next item's tiles follow this one's as the
        // stages come free.
        hopper::set_registers_decrease<kProducerRegisters>();
        if (threadIdx.x == 0) {
            int issued = 0;         // Q/dO tiles issued over all items: tile n to stage n % kStages
            int item = blockIdx.x;  // the first item is the block's own, the next ones taken
            for (int round = 0;; ++round) {
                const int kv = round % kKvBuffers;
                // Pass p through the buffers waits for the consumers' release of pass p - 1
                // (parity (p % 2) ^ 1: in the first pass the phase "before the first"), after
                // which they no longer read item_of[kv] either. The arrive on kv_full publishes it.
                hopper::mbarrier_wait(&kv_empty[kv], (round / kKvBuffers % 2) ^ 1);
                item_of[kv] = item;
                if (item >= items) {  // no work left: the consumers leave too
                    hopper::mbarrier_arrive(&kv_full[kv]);
                    break;
                }
                const Work w = work(item, heads_total, section_heads, key_blocks, causal);
                // The head's sequence of the tensor maps, and its first column there.
                const int sequence = w.head / heads_per_row, col = w.head % heads_per_row * kD;
                hopper::mbarrier_arrive_expect_tx(&kv_full[kv], 2 * S::kKVBytes);
                for (int c = 0; c < S::kChunks; ++c) {
                    hopper::tma_load_3d(k_tile(kv) + c * kBlockN * 128, &k_map,
                                        col + c * kChunkCols, w.n0, sequence, &kv_full[kv]);
                    hopper::tma_load_3d(v_tile(kv) + c * kBlockN * 128, &v_map,
                                        col + c * kChunkCols, w.n0, sequence, &kv_full[kv]);
                }
                // The next item, taken now: the atomic's round trip passes while this item's Q/dO
                // copies wait for free stages. Items 0 .. gridDim.x - 1 are the blocks' first.
                const int next = gridDim.x + atomicAdd(next_item, 1);
                for (int tile = w.first_tile; tile < query_tiles; ++tile, ++issued) {
                    const int stage = issued % kStages;
                    const int pass_parity = issued / kStages % 2;
                    hopper::mbarrier_wait(&empty[stage], pass_parity ^ 1);
                    hopper::mbarrier_arrive_expect_tx(&full[stage], 2 * S::kQBytes);
                    for (int c = 0; c < S::kChunks; ++c) {
                        hopper::tma_load_3d(q_tile(stage) + c * kBlockM * 128, &q_map,
                                            col + c * kChunkCols, tile * kBlockM, sequence,
                                            &full[stage]);
                        hopper::tma_load_3d(do_tile(stage) + c * kBlockM * 128, &do_map,
                                            col + c * kChunkCols, tile * kBlockM, sequence,
                                            &full[stage]);
                    }
                }
                item = next;
            }
        }
        return;
    }

    hopper::set_registers_increase<kConsumerRegisters>();
    // Named barriers (0 is __syncthreads()'s): at kDsBarrier + c, consumer c, at dQ, waits for the
    // other consumer's dS^T (both warpgroups count); at kOwnTileBarrier + c, consumer c's warps
    // wait for each other (a tile they stored, before wgmma or TMA reads it).
    constexpr int kDsBarrier = 1;
    constexpr int kOwnTileBarrier = kDsBarrier + kConsumers;
    const int consumer = __shfl_sync(0xffffffffu, warpgroup, 0) - 1;  // uniform: see the readable
    const int thread = threadIdx.x % kWarpgroupThreads;
    const int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
    auto* p_tile = reinterpret_cast<__nv_bfloat16*>(smem + S::kP + consumer * S::kPBytes);
    const std::uint32_t p_address = hopper::shared_address(p_tile);
    const auto ds_tile = [&](int buffer, int c) {
        return smem + S::kDS + (buffer * kConsumers + c) * S::kPBytes;
    };
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale_log2 = scale * kLog2e;
    // The one of a lane's two values that holds query tile column `column`, from its lane.
    const auto column_value = [](const float(&lane_value)[2], int column) {
        return __shfl_sync(0xffffffffu, lane_value[column / 32], column % 32);
    };
    // A tile's scores (P^T or dS^T) in bf16 into a consumer's tile: rows are keys, the 128-byte
    // swizzle of a K-major TMA tile, a pair of queries a store (the readable kernel's layout).
    const auto store_tile = [&](__nv_bfloat16* tile, const float(&values)[kScores]) {
#pragma unroll
        for (int n = 0; n < kBlockM / 8; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<__nv_bfloat162*>(
                    tile + course::swizzled_bf16_offset(warp * 16 + g + 8 * h, 8 * n + 2 * t)) =
                    __floats2bfloat162_rn(values[4 * n + 2 * h], values[4 * n + 2 * h + 1]);
    };
    // Consumer c's warps (kWarpgroupThreads) have stored a tile that wgmma or TMA reads next.
    const auto sync_warpgroup = [&] {
        hopper::named_barrier_sync(kOwnTileBarrier + consumer, kWarpgroupThreads);
    };

    // Query tiles over all items, counted as the producer counts them: the ring's stage and
    // parity, the dS^T buffer and whose turn it is at dQ go on from one item to the next as in
    // one long item, so that the consumers' protocol is the one-item kernel's.
    int i = 0;
    for (int round = 0;; ++round) {
        const int kv = round % kKvBuffers;
        hopper::mbarrier_wait(&kv_full[kv], round / kKvBuffers % 2);  // the item, K and V
        const int item = item_of[kv];
        if (item >= items) break;
        const Work w = work(item, heads_total, section_heads, key_blocks, causal);
        const int head = w.head;
        const int key0 = w.n0 + consumer * kWgmmaM;
        const std::uint32_t k_address = hopper::shared_address(k_tile(kv));
        const std::uint32_t k_rows = k_address + consumer * kWgmmaM * course::kSwizzleRowBytes;
        const std::uint32_t v_rows =
            hopper::shared_address(v_tile(kv)) + consumer * kWgmmaM * course::kSwizzleRowBytes;
        const float* const head_l = L + static_cast<long long>(head) * T;
        const float* const head_delta = delta + static_cast<long long>(head) * T;
        // L (times log2 e) and D_i of a tile's 64 queries, two of each per lane, as in the
        // readable kernel, but a tile ahead: the next tile's are loaded while this one's products
        // run, so that P^T, computed as soon as S^T is done, never waits for them.
        float next_l[2], next_d[2];
        const auto load_row_terms = [&](int tile) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int query = min(tile * kBlockM + 32 * h + lane, T - 1);
                next_l[h] = head_l[query] * kLog2e;
                next_d[h] = head_delta[query];
            }
        };

        float dv[kD / 2] = {}, dk[kD / 2] = {};

        load_row_terms(w.first_tile);
        for (int tile = w.first_tile; tile < query_tiles; ++tile, ++i) {
            const int stage = i % kStages, q0 = tile * kBlockM;
            const int buffer = i % 2;
            const int dq_consumer = i % kConsumers;
            const bool dq_here = dq_consumer == consumer;
            const float lane_l[2] = {next_l[0], next_l[1]}, lane_d[2] = {next_d[0], next_d[1]};
            load_row_terms(tile + 1);  // past the last tile: row T - 1's again, unused
            hopper::mbarrier_wait(&full[stage], i / kStages % 2);
            const std::uint32_t q_address = hopper::shared_address(q_tile(stage));
            const std::uint32_t do_address = hopper::shared_address(do_tile(stage));

            // S^T = K Q^T and dP^T = V dO^T in two groups (kPUnderDp), so that P^T is computed and
            // stored while dP^T's products still run.
            float s[kScores], dp[kScores];
            hopper::fence_accumulators(s);
            hopper::fence_accumulators(dp);
            hopper::wgmma_fence();
            readable::issue_rows_times_rows<kD>(s, k_rows, q_address);
            if constexpr (kPUnderDp) hopper::wgmma_commit();
            readable::issue_rows_times_rows<kD>(dp, v_rows, do_address);
            hopper::wgmma_commit();
            hopper::wgmma_wait<kPUnderDp ? 1 : 0>();  // S^T done
            hopper::fence_accumulators(s);

            // P^T = exp2(scale log2 e S^T - L log2 e), 0 where masked: the test only in tiles that
            // reach past T or across the diagonal, the others straight-line.
            const bool edge =
                q0 + kBlockM > T || key0 + kWgmmaM > T || (causal && key0 + kWgmmaM - 1 > q0);
            if (edge) {
#pragma unroll
                for (int r = 0; r < kScores; ++r) {
                    const int key = key0 + warp * 16 + g + 8 * (r % 4 / 2);
                    const int column = 8 * (r / 4) + 2 * t + r % 2, query = q0 + column;
                    const bool visible = query < T && key < T && !(causal && key > query);
                    const float p =
                        tc::exp2_ftz(fmaf(s[r], scale_log2, -column_value(lane_l, column)));
                    s[r] = visible ? p : 0.0f;
                }
            } else {
#pragma unroll
                for (int r = 0; r < kScores; ++r) {
                    const int column = 8 * (r / 4) + 2 * t + r % 2;
                    s[r] = tc::exp2_ftz(fmaf(s[r], scale_log2, -column_value(lane_l, column)));
                }
            }
            store_tile(p_tile, s);
            hopper::fence_proxy_async();

            // dV += P^T dO, issued as soon as this consumer's warps have stored P^T (kDvUnderDs):
            // it runs while dS^T is computed. (Else with dK, after the barrier below.)
            const auto issue_dv = [&] {
                readable::issue_tile_times_rows<kD, 0>(dv, p_address, do_address, kBlockM * 128,
                                                       true);
            };
            if constexpr (kDvUnderDs) {
                sync_warpgroup();
                hopper::fence_accumulators(dv);
                hopper::wgmma_fence();
                issue_dv();
                hopper::wgmma_commit();
            }
            hopper::wgmma_wait<kDvUnderDs ? 1 : 0>();  // dP^T done (dV may still run)
            hopper::fence_accumulators(dp);

            // dS^T = P^T (dP^T - D_i): 0 where P^T is.
#pragma unroll
            for (int r = 0; r < kScores; ++r) {
                const int column = 8 * (r / 4) + 2 * t + r % 2;
                dp[r] = s[r] * (dp[r] - column_value(lane_d, column));
            }
            auto* ds = reinterpret_cast<__nv_bfloat16*>(ds_tile(buffer, consumer));
            store_tile(ds, dp);
            hopper::fence_proxy_async();
            // The last reduction from the dQ tile that is written next must have read it (one tile:
            // the other consumer's, a tile ago; one per consumer: this consumer's, two tiles ago).
            if (thread == 0 && (S::kDqTiles == 1 || dq_here)) bulk_wait_read();
            // The consumer at dQ reads both dS^T tiles: it waits at its barrier (kDsBarrier + it)
            // for the other's arrival there. The other only arrives (kOtherConsumerWaits false) and
            // goes on with its own dK, once its own warps are done storing, so the two drift apart
            // and each one's elementwise work runs under the other's products. (Barriers, not one
            // shared id: an id per consumer at dQ keeps a consumer that runs a tile ahead from
            // counting its next arrival into the barrier of the tile before.)
            if (dq_here || kOtherConsumerWaits) {
                hopper::named_barrier_sync(kDsBarrier + dq_consumer,
                                           kConsumers * kWarpgroupThreads);
            } else {
                hopper::named_barrier_arrive(kDsBarrier + dq_consumer,
                                             kConsumers * kWarpgroupThreads);
                sync_warpgroup();
            }

            // (With kDvUnderDs, dV's group may still run: its accumulators are left alone here.)
            if constexpr (!kDvUnderDs) hopper::fence_accumulators(dv);
            hopper::fence_accumulators(dk);
            hopper::wgmma_fence();
            if constexpr (!kDvUnderDs) issue_dv();
            readable::issue_tile_times_rows<kD, 0>(dk, hopper::shared_address(ds), q_address,
                                                   kBlockM * 128, true);
            hopper::wgmma_commit();
            if (!dq_here) {
                hopper::wgmma_wait<0>();
                hopper::fence_accumulators(dv);
                hopper::fence_accumulators(dk);
                hopper::mbarrier_arrive(&empty[stage]);
                continue;
            }
            float dq[kD / 2];
            hopper::fence_accumulators(dq);
            hopper::wgmma_fence();
#pragma unroll
            for (int c = 0; c < kConsumers; ++c)
                readable::issue_tile_times_rows<kD, 1>(
                    dq, hopper::shared_address(ds_tile(buffer, c)),
                    k_address + c * kWgmmaM * course::kSwizzleRowBytes, kBlockN * 128, c > 0);
            hopper::wgmma_commit();
            hopper::wgmma_wait<0>();
            hopper::fence_accumulators(dv);
            hopper::fence_accumulators(dk);
            hopper::fence_accumulators(dq);
            hopper::mbarrier_arrive(&empty[stage]);

            float* const dq_tile =
                reinterpret_cast<float*>(smem + S::kDQ + i % S::kDqTiles * S::kDqTileBytes);
            // scale * dQ into the shared tile (accumulator 4 n + i: query row warp * 16 + g + 8 (i
            // / 2), d column 8 n + 2 t + i % 2; columns 32 b .. 32 b + 31 in box b) ...
#pragma unroll
            for (int n = 0; n < kD / 8; ++n)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = warp * 16 + g + 8 * h, col = 8 * n % kDqBoxCols + 2 * t;
                    float* box = dq_tile + 8 * n / kDqBoxCols * (kDqBoxBytes / 4);
                    *reinterpret_cast<float2*>(box + swizzled_float_offset(row, col)) =
                        make_float2(scale * dq[4 * n + 2 * h], scale * dq[4 * n + 2 * h + 1]);
                }
            // ... made visible to TMA (the async proxy), every warp of this consumer done, then one
            // thread adds the tile to dQ: the blocks of the other key tiles add to the same rows,
            // and TMA's reduction, like an atomic, adds element by element. dQ was zeroed before
            // the kernel.
            hopper::fence_proxy_async();
            sync_warpgroup();
            if (thread == 0) {
#pragma unroll
                for (int b = 0; b < S::kDqBoxes; ++b)
                    tma_reduce_add_3d(&dq_map, dq_tile + b * (kDqBoxBytes / 4), b * kDqBoxCols, q0,
                                      head);
                bulk_commit();
            }
        }
        // Every product of the item has been waited for (each tile's last wait above): K and V
        // are free for the producer's next item but one (or next, with one buffer).
        hopper::mbarrier_arrive(&kv_empty[kv]);

        // dK and dV of this consumer's keys below T (dQ goes out tile by tile, above), at the
        // key's row of its sequence and its head's columns: the contract's float rows of kD (a
        // head a sequence), or the trainer's dqkv in bf16 (rows of 3C).
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int key = key0 + warp * 16 + g + 8 * h;
            if (key >= T) continue;
            const long long at =
                row_start(head, key, T, heads_per_row, gradient_row_stride, kD);
#pragma unroll
            for (int n = 0; n < kD / 8; ++n) {
                const float2 k_pair =
                    make_float2(scale * dk[4 * n + 2 * h], scale * dk[4 * n + 2 * h + 1]);
                const float2 v_pair = make_float2(dv[4 * n + 2 * h], dv[4 * n + 2 * h + 1]);
                const long long element = at + 8 * n + 2 * t;
                if (bf16_gradients) {
                    reinterpret_cast<__nv_bfloat162*>(dK)[element / 2] =
                        __float22bfloat162_rn(k_pair);
                    reinterpret_cast<__nv_bfloat162*>(dV)[element / 2] =
                        __float22bfloat162_rn(v_pair);
                } else {
                    reinterpret_cast<float2*>(dK)[element / 2] = k_pair;
                    reinterpret_cast<float2*>(dV)[element / 2] = v_pair;
                }
            }
        }
    }
    // TMA must be done with the dQ tiles before the block's shared memory goes, and done adding.
    if (thread == 0) bulk_wait_all();
#endif
}

// The tensor map of dQ, [heads][T][kD] floats, added to in boxes of kDqBoxCols x kBlockM x 1 with
// the 128-byte swizzle: three dimensions, so that a box stops at its head's T (with [heads * T]
// rows as one matrix, the rows past T of a last tile would be added to the next head's).
template <int kD>
CUtensorMap dq_tensor_map(float* dQ, int heads_total, int T) {
    if (reinterpret_cast<std::uintptr_t>(dQ) % 16 != 0)
        throw std::runtime_error("flash_wgmma_backward: dQ must be 16-byte aligned (TMA)");
    const cuuint64_t dims[3] = {kD, static_cast<cuuint64_t>(T),
                                static_cast<cuuint64_t>(heads_total)};
    const cuuint64_t strides[2] = {kD * sizeof(float),
                                   static_cast<cuuint64_t>(T) * kD * sizeof(float)};
    const cuuint32_t box[3] = {kDqBoxCols, kBlockM, 1};
    const cuuint32_t element_strides[3] = {1, 1, 1};
    CUtensorMap map{};
    const CUresult result = course::tensor_map_encoder()(
        &map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, dQ, dims, strides, box, element_strides,
        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (result != CUDA_SUCCESS)
        throw std::runtime_error("cuTensorMapEncodeTiled (dQ) failed, error " +
                                 std::to_string(result));
    return map;
}

// Everything the main kernel needs done before it, in one launch (three before: the readable
// row_dot_kernel and two memsets): D_i = dO_i . O_i, with row i of head h where the layout has it
// (O's and dO's rows row_stride elements apart, heads_per_row heads side by side); dQ's float sums
// zeroed, since the main kernel adds into them; the item counter zeroed. kD / 8 lanes a row, 16
// bytes of O and of dO each (a warp reads 4 rows at D 64, 2 at D 128).
template <int kD>
__global__ void prepare_kernel(const __nv_bfloat16* O, const __nv_bfloat16* dO, float* delta,
                               float* dq_sums, int* next_item, long long rows, int T,
                               int heads_per_row, long long row_stride) {
    constexpr int kLanesPerRow = kD / 8;
    const long long thread = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (thread == 0) *next_item = 0;
    const long long row = thread / kLanesPerRow, head = row / T;
    const int d = static_cast<int>(thread % kLanesPerRow) * 8;
    // Lanes past the last row stay for the shuffles below (a whole warp takes part), adding 0.
    const bool in_rows = row < rows;
    float sum = 0.0f;
    if (in_rows) {
        const long long at = row_start(head, row % T, T, heads_per_row, row_stride, kD) + d;
        const uint4 o = *reinterpret_cast<const uint4*>(O + at);
        const uint4 d_o = *reinterpret_cast<const uint4*>(dO + at);
        const auto* o2 = reinterpret_cast<const __nv_bfloat162*>(&o);
        const auto* d_o2 = reinterpret_cast<const __nv_bfloat162*>(&d_o);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 a = __bfloat1622float2(o2[i]), b = __bfloat1622float2(d_o2[i]);
            sum += a.x * b.x + a.y * b.y;
        }
        float4* dq = reinterpret_cast<float4*>(dq_sums + row * kD + d);
        dq[0] = dq[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    // The row's kLanesPerRow lanes are aligned within the warp: xor offsets below kLanesPerRow
    // stay inside them.
#pragma unroll
    for (int offset = kLanesPerRow / 2; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (in_rows && d == 0) delta[row] = sum;
}

// dQ's float sums ([heads][T][D]) in bf16 where the gradient's layout has them (row_start). 8
// elements a thread (D is 64 or
// 128: whole packs of 16 bytes, on 16-byte boundaries where the rows and the pointer are).
__global__ void dq_to_bf16_kernel(const float* __restrict__ sums, __nv_bfloat16* __restrict__ dq,
                                  long long rows, int T, int heads_per_row, long long row_stride,
                                  int D) {
    const long long pack = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int packs_per_row = D / 8;
    if (pack >= rows * packs_per_row) return;
    const long long row = pack / packs_per_row, head = row / T;
    const int d = static_cast<int>(pack % packs_per_row) * 8;
    const float4 low = *reinterpret_cast<const float4*>(sums + row * D + d);
    const float4 high = *reinterpret_cast<const float4*>(sums + row * D + d + 4);
    const __nv_bfloat162 packed[4] = {__float22bfloat162_rn(make_float2(low.x, low.y)),
                                      __float22bfloat162_rn(make_float2(low.z, low.w)),
                                      __float22bfloat162_rn(make_float2(high.x, high.y)),
                                      __float22bfloat162_rn(make_float2(high.z, high.w))};
    const long long at = row_start(head, row % T, T, heads_per_row, row_stride, D) + d;
    *reinterpret_cast<uint4*>(dq + at) = *reinterpret_cast<const uint4*>(packed);
}

// Where q, k, v, O and dO lie: `sequences` sequences of T rows, each row heads_per_row heads of D
// side by side; q's, k's and v's rows qkv_row_stride elements apart, O's and dO's o_row_stride.
struct Layout {
    const __nv_bfloat16 *Q, *K, *V, *O, *dO;
    int sequences, heads_per_row;
    long long qkv_row_stride, o_row_stride;
};

// Where the gradients go. dQ's sums always to dq_sums ([heads][T][D] floats, which the kernel
// adds into). Without dq (the contract): dK and dV in float, [heads][T][D] (row_stride D), and
// dq_sums is dQ. With dq (the trainer's dqkv): dK, dV and then dQ in bf16, in the Layout's
// sequences, rows row_stride apart.
struct Gradients {
    float* dq_sums;
    __nv_bfloat16* dq;
    void *dK, *dV;
    long long row_stride;
};

template <int kD>
void launch(const Layout& at, const float* L, const Gradients& out, int T, float scale,
            bool causal) {
    const auto kernel = flash_wgmma_backward_kernel<kD>;
    int device = 0, major = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    if (major != 9 || course::compiled_arch(kernel) != 90)
        throw std::runtime_error(
            "flash_wgmma_backward: needs a Hopper GPU and device code for sm_90a");
    static const std::size_t available = course::opt_in_shared_bytes(kernel);
    if (available < static_cast<std::size_t>(Smem<kD>::kBytes))
        throw std::runtime_error("flash_wgmma_backward: needs " + std::to_string(Smem<kD>::kBytes) +
                                 " bytes of shared memory per block; " + std::to_string(available) +
                                 " here");
    const int heads_total = at.sequences * at.heads_per_row;
    const int rows = heads_total * T;
    // Boxes of 64 columns of one head: K and V kBlockN rows at a time, Q and dO kBlockM.
    const auto map = [&](const __nv_bfloat16* tensor, long long row_stride, int box_rows) {
        return hopper::tensor_map_3d(tensor, at.heads_per_row * kD, T, at.sequences, row_stride,
                                     box_rows, kChunkCols);
    };
    const CUtensorMap q_map = map(at.Q, at.qkv_row_stride, kBlockM);
    const CUtensorMap do_map = map(at.dO, at.o_row_stride, kBlockM);
    const CUtensorMap k_map = map(at.K, at.qkv_row_stride, kBlockN);
    const CUtensorMap v_map = map(at.V, at.qkv_row_stride, kBlockN);
    const CUtensorMap dq_map = dq_tensor_map<kD>(out.dq_sums, heads_total, T);

    // The counter of items taken after the blocks' first, zeroed in stream order before each call
    // (by prepare_kernel, with D_i and dQ's sums).
    int* next_item = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&next_item), items_taken));
    float* delta = nullptr;
    CUDA_CHECK(cudaMallocAsync(&delta, rows * sizeof(float), 0));
    const long long prepare_threads = static_cast<long long>(rows) * (kD / 8);
    prepare_kernel<kD><<<static_cast<unsigned>(course::ceil_div(prepare_threads, 256LL)), 256>>>(
        at.O, at.dO, delta, out.dq_sums, next_item, rows, T, at.heads_per_row, at.o_row_stride);
    CUDA_CHECK_LAUNCH();

    // One block per SM (the shared memory and registers hold one), or one per item if fewer.
    const int items = course::ceil_div(T, kBlockN) * heads_total;
    // Heads per section: their Q and dO (bf16) and dQ (float), 8 T kD bytes, within
    // kSectionBytes.
    const long long head_bytes = 8LL * T * kD;
    const int section_heads =
        static_cast<int>(std::clamp<long long>(kSectionBytes / head_bytes, 1, heads_total));
    kernel<<<std::min(items, course::multiprocessor_count()), kThreads, Smem<kD>::kBytes>>>(
        q_map, k_map, v_map, do_map, dq_map, L, delta, out.dK, out.dV, out.row_stride,
        out.dq != nullptr, next_item, heads_total, at.heads_per_row, section_heads, T, scale,
        causal);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(delta, 0));
    if (out.dq != nullptr) {
        const long long packs = static_cast<long long>(rows) * (kD / 8);
        dq_to_bf16_kernel<<<static_cast<unsigned>(course::ceil_div(packs, 256LL)), 256>>>(
            out.dq_sums, out.dq, rows, T, at.heads_per_row, out.row_stride, kD);
        CUDA_CHECK_LAUNCH();
    }
}

void run(const Layout& at, const float* L, const Gradients& out, int T, int D, float scale,
         bool causal) {
    if (D == 64)
        launch<64>(at, L, out, T, scale, causal);
    else
        launch<128>(at, L, out, T, scale, causal);
}

}  // namespace

void flash_wgmma_backward(const __nv_bfloat16* Q, const __nv_bfloat16* K, const __nv_bfloat16* V,
                          const __nv_bfloat16* O, const __nv_bfloat16* dO, const float* L,
                          float* dQ, float* dK, float* dV, int batch, int heads, int T, int D,
                          float scale, bool causal) {
    // batch * heads sequences of one head: rows of D; the gradients in float, dQ's sums dQ itself.
    run({Q, K, V, O, dO, batch * heads, 1, D, D}, L, {dQ, nullptr, dK, dV, D}, T, D, scale, causal);
}

void flash_wgmma_backward_packed(const __nv_bfloat16* qkv, const __nv_bfloat16* O,
                                 const __nv_bfloat16* dO, const float* L, float* dq_sums,
                                 __nv_bfloat16* dqkv, int batch, int heads, int T, int D,
                                 float scale, bool causal) {
    // batch sequences of `heads` heads: q, k, v rows of 3C, O's and dO's of C; dq, dk, dv where
    // q, k, v are, in rows of 3C of dqkv.
    if (reinterpret_cast<std::uintptr_t>(dqkv) % 16 != 0)
        throw std::runtime_error("flash_wgmma_backward_packed: dqkv must be 16-byte aligned");
    const long long C = static_cast<long long>(heads) * D;
    run({qkv, qkv + C, qkv + 2 * C, O, dO, batch, heads, 3 * C, C}, L,
        {dq_sums, dqkv, dqkv + C, dqkv + 2 * C, 3 * C}, T, D, scale, causal);
}
