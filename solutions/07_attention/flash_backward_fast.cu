// 07_attention/flash_backward_fast: the backward pass of flash attention, tuned. Fast reference
// (the readable one is flash_backward.cu, included below).
//
// Teaches: what it takes to feed the tensor cores from one block of 8 warps. A block owns 128
// keys (8 warps of 16) and walks over query tiles of 64, so each Q and dO tile it copies serves
// twice the keys of the readable kernel and dQ takes half the atomics, 8-byte ones on Hopper; one
// barrier per query tile instead of two (dS^T double-buffered, the copies of the tile after next
// issued right after that barrier); the rows' L and D staged beside Q and dO by cp.async instead
// of read from global memory inside the loop; at D = 64, K and V held in registers as A
// fragments for the whole loop; the masks tested only on the tiles that can need them. The
// algorithm, the fragments, D = rowsum(dO * O) and the stores of dK and dV (the readable
// prepare_backward and store_key_gradients) are the readable solution's. The module README
// compares the two.
//
// Run:  grader run 07/flash_backward --solutions      (the "flash_backward (fast)" row)
// Contract: flash_backward.h           Notes:  notes/07_attention.md, dev/tuning/07_attention.md
#include <cmath>
#include <cstdint>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "flash_backward.h"
#include "tensor_core.h"

// The readable solution, whole: its row_dot_kernel computes D here too. (Every header it includes
// is included above, so that none of them lands inside the namespace.)
namespace readable {
#include "flash_backward.cu"
}  // namespace readable

namespace {

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
constexpr int kBlockN = 16 * kWarps;    // keys per block: 16 per warp (one mma row block)
constexpr int kBlockM = 64;             // queries per step of the loop
constexpr int kDsStride = kBlockM + 8;  // dS^T rows padded to 144 bytes: ldmatrix without conflicts
constexpr int kDqWarpsM = 2;            // dQ = dS K: warps along the queries ...
constexpr int kDqWarpsD = kWarps / kDqWarpsM;  // ... by warps along d
// K and V held in registers as A fragments for the whole loop up to this head dimension (D = 64:
// 32 registers beside dK and dV's 64; at D = 128 they would need 64 beside 128).
constexpr int kHeldKeysUpTo = 64;
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kThreads >= 2 * kBlockM, "one thread per L and per D of a query tile");

// Rows [row0, row0 + kRows) of a [T][kD] bf16 tensor into a swizzled shared tile (cp.async, as
// the readable load_tile, with this block's threads); rows past T are zero-filled.
template <int kD, int kRows>
__device__ void load_tile(tc::Element* tile, const tc::Element* src, int row0, int T) {
    constexpr int kChunksPerRow = kD / 8;
    static_assert(kRows * kChunksPerRow % kThreads == 0, "whole rounds of 16-byte copies");
#pragma unroll
    for (int round = 0; round < kRows * kChunksPerRow / kThreads; ++round) {
        const int chunk = threadIdx.x + round * kThreads;
        const int row = chunk / kChunksPerRow, col = (chunk % kChunksPerRow) * 8;
        const bool valid = row0 + row < T;
        const tc::Element* from = src + (valid ? static_cast<long long>(row0 + row) * kD + col : 0);
        tc::cp_async_16(tile + tc::swizzled<kD>(row, col), from, valid);
    }
}

// A query tile's stage: Q and dO rows, and their L and D (zero past T: such a row then adds
// nothing, its dO and Q being zero too).
template <int kD>
__device__ void load_query_tile(tc::Element* q_tile, tc::Element* do_tile, float* lse,
                                float* row_dots, const tc::Element* Q, const tc::Element* dO,
                                const float* L, const float* delta, int q0, int T) {
    load_tile<kD, kBlockM>(q_tile, Q, q0, T);
    load_tile<kD, kBlockM>(do_tile, dO, q0, T);
    if (threadIdx.x < 2 * kBlockM) {
        const int row = threadIdx.x % kBlockM;
        const bool valid = q0 + row < T;
        const float* from = (threadIdx.x < kBlockM ? L : delta) + (valid ? q0 + row : 0);
        tc::cp_async_4((threadIdx.x < kBlockM ? lse : row_dots) + row, from, valid);
    }
}

// This warp's 16 rows of K (or V) as the A fragments of S^T = K Q^T (dP^T = V dO^T), one per 16
// of d: loaded once and held in registers for the whole loop, or re-read from the shared tile
// at each use where registers are short.
template <int kD, bool kHeld>
struct KeyRows {
    const tc::Element* tile;
    int row;  // this lane's ldmatrix row
    int col;  // ... and column within the 16 x 16 block
    std::uint32_t held[kHeld ? kD / 16 : 1][4];

