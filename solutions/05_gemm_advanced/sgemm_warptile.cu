// 05_gemm_advanced/sgemm_warptile: module 04's vectorized SGEMM with the block tile split into warp
// tiles, each thread's 8 x 8 outputs spread over its warp tile so that shared reads have no bank
// conflicts, and the kernel a template whose tile sizes an autotuner picks. Reference solution.
//
// Teaches: the warp as a level of tiling between the block and the thread (a warp's 32 threads
// cover a compact kWM x kWN tile of C, and each shared load of a row of A or B is then shared by
// the warp's threads of that row or column); placing a thread's outputs as 2 x 2 strips of 4 x 4
// half a warp tile apart, so that the threads of a warp read one contiguous span of a tile row
// (conflict-free), where 8 contiguous columns per thread put several threads on the same banks;
// a kernel templated on its tiles, instantiated for a list of configurations, with the valid ones
// enforced at compile time and the fastest picked by timing them on your GPU (the autotuner:
// README.md).
//
// Run:  grader run 05/sgemm_warptile --solutions      Ladder:  grader report 05 --solutions
// Contract: sgemm_warptile.h (module 04's sgemm.h)    Notes:   notes/05_gemm_advanced.md
#include <iterator>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "sgemm_warptile.h"

namespace {

// The tiles of one configuration. A block computes kBM x kBN of C in steps of kBK in k; its warps
// each compute kWM x kWN; a thread computes 8 x 8 of its warp's tile, as 2 x 2 strips of
// kStrip x kStrip whose corners lie half a warp tile apart in each direction.
template <int BM, int BN, int BK, int WM, int WN>
struct Tiles {
    static constexpr int kBM = BM, kBN = BN, kBK = BK, kWM = WM, kWN = WN;
    static constexpr int kStrip = 4;
    static constexpr int kThreadRows = WM / (2 * kStrip);  // threads down a warp tile ...
    static constexpr int kThreadCols = WN / (2 * kStrip);  // ... and across it
    static constexpr int kWarpCols = BN / WN;              // warp tiles across the block tile
    static constexpr int kThreads = 32 * (BM / WM) * kWarpCols;
    // 64 accumulators per thread make registers what limits the blocks an SM holds: ask the
    // compiler for 128 per thread at most (65536 registers hold 512 such threads), as in
    // sgemm_blocktile_2d, so that 512 / kThreads blocks fit.
    static constexpr int kBlocksPerSm = 512 / kThreads;

