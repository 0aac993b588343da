// 07_attention/flash_backward: the backward pass of flash attention (FlashAttention-2's
// algorithm), bf16 on the tensor cores (fp16 on a T4). Reference solution.
//
// Teaches: recomputing P from the saved logsumexp L instead of storing it, the loop order of the
// backward (a block owns a tile of keys and walks over the query tiles, so dK and dV stay in
// registers), the five products of a tile on mma.sync, and accumulating dQ across key tiles
// with float32 atomics. On a T4 (a build for sm_75: fp16, m16n8k8, no cp.async) the next Q and dO
// tiles wait in registers instead of landing by cp.async.
//
// Run:  grader run 07/flash_backward --solutions
// Contract: flash_backward.h           Notes:  notes/07_attention.md
#include <cmath>
#include <cstdint>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "flash_backward.h"
#include "tensor_core.h"

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockN = 16 * kWarps;    // keys per block: 16 per warp (one mma row block)
constexpr int kBlockM = 32;             // queries per step of the loop
constexpr int kDsStride = kBlockM + 8;  // dS^T rows padded to 80 bytes: ldmatrix without conflicts
// Q and dO tiles in shared memory: two each (one computed, one landing) with cp.async; one where
// the next tile waits in registers (sm_75: tc::kAsyncCopies is false), which keeps a block within
// a T4's 64 KB at D 128.
constexpr int kQStages = tc::kAsyncCopies ? 2 : 1;
constexpr float kLog2e = 1.4426950408889634f;

using tc::Element;  // bf16, or fp16 in a build for sm_75

// D_i = dO_i . O_i, one warp per row (the backward's first step; FlashAttention-2 runs it as a
// kernel of its own too).
__global__ void row_dot_kernel(const Element* O, const Element* dO, float* delta, long long rows,
                               int D) {
    const long long row = static_cast<long long>(blockIdx.x) * 8 + threadIdx.x / 32;
    if (row >= rows) return;
    float sum = 0.0f;
    for (int d = threadIdx.x % 32; d < D; d += 32)
        sum += tc::to_float(O[row * D + d]) * tc::to_float(dO[row * D + d]);
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x % 32 == 0) delta[row] = sum;
}

// Rows [row0, row0 + kRows) of a [T][kD] tensor into a swizzled shared tile (cp.async); rows past
// T are zero-filled.
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

// acc (16 x kBlockM, this warp's 16 keys by the tile's queries) = A B^T, A the warp's 16 rows of
// `a_tile` ([kBlockN][kD]: K or V), B the rows of `b_tile` ([kBlockM][kD]: Q or dO). Both are
// stored with d contiguous: plain ldmatrix for both (as S = Q K^T in flash_tc).
template <int kD>
__device__ void rows_times_rows(float (&acc)[kBlockM / 8][4], const Element* a_tile,
                                const Element* b_tile, int warp, int lane) {
    const course::Coord a_src = course::ldmatrix_a_source(lane);
    const course::Coord b_src = course::ldmatrix_b_source(lane);
#pragma unroll
    for (int n = 0; n < kBlockM / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
        std::uint32_t a[4];
        tc::ldmatrix_x4(a, a_tile + tc::swizzled<kD>(warp * 16 + a_src.row, kk * 16 + a_src.col));
#pragma unroll
        for (int p = 0; p < kBlockM / 16; ++p) {
            std::uint32_t b[4];
            tc::ldmatrix_x4(b, b_tile + tc::swizzled<kD>(p * 16 + b_src.row, kk * 16 + b_src.col));
            tc::mma(acc[2 * p], a, b[0], b[1]);
            tc::mma(acc[2 * p + 1], a, b[2], b[3]);
        }
    }
}