    __device__ KeyRows(const tc::Element* key_tile, int warp, course::Coord a_src)
        : tile(key_tile), row(warp * 16 + a_src.row), col(a_src.col) {
        if constexpr (kHeld)
#pragma unroll
            for (int kk = 0; kk < kD / 16; ++kk) load(held[kk], kk);
    }
    __device__ void load(std::uint32_t (&a)[4], int kk) const {
        tc::ldmatrix_x4(a, tile + tc::swizzled<kD>(row, kk * 16 + col));
    }
    __device__ void fragment(std::uint32_t (&a)[4], int kk) const {
        if constexpr (kHeld)
            for (int i = 0; i < 4; ++i) a[i] = held[kk][i];
        else
            load(a, kk);
    }
};

// acc (16 x kBlockM: this warp's keys by the tile's queries) = A B^T, A the warp's key rows, B
// the rows of `b_tile` (Q or dO, d contiguous: plain ldmatrix, as the readable rows_times_rows).
template <int kD, bool kHeld>
__device__ void rows_times_rows(float (&acc)[kBlockM / 8][4], const KeyRows<kD, kHeld>& a_rows,
                                const tc::Element* b_tile, course::Coord b_src) {
#pragma unroll
    for (int n = 0; n < kBlockM / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
        std::uint32_t a[4];
        a_rows.fragment(a, kk);
#pragma unroll
        for (int p = 0; p < kBlockM / 16; ++p) {
            std::uint32_t b[4];
            tc::ldmatrix_x4(b, b_tile + tc::swizzled<kD>(p * 16 + b_src.row, kk * 16 + b_src.col));
            tc::mma(acc[2 * p], a, b[0], b[1]);
            tc::mma(acc[2 * p + 1], a, b[2], b[3]);
        }
    }
}

// acc (16 x kD) += A X: A (16 x kBlockM) already packed as bf16 A fragments (k step j = queries
// 16j .. 16j + 15), X a [kBlockM][kD] tile read k-major with ldmatrix .trans.
template <int kD>
__device__ void frags_times_tile(float (&acc)[kD / 8][4], const std::uint32_t (&a)[kBlockM / 16][4],
                                 const tc::Element* x_tile, course::Coord a_src) {
#pragma unroll
    for (int j = 0; j < kBlockM / 16; ++j)
#pragma unroll
        for (int p = 0; p < kD / 16; ++p) {
            std::uint32_t b[4];
            tc::ldmatrix_x4<true>(
                b, x_tile + tc::swizzled<kD>(j * 16 + a_src.row, p * 16 + a_src.col));
            tc::mma(acc[2 * p], a[j], b[0], b[1]);
            tc::mma(acc[2 * p + 1], a[j], b[2], b[3]);
        }
}

// Accumulator tiles 2j, 2j + 1 of a 16 x kBlockM product, rounded to bf16 in pairs: the A
// fragment of k step j (as P in flash_tc).
__device__ void pack_fragments(std::uint32_t (&frag)[kBlockM / 16][4],
                               const float (&acc)[kBlockM / 8][4]) {
#pragma unroll
    for (int j = 0; j < kBlockM / 16; ++j) {
        frag[j][0] = tc::pack(acc[2 * j][0], acc[2 * j][1]);
        frag[j][1] = tc::pack(acc[2 * j][2], acc[2 * j][3]);
        frag[j][2] = tc::pack(acc[2 * j + 1][0], acc[2 * j + 1][1]);
        frag[j][3] = tc::pack(acc[2 * j + 1][2], acc[2 * j + 1][3]);
    }
}

// dQ[at], dQ[at + 1] += x, y: one 8-byte atomic where the GPU has them (Hopper), else two.
__device__ __forceinline__ void atomic_add_pair(float* at, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(at), make_float2(x, y));
#else
    atomicAdd(at, x);
    atomicAdd(at + 1, y);
#endif
}