    static_assert(kThreadRows * kThreadCols == 32, "a warp's 32 threads cover its tile");
    static_assert(BM % WM == 0 && BN % WN == 0, "the block tile splits into whole warp tiles");
    static_assert(BK % 4 == 0, "a step of k is whole float4s of A's rows");
    static_assert(kThreads <= 512, "at most 512 threads of 128 registers per block");
    static_assert((BM + BN) * BK * 4 <= 48 * 1024, "the tiles fit 48 KB of static shared memory");
};

// row[col .. col + 3], 0 past `cols`: one 16-byte load when the row may be read as float4s and all
// 4 floats lie inside it, else one by one (as in module 04's sgemm_vectorized).
__device__ float4 load4(const float* row, int col, int cols, bool row_is_aligned) {
    if (row_is_aligned && col + 3 < cols) return *reinterpret_cast<const float4*>(row + col);
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = col + q < cols ? row[col + q] : 0.0f;
    return make_float4(v[0], v[1], v[2], v[3]);
}

// C = alpha * acc + beta * C for a thread's outputs, its first strip's corner at (first_row,
// first_col) of C: output i of its 2 * kStrip rows is row first_row + i % kStrip of strip
// i / kStrip, the strips kWM / 2 apart (likewise columns); nothing past M or N is written.
template <class T>
__device__ void store_outputs(float* C, const float (&acc)[2 * T::kStrip][2 * T::kStrip], int M,
                              int N, float alpha, float beta, int first_row, int first_col) {
    constexpr int kStrip = T::kStrip;
#pragma unroll
    for (int i = 0; i < 2 * kStrip; ++i) {
        const int row = first_row + i / kStrip * (T::kWM / 2) + i % kStrip;
#pragma unroll
        for (int j = 0; j < 2 * kStrip; ++j) {
            const int col = first_col + j / kStrip * (T::kWN / 2) + j % kStrip;
            if (row < M && col < N) {
                // beta == 0 must not read C: it may hold NaN, and 0 * NaN is NaN.
                const int c = row * N + col;
                C[c] = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * C[c];
            }
        }
    }
}

}  // namespace

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)
    sgemm_warptile_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                          const float* __restrict__ B, float beta, float* __restrict__ C,
                          bool a_rows_aligned, bool b_rows_aligned) {
    constexpr int kStrip = T::kStrip;
    // a_tile is A's tile transposed (a_tile[k][m]), as in sgemm_vectorized: a thread's values of
    // A's column k are contiguous, read 4 at a time like those of B's row k.
    __shared__ alignas(16) float a_tile[T::kBK][T::kBM];
    __shared__ alignas(16) float b_tile[T::kBK][T::kBN];

    const int row0 = blockIdx.y * T::kBM, col0 = blockIdx.x * T::kBN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // The warp's tile (warps in row-major order over the block tile), then the corner of this
    // thread's first strip (lanes in row-major order over kThreadRows x kThreadCols). Its strips
    // start at first_row + {0, kWM / 2} and first_col + {0, kWN / 2}: the lanes of a warp that
    // share a row read kThreadCols neighbouring float4s of a b_tile row, one contiguous span.
    const int warp_row = warp / T::kWarpCols * T::kWM, warp_col = warp % T::kWarpCols * T::kWN;
    const int first_row = warp_row + lane / T::kThreadCols * kStrip;
    const int first_col = warp_col + lane % T::kThreadCols * kStrip;
    float acc[2 * kStrip][2 * kStrip] = {};

    for (int k0 = 0; k0 < K; k0 += T::kBK) {
        // The tiles as float4s, 0 outside A and B (as in sgemm_vectorized).
        for (int i = threadIdx.x; i < T::kBM * T::kBK / 4; i += T::kThreads) {
            const int r = i / (T::kBK / 4), c = i % (T::kBK / 4) * 4;
            const float4 v = row0 + r < M ? load4(A + (row0 + r) * K, k0 + c, K, a_rows_aligned)
                                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            a_tile[c + 0][r] = v.x;
            a_tile[c + 1][r] = v.y;
            a_tile[c + 2][r] = v.z;
            a_tile[c + 3][r] = v.w;
        }
        for (int i = threadIdx.x; i < T::kBK * T::kBN / 4; i += T::kThreads) {
            const int r = i / (T::kBN / 4), c = i % (T::kBN / 4) * 4;
            *reinterpret_cast<float4*>(&b_tile[r][c]) =
                k0 + r < K ? load4(B + (k0 + r) * N, col0 + c, N, b_rows_aligned)
                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        __syncthreads();  // the tiles are complete before anyone reads them

#pragma unroll
        for (int k = 0; k < T::kBK; ++k) {
            // Two float4s of A's column k and two of B's row k, a strip's worth each ...
            float a[2 * kStrip], b[2 * kStrip];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float4 a4 =
                    *reinterpret_cast<const float4*>(&a_tile[k][first_row + half * T::kWM / 2]);
                const float4 b4 =
                    *reinterpret_cast<const float4*>(&b_tile[k][first_col + half * T::kWN / 2]);
                a[half * 4 + 0] = a4.x, a[half * 4 + 1] = a4.y;
                a[half * 4 + 2] = a4.z, a[half * 4 + 3] = a4.w;
                b[half * 4 + 0] = b4.x, b[half * 4 + 1] = b4.y;
                b[half * 4 + 2] = b4.z, b[half * 4 + 3] = b4.w;
            }
            // ... then their 64 products.
#pragma unroll
            for (int i = 0; i < 2 * kStrip; ++i)
#pragma unroll
                for (int j = 0; j < 2 * kStrip; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();  // everyone is done reading before the next tiles overwrite them
    }

    store_outputs<T>(C, acc, M, N, alpha, beta, row0 + first_row, col0 + first_col);
}

namespace {

// `kernel` (this file's, or the fast reference's) over a grid of T's block tiles covering C.
template <class T, class Kernel>
void launch_kernel(Kernel kernel, int M, int N, int K, float alpha, const float* A, const float* B,
                   float beta, float* C) {
    // As in sgemm_vectorized: float4 loads only for rows that start on 16 bytes.
    const bool a_rows_aligned = course::is_aligned(A, 16) && K % 4 == 0;
    const bool b_rows_aligned = course::is_aligned(B, 16) && N % 4 == 0;
    const dim3 grid(course::ceil_div(N, T::kBN), course::ceil_div(M, T::kBM));
    kernel<<<grid, T::kThreads>>>(M, N, K, alpha, A, B, beta, C, a_rows_aligned, b_rows_aligned);
    CUDA_CHECK_LAUNCH();
}

template <class T>
void launch(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
            float* C) {
    launch_kernel<T>(sgemm_warptile_kernel<T>, M, N, K, alpha, A, B, beta, C);
}

struct Config {
    const char* name;
    void (*launch)(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                   float* C);
};

// The configurations the autotuner times. Each is a template instance, so an invalid one (threads
// that do not cover the warp tile, tiles too large for shared memory) does not compile.
constexpr Config kConfigs[] = {
    {"BM128 BN128 BK16 WM32 WN64", launch<Tiles<128, 128, 16, 32, 64>>},
    {"BM128 BN128 BK16 WM64 WN32", launch<Tiles<128, 128, 16, 64, 32>>},
    {"BM128 BN128 BK8 WM32 WN64", launch<Tiles<128, 128, 8, 32, 64>>},
    {"BM128 BN128 BK32 WM64 WN32", launch<Tiles<128, 128, 32, 64, 32>>},
    {"BM64 BN128 BK16 WM32 WN64", launch<Tiles<64, 128, 16, 32, 64>>},
    {"BM128 BN256 BK16 WM64 WN32", launch<Tiles<128, 256, 16, 64, 32>>},
};
// The one sgemm() runs: the autotuner's winner on an H100 (README.md).
constexpr int kChosen = 3;

}  // namespace

int sgemm_config_count() { return static_cast<int>(std::size(kConfigs)); }

const char* sgemm_config_name(int config) {
    if (config < 0 || config >= sgemm_config_count())
        throw std::out_of_range("sgemm_warptile: no configuration " + std::to_string(config));
    return kConfigs[config].name;
}

void sgemm_with_config(int config, int M, int N, int K, float alpha, const float* A, const float* B,
                       float beta, float* C) {
    if (config < 0 || config >= sgemm_config_count())
        throw std::out_of_range("sgemm_warptile: no configuration " + std::to_string(config));
    kConfigs[config].launch(M, N, K, alpha, A, B, beta, C);
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    sgemm_with_config(kChosen, M, N, K, alpha, A, B, beta, C);
}
