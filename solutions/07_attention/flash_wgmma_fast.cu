// 07_attention/flash_wgmma_fast: flash_wgmma.cu made persistent, for short sequences. Fast
// reference (the readable one is flash_wgmma.cu).
//
// Teaches: what a block's start and end cost when it has little to do, and the order of the work.
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
// keep the heads read at one time few enough that their K and V stay in L2. The kernel's
// products, softmax and layout are the readable one's.
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

// The readable solution, whole: its tile sizes, shared-memory layout and wgmma helpers are this
// kernel's. (Every header it includes is included above, so that none of them lands inside the
// namespace.)
namespace readable {
#include "flash_wgmma.cu"
}  // namespace readable

namespace {

using readable::kBlockM;
using readable::kBlockN;
using readable::kChunkCols;
using readable::kConsumerRegisters;
using readable::kConsumers;
using readable::kProducerRegisters;
using readable::kScores;
using readable::kStages;
using readable::kThreads;
using readable::kWarpgroupThreads;
using readable::kWgmmaM;
using readable::Smem;

// The K and V of the heads read at one time (a section's) kept to a third of an H100's 50 MB L2:
// the rest holds the Q tiles, the outputs and what other SMs read of the section's heads.
constexpr long long kSectionBytes = 16LL << 20;

// Items taken after the blocks' first ones, one counter per device (launches on one stream: the
// launcher zeroes it before each).
__device__ int items_taken;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)  // the Hopper instructions exist in sm_90a code only

using readable::issue_output;
using readable::issue_scores;

// A work item: a head and its tile of kBlockM query rows. Items are numbered section by section
// (section_heads heads each, the last one what is left), and within a section by query tile, the
// heaviest first (causal: the last query tile, which sees every key), then by head.
struct Work {
    int head, q0, key_tiles;
};
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

template <int kD>
__global__ void __launch_bounds__(kThreads, 1)
    flash_wgmma_kernel(const __grid_constant__ CUtensorMap q_map,
                       const __grid_constant__ CUtensorMap k_map,
                       const __grid_constant__ CUtensorMap v_map, __nv_bfloat16* __restrict__ O,
                       float* __restrict__ L, int* __restrict__ next_item, int heads_total,
                       int heads_per_row, long long o_row_stride, int section_heads, int T,
                       float scale, bool causal) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using S = Smem<kD>;
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
        hopper::set_registers_decrease<kProducerRegisters>();
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
                const Work w = work(item, heads_total, section_heads, T, causal);
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

    hopper::set_registers_increase<kConsumerRegisters>();
    // Consumer c owns query rows q0 + 64 c .. q0 + 64 c + 63 of each item. In wgmma's
    // accumulator layout (course::wgmma_d_element) warp w of the warpgroup holds rows 16 w ..
    // 16 w + 15 as an mma.sync fragment: accumulator 4 n + i is row g (i = 0, 1) or g + 8
    // (i = 2, 3), columns 8 n + 2 t + i % 2, the 4 lanes of a group sharing a row.
    const int consumer = warpgroup - 1;
    const int thread = threadIdx.x % kWarpgroupThreads;
    const int warp = thread / 32, lane = thread % 32, g = lane / 4, t = lane % 4;
    const std::uint32_t q_rows =
        hopper::shared_address(q_tile) + consumer * kWgmmaM * course::kSwizzleRowBytes;
    auto* p_tile = reinterpret_cast<__nv_bfloat16*>(smem + S::kP + consumer * S::kPBytes);
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale_log2 = scale * kLog2e;  // exp(scale * x) = exp2(scale_log2 * x)

    int used = 0;  // K/V tiles used over all items, counted as the producer counts them
    for (int round = 0;; ++round) {
        hopper::mbarrier_wait(&q_full, round % 2);  // the round's item, and its Q tile
        const int item = round_item;
        if (item >= items) break;
        const Work w = work(item, heads_total, section_heads, T, causal);
        const int row0 = w.q0 + consumer * kWgmmaM + warp * 16;  // this warp's first query row
        float o[kD / 2] = {};                                    // O's accumulators: 64 rows x kD
        float row_max[2] = {-INFINITY, -INFINITY};  // raw-score maxima of rows g and g + 8
        float row_sum[2] = {0.0f, 0.0f};  // this thread's part of the sums of exp (4 lanes per row)

        for (int tile = 0; tile < w.key_tiles; ++tile, ++used) {
            const int stage = used % kStages;
            hopper::mbarrier_wait(&full[stage], used / kStages % 2);  // K and V have landed
            float s[kScores];
            issue_scores<kD>(s, q_rows, hopper::shared_address(k_tile(stage)));
            hopper::wgmma_wait<0>();
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
                correction[h] = exp2f(row_max[h] * scale_log2 - max_scaled);  // 0 on the first tile
                row_max[h] = new_max;
                float sum = 0.0f;
#pragma unroll
                for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
                    for (int i = 2 * h; i < 2 * h + 2; ++i) {
                        s[4 * n + i] = exp2f(fmaf(s[4 * n + i], scale_log2, -max_scaled));
                        sum += s[4 * n + i];
                    }
                row_sum[h] = row_sum[h] * correction[h] + sum;
            }
#pragma unroll
            for (int r = 0; r < kD / 2; ++r) o[r] *= correction[r % 4 / 2];

                // P to shared memory in bf16, laid out as TMA lays out a K-major tile (chunks of 64
                // keys, 128-byte rows, swizzled): the A operand of O += P V. Each store is a pair
                // of keys; the 8 rows of a store's lanes land in 8 different 16-byte chunks (no
                // bank conflict).
#pragma unroll
            for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = warp * 16 + g + 8 * h, key = 8 * n + 2 * t;
                    const int offset = key / kChunkCols * kWgmmaM * kChunkCols +
                                       course::swizzled_bf16_offset(row, key % kChunkCols);
                    *reinterpret_cast<__nv_bfloat162*>(p_tile + offset) =
                        __floats2bfloat162_rn(s[4 * n + 2 * h], s[4 * n + 2 * h + 1]);
                }
            // wgmma reads shared memory through the async proxy: this thread's stores must be made
            // visible to it, then every warp of the warpgroup must be done storing.
            hopper::fence_proxy_async();
            hopper::named_barrier_sync(1 + consumer, kWarpgroupThreads);
            issue_output<kD>(o, hopper::shared_address(p_tile),
                             hopper::shared_address(v_tile(stage)));
            // Waiting here, before the next tile's S, keeps o out of the loop's register moves
            // while wgmma writes it (an in-flight wgmma whose accumulators other instructions
            // define makes ptxas serialize every wgmma of the kernel). The other consumer
            // warpgroup's products fill the SM meanwhile. Then the stage's K and V, and the P tile,
            // are free again.
            hopper::wgmma_wait<0>();
            hopper::fence_accumulators(o);
            hopper::mbarrier_arrive(&empty[stage]);
        }

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