template <int kD>
__global__ void __launch_bounds__(kThreads, 1)
    flash_backward_fast_kernel(const tc::Element* Q, const tc::Element* K, const tc::Element* V,
                               const tc::Element* dO, const float* L, const float* delta, float* dQ,
                               float* dK, float* dV, int T, float scale, bool causal) {
    constexpr bool kHeld = kD <= kHeldKeysUpTo;
    extern __shared__ __align__(128) unsigned char shared_bytes[];
    auto* k_tile = reinterpret_cast<tc::Element*>(shared_bytes);  // [kBlockN][kD]
    tc::Element* v_tile = k_tile + kBlockN * kD;                  // [kBlockN][kD]
    tc::Element* q_tiles = v_tile + kBlockN * kD;                 // [2][kBlockM][kD]
    tc::Element* do_tiles = q_tiles + 2 * kBlockM * kD;           // [2][kBlockM][kD]
    tc::Element* ds_tiles = do_tiles + 2 * kBlockM * kD;          // [2][kBlockN][kDsStride]: dS^T
    auto* lse_tiles = reinterpret_cast<float*>(ds_tiles + 2 * kBlockN * kDsStride);  // [2][kBlockM]
    float* row_dot_tiles = lse_tiles + 2 * kBlockM;                                  // [2][kBlockM]

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

    const int first_tile = causal ? n0 / kBlockM : 0;
    const int query_tiles = course::ceil_div(T, kBlockM);
    const auto load_stage = [&](int stage, int tile) {
        load_query_tile<kD>(q_tiles + stage * kBlockM * kD, do_tiles + stage * kBlockM * kD,
                            lse_tiles + stage * kBlockM, row_dot_tiles + stage * kBlockM, Q, dO, L,
                            delta, tile * kBlockM, T);
    };

    // Two tiles ahead: the barrier of each step makes the next tile visible.
    load_tile<kD, kBlockN>(k_tile, K, n0, T);
    load_tile<kD, kBlockN>(v_tile, V, n0, T);
    load_stage(0, first_tile);
    tc::cp_async_commit();
    if (first_tile + 1 < query_tiles) load_stage(1, first_tile + 1);
    tc::cp_async_commit();
    tc::cp_async_wait<1>();
    __syncthreads();

    const KeyRows<kD, kHeld> k_rows(k_tile, warp, a_src), v_rows(v_tile, warp, a_src);
    float dv[kD / 8][4] = {}, dk[kD / 8][4] = {};  // this warp's 16 keys x kD, kept to the end
    for (int tile = first_tile; tile < query_tiles; ++tile) {
        const int stage = (tile - first_tile) % 2, q0 = tile * kBlockM;
        const tc::Element* q_tile = q_tiles + stage * kBlockM * kD;
        const tc::Element* do_tile = do_tiles + stage * kBlockM * kD;
        const float* lse = lse_tiles + stage * kBlockM;
        const float* row_dots = row_dot_tiles + stage * kBlockM;
        tc::Element* ds_tile = ds_tiles + stage * kBlockN * kDsStride;

        // P^T = exp(S^T - L), S^T = K Q^T recomputed. A (key, query) pair is masked when the key
        // is past T or (causal) after the query; only tiles where that can happen test it.
        float p[kBlockM / 8][4];
        rows_times_rows(p, k_rows, q_tile, b_src);
        const bool masked = key_row0 + 16 > T || (causal && key_row0 + 15 > q0);
#pragma unroll
        for (int n = 0; n < kBlockM / 8; ++n) {
            const float2 l = *reinterpret_cast<const float2*>(lse + n * 8 + 2 * t);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                p[n][i] = exp2f(p[n][i] * scale_log2 - (i % 2 ? l.y : l.x) * kLog2e);
                const int query = q0 + n * 8 + 2 * t + i % 2, key = key_row0 + g + 8 * (i / 2);
                if (masked && (key >= T || (causal && key > query))) p[n][i] = 0.0f;
            }
        }

        // dP^T = V dO^T, then dS^T = P^T (dP^T - D_query).
        float ds[kBlockM / 8][4];
        rows_times_rows(ds, v_rows, do_tile, b_src);
#pragma unroll
        for (int n = 0; n < kBlockM / 8; ++n) {
            const float2 d = *reinterpret_cast<const float2*>(row_dots + n * 8 + 2 * t);
#pragma unroll
            for (int i = 0; i < 4; ++i) ds[n][i] = p[n][i] * (ds[n][i] - (i % 2 ? d.y : d.x));
        }

        std::uint32_t p_frag[kBlockM / 16][4], ds_frag[kBlockM / 16][4];
        pack_fragments(p_frag, p);
        pack_fragments(ds_frag, ds);
        frags_times_tile<kD>(dv, p_frag, do_tile, a_src);  // dV += P^T dO
        frags_times_tile<kD>(dk, ds_frag, q_tile, a_src);  // dK += dS^T Q (scaled at the end)

        // dS^T to shared memory (the fragment registers hold rows g and g + 8 of each 8 queries).
#pragma unroll
        for (int j = 0; j < kBlockM / 16; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                *reinterpret_cast<std::uint32_t*>(ds_tile +
                                                  (warp * 16 + g + 8 * (r % 2)) * kDsStride +
                                                  j * 16 + 8 * (r / 2) + 2 * t) = ds_frag[j][r];

        // The one barrier of the step: the next tile has landed, dS^T is whole, and every warp
        // is done with this stage's Q and dO, which the tile after next now overwrites.
        tc::cp_async_wait<0>();
        __syncthreads();
        if (tile + 2 < query_tiles) load_stage(stage, tile + 2);
        tc::cp_async_commit();

        // dQ (kBlockM x kD) = dS K over the block's keys, a kDqWarpsM x kDqWarpsD grid of warp
        // tiles: A = dS from the key-major dS^T (.trans with an n-major B's lanes), B = K (.trans
        // with A's lanes), as in the readable kernel.
        constexpr int kRows = kBlockM / kDqWarpsM, kCols = kD / kDqWarpsD;
        const int row0 = warp / kDqWarpsD * kRows, col0 = warp % kDqWarpsD * kCols;
        float dq[kRows / 16][kCols / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < kBlockN / 16; ++kk) {
            std::uint32_t a[kRows / 16][4];
#pragma unroll
            for (int m = 0; m < kRows / 16; ++m)
                tc::ldmatrix_x4<true>(
                    a[m], ds_tile + (kk * 16 + b_src.row) * kDsStride + row0 + m * 16 + b_src.col);
#pragma unroll
            for (int p2 = 0; p2 < kCols / 16; ++p2) {
                std::uint32_t b[4];
                tc::ldmatrix_x4<true>(
                    b, k_tile + tc::swizzled<kD>(kk * 16 + a_src.row, col0 + p2 * 16 + a_src.col));
#pragma unroll
                for (int m = 0; m < kRows / 16; ++m) {
                    tc::mma(dq[m][2 * p2], a[m], b[0], b[1]);
                    tc::mma(dq[m][2 * p2 + 1], a[m], b[2], b[3]);
                }
            }
        }
#pragma unroll
        for (int m = 0; m < kRows / 16; ++m)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int query = q0 + row0 + m * 16 + g + 8 * h;
                if (query >= T) continue;
#pragma unroll
                for (int n = 0; n < kCols / 8; ++n)
                    atomic_add_pair(dQ + static_cast<long long>(query) * kD + col0 + n * 8 + 2 * t,
                                    scale * dq[m][n][2 * h], scale * dq[m][n][2 * h + 1]);
            }
    }

    readable::store_key_gradients<kD>(dK, dV, dk, dv, offset, key_row0, T, scale);
}

