// 07_attention/flash_tc: flash attention on the tensor cores, bf16 in (fp16 on a T4), float32
// accumulation. Reference solution.
//
// Teaches: the flash_forward algorithm with its two matrix products on mma.sync m16n8k16 (S = Q K^T
// and O += P V), operands fed by ldmatrix from an XOR-swizzled shared layout, K/V tiles loaded by
// cp.async one tile ahead (double buffering), and the online softmax done in registers on the
// accumulator fragments with exp2f and the scale folded into one multiply-add. On a T4 (a build
// for sm_75: fp16, m16n8k8, no cp.async) the next K/V tile waits in registers instead: loaded
// before the current tile is computed, stored to shared memory after it.
//
// Run:  grader run 07/flash_tc --solutions
// Contract: flash_tc.h                 Notes:  notes/07_attention.md
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "flash_tc.h"
#include "tensor_core.h"

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockM = 16 * kWarps;  // query rows per block: 16 per warp (one mma row block)
constexpr int kBlockN = 64;           // keys per K/V tile
// K/V tiles in shared memory: two (one computed, one landing) with cp.async; one where the next
// tile waits in registers (sm_75: tc::kAsyncCopies is false). 48 KB at D 128: a T4 block's
// shared memory is at most 64 KB.
constexpr int kKvStages = tc::kAsyncCopies ? 2 : 1;
constexpr float kLog2e = 1.4426950408889634f;

using tc::Element;  // bf16, or fp16 in a build for sm_75

// Loads rows [row0, row0 + kRows) of a [T][kD] tensor into a swizzled shared tile with cp.async,
// 16 bytes per copy; rows past T are zero-filled.
template <int kD, int kRows>
__device__ void load_tile(Element* tile, const Element* src, int row0, int T) {
    constexpr int kChunksPerRow = kD / 8;
    // Every thread copies the same number of chunks: with a trip count known at compile time the
    // loop unrolls and all of a thread's copies are in flight at once.
    static_assert(kRows * kChunksPerRow % kThreads == 0, "every thread copies as many chunks");
#pragma unroll
    for (int n = 0; n < kRows * kChunksPerRow / kThreads; ++n) {
        const int chunk = threadIdx.x + n * kThreads;
        const int row = chunk / kChunksPerRow, col = (chunk % kChunksPerRow) * 8;
        const bool valid = row0 + row < T;
        // A row past the end reads nothing (src-size 0); its address must still be a valid one.
        const Element* from = src + (valid ? static_cast<long long>(row0 + row) * kD + col : 0);
        tc::cp_async_16(tile + tc::swizzled<kD>(row, col), from, valid);
    }
}

// Without cp.async (sm_75): this thread's 16-byte chunks of rows [row0, row0 + kRows), the same
// chunks load_tile copies, held in registers between load (global memory: the loads are in flight
// while the thread goes on) and store (to the swizzled shared tile, once they have landed).
template <int kD, int kRows>
struct StagedTile {
    static constexpr int kChunksPerRow = kD / 8;
    static constexpr int kChunks = kRows * kChunksPerRow / kThreads;
    static_assert(kRows * kChunksPerRow % kThreads == 0, "every thread holds as many chunks");
    uint4 chunk[kChunks];

    __device__ void load(const Element* src, int row0, int T) {
#pragma unroll
        for (int n = 0; n < kChunks; ++n) {
            const int index = threadIdx.x + n * kThreads;
            const int row = index / kChunksPerRow, col = (index % kChunksPerRow) * 8;
            chunk[n] = row0 + row < T ? *reinterpret_cast<const uint4*>(
                                            src + static_cast<long long>(row0 + row) * kD + col)
                                      : make_uint4(0, 0, 0, 0);
        }
    }
    __device__ void store(Element* tile) const {
#pragma unroll
        for (int n = 0; n < kChunks; ++n) {
            const int index = threadIdx.x + n * kThreads;
            const int row = index / kChunksPerRow, col = (index % kChunksPerRow) * 8;
            *reinterpret_cast<uint4*>(tile + tc::swizzled<kD>(row, col)) = chunk[n];
        }
    }
};