template <int kD>
void launch(const Layout& at, float* L, int T, float scale, bool causal) {
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
    const int heads_total = at.sequences * at.heads_per_row;
    const int cols = at.heads_per_row * kD;
    const auto map = [&](const __nv_bfloat16* tensor, int box_rows) {
        return hopper::tensor_map_3d(tensor, cols, T, at.sequences, at.row_stride, box_rows,
                                     kChunkCols);
    };
    const CUtensorMap q_map = map(at.Q, kBlockM);
    const CUtensorMap k_map = map(at.K, kBlockN);
    const CUtensorMap v_map = map(at.V, kBlockN);
    // One block per SM (the shared memory and registers hold one), or one per item if fewer.
    const int sms = course::multiprocessor_count();
    const int items = course::ceil_div(T, kBlockM) * heads_total;
    // Heads per section: their K and V (2 T kD bf16 each) within kSectionBytes.
    const long long head_bytes = 2LL * T * kD * 2;
    const int section_heads =
        static_cast<int>(std::clamp<long long>(kSectionBytes / head_bytes, 1, heads_total));
    // The counter of items taken after the blocks' first, zeroed in stream order before each call.
    int* next_item = nullptr;
    CUDA_CHECK(cudaGetSymbolAddress(reinterpret_cast<void**>(&next_item), items_taken));
    CUDA_CHECK(cudaMemsetAsync(next_item, 0, sizeof(int)));
    kernel<<<std::min(items, sms), kThreads, Smem<kD>::kBytes>>>(
        q_map, k_map, v_map, at.O, L, next_item, heads_total, at.heads_per_row, at.o_row_stride,
        section_heads, T, scale, causal);
    CUDA_CHECK_LAUNCH();
}

void run(const Layout& at, float* L, int T, int D, float scale, bool causal) {
    if (D == 64)
        launch<64>(at, L, T, scale, causal);
    else
        launch<128>(at, L, T, scale, causal);
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