// acc (16 x kD) += A X, A (16 x kBlockM) in accumulator registers (P^T or dS^T, rounded to
// Elements: n tiles 2j, 2j + 1 are the A fragment of k step j, as P in flash_tc), X a [kBlockM][kD]
// tile (dO or Q) read k-major with ldmatrix .trans (as V in flash_tc).
template <int kD>
__device__ void regs_times_tile(float (&acc)[kD / 8][4], const float (&a)[kBlockM / 8][4],
                                const Element* x_tile, int lane) {
    const course::Coord a_src = course::ldmatrix_a_source(lane);  // a k-major B, with .trans
#pragma unroll
    for (int j = 0; j < kBlockM / 16; ++j) {
        const std::uint32_t frag[4] = {
            tc::pack(a[2 * j][0], a[2 * j][1]), tc::pack(a[2 * j][2], a[2 * j][3]),
            tc::pack(a[2 * j + 1][0], a[2 * j + 1][1]), tc::pack(a[2 * j + 1][2], a[2 * j + 1][3])};
#pragma unroll
        for (int p = 0; p < kD / 16; ++p) {
            std::uint32_t b[4];
            tc::ldmatrix_x4<true>(
                b, x_tile + tc::swizzled<kD>(j * 16 + a_src.row, p * 16 + a_src.col));
            tc::mma(acc[2 * p], frag, b[0], b[1]);
            tc::mma(acc[2 * p + 1], frag, b[2], b[3]);
        }
    }
}

// dK = scale * dk and dV = dv for this warp's 16 keys, from its accumulators (rows g and g + 8
// of the m16 block, columns 2t and 2t + 1 of each n8 tile); keys past T are not written.
template <int kD>
__device__ void store_key_gradients(float* dK, float* dV, const float (&dk)[kD / 8][4],
                                    const float (&dv)[kD / 8][4], long long offset, int key_row0,
                                    int T, float scale) {
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int key = key_row0 + g + 8 * h;
        if (key >= T) continue;
#pragma unroll
        for (int n = 0; n < kD / 8; ++n) {
            const long long at = offset + static_cast<long long>(key) * kD + n * 8 + 2 * t;
            *reinterpret_cast<float2*>(dK + at) =
                make_float2(scale * dk[n][2 * h], scale * dk[n][2 * h + 1]);
            *reinterpret_cast<float2*>(dV + at) = make_float2(dv[n][2 * h], dv[n][2 * h + 1]);
        }
    }
}