template <int kD>
void launch(const tc::Element* Q, const tc::Element* K, const tc::Element* V, const tc::Element* O,
            const tc::Element* dO, const float* L, float* dQ, float* dK, float* dV, int heads_total,
            int T, float scale, bool causal) {
    float* delta =
        readable::prepare_backward(O, dO, dQ, static_cast<long long>(heads_total) * T, kD);
    constexpr int kSharedBytes = (2 * kBlockN + 4 * kBlockM) * kD * 2 +
                                 2 * kBlockN * kDsStride * 2 + 4 * kBlockM * sizeof(float);
    CUDA_CHECK(cudaFuncSetAttribute(flash_backward_fast_kernel<kD>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    const dim3 grid(course::ceil_div(T, kBlockN), heads_total);
    flash_backward_fast_kernel<kD>
        <<<grid, kThreads, kSharedBytes>>>(Q, K, V, dO, L, delta, dQ, dK, dV, T, scale, causal);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaFreeAsync(delta, 0));
}

}  // namespace

void flash_backward(const tc::Element* Q, const tc::Element* K, const tc::Element* V,
                    const tc::Element* O, const tc::Element* dO, const float* L, float* dQ,
                    float* dK, float* dV, int batch, int heads, int T, int D, float scale,
                    bool causal) {
    // This kernel's pipeline is cp.async's: a build for sm_75 (fp16) runs the readable kernel.
    if (!tc::kAsyncCopies) {
        readable::flash_backward(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale, causal);
        return;
    }
    if (D == 64)
        launch<64>(Q, K, V, O, dO, L, dQ, dK, dV, batch * heads, T, scale, causal);
    else
        launch<128>(Q, K, V, O, dO, L, dQ, dK, dV, batch * heads, T, scale, causal);
}