// Rows [row0, row0 + kRows) into a swizzled shared tile now: cp.async (its group committed by the
// caller), or through registers.
template <int kD, int kRows>
__device__ void copy_tile(Element* tile, const Element* src, int row0, int T) {
    if constexpr (tc::kAsyncCopies) {
        load_tile<kD, kRows>(tile, src, row0, T);
    } else {
        StagedTile<kD, kRows> staged;
        staged.load(src, row0, T);
        staged.store(tile);
    }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    flash_tc_kernel(const Element* Q, const Element* K, const Element* V, Element* O, float* L,
                    int T, float scale, bool causal) {
    extern __shared__ __align__(128) unsigned char shared_bytes[];
    auto* q_tile = reinterpret_cast<Element*>(shared_bytes);  // [kBlockM][kD]
    Element* k_tiles = q_tile + kBlockM * kD;                 // [kKvStages][kBlockN][kD]
    Element* v_tiles = k_tiles + kKvStages * kBlockN * kD;    // [kKvStages][kBlockN][kD]

    // Causal blocks differ in work (the last query tile sees every key): the heaviest go first.
    const int q_block = causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
    const int q0 = q_block * kBlockM;
    const long long head = blockIdx.y;
    Q += head * T * kD;
    K += head * T * kD;
    V += head * T * kD;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, t = lane % 4;  // the fragment's row group and column pair
    const int row0 = q0 + warp * 16;       // this warp's 16 query rows
    // The row and column (within a 16 x 16 block) this lane points ldmatrix at: A's pattern
    // (also a k-major B read with .trans: V), and an n-major B's (K).
    const course::Coord a_src = course::ldmatrix_a_source(lane);
    const course::Coord b_src = course::ldmatrix_b_source(lane);

    // Key tiles to visit: all of them, or (causal) up to the one holding this block's last query.
    const int key_tiles =
        causal ? course::ceil_div(min(T, q0 + kBlockM), kBlockN) : course::ceil_div(T, kBlockN);

    copy_tile<kD, kBlockM>(q_tile, Q, q0, T);
    copy_tile<kD, kBlockN>(k_tiles, K, 0, T);
    copy_tile<kD, kBlockN>(v_tiles, V, 0, T);
    if constexpr (tc::kAsyncCopies) tc::cp_async_commit();
    StagedTile<kD, kBlockN> next_k, next_v;  // sm_75: the next tile, in flight during this one

    std::uint32_t q_frag[kD / 16][4];  // this warp's 16 x kD queries as A fragments
    float o[kD / 8][4] = {};           // its 16 x kD output accumulator (n tiles of 8 columns)
    float row_max[2] = {-INFINITY, -INFINITY};  // raw-score maxima of rows g and g + 8
    float row_sum[2] = {0.0f, 0.0f};  // this thread's part of the sums of exp (4 lanes per row)
    const float scale_log2 = scale * kLog2e;  // exp(scale * x) = exp2(scale_log2 * x)

    for (int tile = 0; tile < key_tiles; ++tile) {
        const int stage = tile % kKvStages;
        if constexpr (tc::kAsyncCopies) {
            if (tile + 1 < key_tiles) {
                // The next tile's copies go out now and land while this one is computed.
                load_tile<kD, kBlockN>(k_tiles + (1 - stage) * kBlockN * kD, K,
                                       (tile + 1) * kBlockN, T);
                load_tile<kD, kBlockN>(v_tiles + (1 - stage) * kBlockN * kD, V,
                                       (tile + 1) * kBlockN, T);
                tc::cp_async_commit();
                tc::cp_async_wait<1>();  // everything but the group just issued has landed
            } else {
                tc::cp_async_wait<0>();
            }
        } else if (tile + 1 < key_tiles) {
            // The next tile's loads go out now, into registers, and land while this one is
            // computed; they go to shared memory at the end of the iteration.
            next_k.load(K, (tile + 1) * kBlockN, T);
            next_v.load(V, (tile + 1) * kBlockN, T);
        }
        __syncthreads();  // ... for every thread's copies, not only this thread's
        if (tile == 0) {
            // ldmatrix.x4 of a 16 x 16 block: lanes 0-15 point at rows 0-15 of columns 0-7,
            // lanes 16-31 at the same rows, columns 8-15 (registers = a[0..3], see tensor_core.h).
#pragma unroll
            for (int kk = 0; kk < kD / 16; ++kk)
                tc::ldmatrix_x4(q_frag[kk], q_tile + tc::swizzled<kD>(warp * 16 + a_src.row,
                                                                      kk * 16 + a_src.col));
        }
        const Element* k_tile = k_tiles + stage * kBlockN * kD;
        const Element* v_tile = v_tiles + stage * kBlockN * kD;

        // S = Q K^T for 16 rows x 64 keys: 8 n tiles of 8 keys. B is K stored [key][d], i.e.
        // n-major with k contiguous: a plain ldmatrix gives b fragments. One x4 covers 16 keys x
        // 16 d: matrices (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d 0-7), (keys 8-15,
        // d 8-15) = b0, b1 of n tile 2p and b0, b1 of n tile 2p + 1.
        float s[kBlockN / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
            for (int p = 0; p < kBlockN / 16; ++p) {
                std::uint32_t b[4];
                tc::ldmatrix_x4(b,
                                k_tile + tc::swizzled<kD>(p * 16 + b_src.row, kk * 16 + b_src.col));
                tc::mma(s[2 * p], q_frag[kk], b[0], b[1]);
                tc::mma(s[2 * p + 1], q_frag[kk], b[2], b[3]);
            }
        }

        // Mask keys past T and, causal, keys after the query; only tiles that reach past either
        // boundary need it.
        const int key0 = tile * kBlockN;
        if (key0 + kBlockN > T || (causal && key0 + kBlockN > row0)) {
#pragma unroll
            for (int n = 0; n < kBlockN / 8; ++n)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int key = key0 + n * 8 + 2 * t + i % 2, row = row0 + g + 8 * (i / 2);
                    if (key >= T || (causal && key > row)) s[n][i] = -INFINITY;
                }
        }

        // Online softmax on the fragments: rows g (i = 0, 1) and g + 8 (i = 2, 3). A row's 64
        // scores are spread over the 4 lanes of a group: reduce the max with 2 shuffles.
        float correction[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float tile_max = -INFINITY;
#pragma unroll
            for (int n = 0; n < kBlockN / 8; ++n)
                tile_max = fmaxf(tile_max, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
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
                    s[n][i] = exp2f(fmaf(s[n][i], scale_log2, -max_scaled));  // P, unnormalized
                    sum += s[n][i];
                }
            row_sum[h] = row_sum[h] * correction[h] + sum;
        }
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            o[n][0] *= correction[0];
            o[n][1] *= correction[0];
            o[n][2] *= correction[1];
            o[n][3] *= correction[1];
        }

        // O += P V. P's accumulators are already in A's layout: n tiles 2j and 2j + 1 of S are
        // the k = 0-7 and k = 8-15 halves of the A fragment for keys 16j .. 16j + 15, rounded to
        // Elements in pairs (tc::pack). V is stored
        // [key][d], k-major for this product: ldmatrix .trans gives b fragments; one x4 covers 16
        // keys x 16 d: (keys 0-7, d 0-7), (keys 8-15, d 0-7), (keys 0-7, d 8-15), (keys 8-15, d
        // 8-15) = b0, b1 of d tile 2p and b0, b1 of d tile 2p + 1.
#pragma unroll
        for (int j = 0; j < kBlockN / 16; ++j) {
            const std::uint32_t p_frag[4] = {tc::pack(s[2 * j][0], s[2 * j][1]),
                                             tc::pack(s[2 * j][2], s[2 * j][3]),
                                             tc::pack(s[2 * j + 1][0], s[2 * j + 1][1]),
                                             tc::pack(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
            for (int p = 0; p < kD / 16; ++p) {
                std::uint32_t b[4];
                tc::ldmatrix_x4<true>(
                    b, v_tile + tc::swizzled<kD>(j * 16 + a_src.row, p * 16 + a_src.col));
                tc::mma(o[2 * p], p_frag, b[0], b[1]);
                tc::mma(o[2 * p + 1], p_frag, b[2], b[3]);
            }
        }
        // Every warp is done with this stage before the next iteration's copies overwrite it.
        __syncthreads();
        if constexpr (!tc::kAsyncCopies) {
            // sm_75: the next tile, waiting in registers, into the one K/V stage.
            if (tile + 1 < key_tiles) {
                next_k.store(k_tiles);
                next_v.store(v_tiles);
            }
        }
    }

    // The 4 lanes of a row group each summed a quarter of the row: add them up, then normalize.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
        row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
        const int row = row0 + g + 8 * h;
        if (row >= T) continue;
        const float inv_sum = 1.0f / row_sum[h];
        Element* out = O + head * T * kD + static_cast<long long>(row) * kD;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n)
            *reinterpret_cast<std::uint32_t*>(out + n * 8 + 2 * t) =
                tc::pack(o[n][2 * h] * inv_sum, o[n][2 * h + 1] * inv_sum);
        // L = log sum_j exp(scale s_j) = scale max + log(sum of exp(scale (s_j - max))).
        if (t == 0) L[head * T + row] = scale * row_max[h] + logf(row_sum[h]);
    }
}

template <int kD>
void launch(const Element* Q, const Element* K, const Element* V, Element* O, float* L,
            int heads_total, int T, float scale, bool causal) {
    constexpr int kSharedBytes = (kBlockM + 2 * kKvStages * kBlockN) * kD * 2;  // Q, K and V
    CUDA_CHECK(cudaFuncSetAttribute(flash_tc_kernel<kD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    const dim3 grid(course::ceil_div(T, kBlockM), heads_total);
    flash_tc_kernel<kD><<<grid, kThreads, kSharedBytes>>>(Q, K, V, O, L, T, scale, causal);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void flash_tc(const course::TensorElement* Q, const course::TensorElement* K,
              const course::TensorElement* V, course::TensorElement* O, float* L, int batch,
              int heads, int T, int D, float scale, bool causal) {
    if (D == 64)
        launch<64>(Q, K, V, O, L, batch * heads, T, scale, causal);
    else
        launch<128>(Q, K, V, O, L, batch * heads, T, scale, causal);
}