template <int kD>
__global__ void __launch_bounds__(kThreads)
    flash_backward_kernel(const Element* Q, const Element* K, const Element* V, const Element* dO,
                          const float* L, const float* delta, float* dQ, float* dK, float* dV,
                          int T, float scale, bool causal) {
    extern __shared__ __align__(128) unsigned char shared_bytes[];
    auto* k_tile = reinterpret_cast<Element*>(shared_bytes);  // [kBlockN][kD]
    Element* v_tile = k_tile + kBlockN * kD;                  // [kBlockN][kD]
    Element* q_tiles = v_tile + kBlockN * kD;                 // [kQStages][kBlockM][kD]
    Element* do_tiles = q_tiles + kQStages * kBlockM * kD;    // [kQStages][kBlockM][kD]
    Element* ds_tile = do_tiles + kQStages * kBlockM * kD;    // [kBlockN][kDsStride]: dS^T

    const int n0 = blockIdx.x * kBlockN;  // this block's keys: n0 .. n0 + kBlockN - 1
    const long long head = blockIdx.y;
    const long long offset = head * T * kD;
    Q += offset;
    K += offset;
    V += offset;
    dO += offset;
    dQ += offset;
    L += head * T;
    delta += head * T;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int key_row0 = n0 + warp * 16;  // this warp's 16 keys
    const course::Coord a_src = course::ldmatrix_a_source(lane);
    const course::Coord b_src = course::ldmatrix_b_source(lane);
    const float scale_log2 = scale * kLog2e;

    // Queries that see these keys: all, or (causal) those at or after the first key.
    const int first_tile = causal ? n0 / kBlockM : 0;
    const int query_tiles = course::ceil_div(T, kBlockM);

    copy_tile<kD, kBlockN>(k_tile, K, n0, T);
    copy_tile<kD, kBlockN>(v_tile, V, n0, T);
    copy_tile<kD, kBlockM>(q_tiles, Q, first_tile * kBlockM, T);
    copy_tile<kD, kBlockM>(do_tiles, dO, first_tile * kBlockM, T);
    if constexpr (tc::kAsyncCopies) tc::cp_async_commit();
    StagedTile<kD, kBlockM> next_q, next_do;  // sm_75: the next tiles, in flight during this one

    float dv[kD / 8][4] = {}, dk[kD / 8][4] = {};  // this warp's 16 keys x kD, kept to the end
    for (int tile = first_tile; tile < query_tiles; ++tile) {
        const int stage = (tile - first_tile) % kQStages, q0 = tile * kBlockM;
        if constexpr (tc::kAsyncCopies) {
            if (tile + 1 < query_tiles) {
                load_tile<kD, kBlockM>(q_tiles + (1 - stage) * kBlockM * kD, Q, q0 + kBlockM, T);
                load_tile<kD, kBlockM>(do_tiles + (1 - stage) * kBlockM * kD, dO, q0 + kBlockM, T);
                tc::cp_async_commit();
                tc::cp_async_wait<1>();
            } else {
                tc::cp_async_wait<0>();
            }
        } else if (tile + 1 < query_tiles) {
            // The next tiles' loads go out now, into registers; they go to shared memory at the
            // end of the iteration.
            next_q.load(Q, q0 + kBlockM, T);
            next_do.load(dO, q0 + kBlockM, T);
        }
        __syncthreads();
        const Element* q_tile = q_tiles + stage * kBlockM * kD;
        const Element* do_tile = do_tiles + stage * kBlockM * kD;

        // P^T = exp(S^T - L): S^T = K Q^T (16 keys x 32 queries per warp), recomputed.
        float p[kBlockM / 8][4];
        rows_times_rows<kD>(p, k_tile, q_tile, warp, lane);
#pragma unroll
        for (int n = 0; n < kBlockM / 8; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int query = q0 + n * 8 + 2 * t + i % 2, key = key_row0 + g + 8 * (i / 2);
                const bool visible = query < T && !(causal && key > query);
                p[n][i] = visible ? exp2f(p[n][i] * scale_log2 - L[query] * kLog2e) : 0.0f;
            }

        // dP^T = V dO^T, then dS^T = P^T (dP^T - D_query).
        float ds[kBlockM / 8][4];
        rows_times_rows<kD>(ds, v_tile, do_tile, warp, lane);
#pragma unroll
        for (int n = 0; n < kBlockM / 8; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int query = q0 + n * 8 + 2 * t + i % 2;
                ds[n][i] = query < T ? p[n][i] * (ds[n][i] - delta[query]) : 0.0f;
            }

        regs_times_tile<kD>(dv, p, do_tile, lane);  // dV += P^T dO
        regs_times_tile<kD>(dk, ds, q_tile, lane);  // dK += dS^T Q (scaled at the end)

        // dQ needs a sum over all the block's keys, which 4 warps hold: share dS^T in shared
        // memory, then each warp computes dQ for every query and a quarter of d.
#pragma unroll
        for (int n = 0; n < kBlockM / 8; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                *reinterpret_cast<std::uint32_t*>(ds_tile + (warp * 16 + g + 8 * h) * kDsStride +
                                                  n * 8 + 2 * t) =
                    tc::pack(ds[n][2 * h], ds[n][2 * h + 1]);
        __syncthreads();

        // dQ (32 queries x kD / 4 of d per warp) = dS K: A = dS, stored transposed (key-major):
        // ldmatrix .trans with the lanes of an n-major B (the matrices then come out in A's
        // order); B = K stored [key][d], k-major: .trans with A's lanes.
        constexpr int kSliceTiles = kD / 4 / 8;  // n tiles of 8 d per warp
        float dq[kBlockM / 16][kSliceTiles][4] = {};
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
            for (int m = 0; m < kBlockM / 16; ++m) {
                std::uint32_t a[4];
                tc::ldmatrix_x4<true>(
                    a, ds_tile + (kk * 16 + b_src.row) * kDsStride + m * 16 + b_src.col);
#pragma unroll
                for (int p2 = 0; p2 < kSliceTiles / 2; ++p2) {
                    std::uint32_t b[4];
                    tc::ldmatrix_x4<true>(
                        b, k_tile + tc::swizzled<kD>(kk * 16 + a_src.row,
                                                     warp * (kD / 4) + p2 * 16 + a_src.col));
                    tc::mma(dq[m][2 * p2], a, b[0], b[1]);
                    tc::mma(dq[m][2 * p2 + 1], a, b[2], b[3]);
                }
            }
        }
        // Other blocks (other key tiles) add to the same dQ rows at the same time: atomics.
#pragma unroll
        for (int m = 0; m < kBlockM / 16; ++m)
#pragma unroll
            for (int n = 0; n < kSliceTiles; ++n)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int query = q0 + m * 16 + g + 8 * (i / 2);
                    const int d = warp * (kD / 4) + n * 8 + 2 * t + i % 2;
                    if (query < T)
                        atomicAdd(dQ + static_cast<long long>(query) * kD + d, scale * dq[m][n][i]);
                }
        // Every warp is done with this stage and with dS^T before they are overwritten.
        __syncthreads();
        if constexpr (!tc::kAsyncCopies) {
            // sm_75: the next tiles, waiting in registers, into the one Q and dO stage.
            if (tile + 1 < query_tiles) {
                next_q.store(q_tiles);
                next_do.store(do_tiles);
            }
        }
    }

    store_key_gradients<kD>(dK, dV, dk, dv, offset, key_row0, T, scale);
}

// What the main kernel needs first: D_i = dO_i . O_i for every query row, in stream-ordered
// scratch that the caller frees (cudaFreeAsync) after the main kernel; and dQ, a sum over key
// tiles that many blocks add to, zeroed.
float* prepare_backward(const Element* O, const Element* dO, float* dQ, long long rows, int D) {
    float* delta = nullptr;
    CUDA_CHECK(cudaMallocAsync(&delta, rows * sizeof(float), 0));
    row_dot_kernel<<<static_cast<unsigned>(course::ceil_div(rows, 8LL)), 256>>>(O, dO, delta, rows,
                                                                                D);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemsetAsync(dQ, 0, rows * D * sizeof(float)));
    return delta;
}

template <int kD>
void launch(const Element* Q, const Element* K, const Element* V, const Element* O,
            const Element* dO, const float* L, float* dQ, float* dK, float* dV, int heads_total,
            int T, float scale, bool causal) {
    float* delta = prepare_backward(O, dO, dQ, static_cast<long long>(heads_total) * T, kD);
    constexpr int kSharedBytes =
        (2 * kBlockN + 2 * kQStages * kBlockM) * kD * 2 + kBlockN * kDsStride * 2;
    CUDA_CHECK(cudaFuncSetAttribute(flash_backward_kernel<kD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    const dim3 grid(course::ceil_div(T, kBlockN), heads_total);
    flash_backward_kernel<kD>
        <<<grid, kThreads, kSharedBytes>>>(Q, K, V, dO, L, delta, dQ, dK, dV, T, scale, causal);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(delta, 0));
}

}  // namespace

void flash_backward(const course::TensorElement* Q, const course::TensorElement* K,
                    const course::TensorElement* V, const course::TensorElement* O,
                    const course::TensorElement* dO, const float* L, float* dQ, float* dK,
                    float* dV, int batch, int heads, int T, int D, float scale, bool causal) {
    if (D == 64)
        launch<64>(Q, K, V, O, dO, L, dQ, dK, dV, batch * heads, T, scale, causal);
    else
        launch<128>(Q, K, V, O, dO, L, dQ, dK, dV, batch * heads, T, scale, causal);
}
