// 05_gemm_advanced/sgemm_warptile_fast: the warp-tiled SGEMM with the next tiles' loads in flight
// during the arithmetic. Fast reference (the readable one is sgemm_warptile.cu).
//
// Teaches: what the last points to 80% of cuBLAS are made of once the shared reads are conflict-
// free: the global loads of step k0 + kBK are issued into registers before the arithmetic on step
// k0 and stored to a second pair of shared tiles after it, so that their latency hides behind the
// multiply-adds, and one barrier per step suffices where the readable kernel waits for its loads,
// then computes, with two barriers. Same tiles, warp tiles and thread strips as the readable one
// (its Tiles, load4, store_outputs, launch_kernel and Config are used as they are).
//
// Run:  grader run 05/sgemm_warptile --solutions      (the "sgemm_warptile (fast)" row)
// Contract: sgemm_warptile.h (module 04's sgemm.h)    Notes:   notes/05_gemm_advanced.md
#include <iterator>
#include <stdexcept>
#include <string>

#include "course/exercise.h"
#include "sgemm_warptile.h"

namespace readable {
#include "sgemm_warptile.cu"
}  // namespace readable

template <class T>
__global__ void __launch_bounds__(T::kThreads, T::kBlocksPerSm)
    sgemm_warptile_fast_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                               const float* __restrict__ B, float beta, float* __restrict__ C,
                               bool a_rows_aligned, bool b_rows_aligned) {
    constexpr int kStrip = T::kStrip;
    // float4s of each tile that each thread loads per step.
    constexpr int kALoads = T::kBM * T::kBK / 4 / T::kThreads;
    constexpr int kBLoads = T::kBK * T::kBN / 4 / T::kThreads;
    static_assert(kALoads * T::kThreads * 4 == T::kBM * T::kBK &&
                      kBLoads * T::kThreads * 4 == T::kBK * T::kBN,
                  "every thread loads the same number of float4s");
    // Two pairs of tiles: step s computes on pair s % 2 while its loads fill the other pair.
    __shared__ alignas(16) float a_tile[2][T::kBK][T::kBM];  // transposed, as in the readable one
    __shared__ alignas(16) float b_tile[2][T::kBK][T::kBN];

    const int row0 = blockIdx.y * T::kBM, col0 = blockIdx.x * T::kBN;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int warp_row = warp / T::kWarpCols * T::kWM, warp_col = warp % T::kWarpCols * T::kWN;
    const int first_row = warp_row + lane / T::kThreadCols * kStrip;
    const int first_col = warp_col + lane % T::kThreadCols * kStrip;
    float acc[2 * kStrip][2 * kStrip] = {};

    // The next step's float4s, in registers between their load and their store to shared memory.
    float4 a_staged[kALoads], b_staged[kBLoads];
    const auto load_tiles = [&](int k0) {
#pragma unroll
        for (int l = 0; l < kALoads; ++l) {
            const int i = threadIdx.x + l * T::kThreads;
            const int r = i / (T::kBK / 4), c = i % (T::kBK / 4) * 4;
            a_staged[l] = row0 + r < M
                              ? readable::load4(A + (row0 + r) * K, k0 + c, K, a_rows_aligned)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int l = 0; l < kBLoads; ++l) {
            const int i = threadIdx.x + l * T::kThreads;
            const int r = i / (T::kBN / 4), c = i % (T::kBN / 4) * 4;
            b_staged[l] = k0 + r < K
                              ? readable::load4(B + (k0 + r) * N, col0 + c, N, b_rows_aligned)
                              : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
    };
    const auto store_tiles = [&](int pair) {
#pragma unroll
        for (int l = 0; l < kALoads; ++l) {
            const int i = threadIdx.x + l * T::kThreads;
            const int r = i / (T::kBK / 4), c = i % (T::kBK / 4) * 4;
            a_tile[pair][c + 0][r] = a_staged[l].x;
            a_tile[pair][c + 1][r] = a_staged[l].y;
            a_tile[pair][c + 2][r] = a_staged[l].z;
            a_tile[pair][c + 3][r] = a_staged[l].w;
        }
#pragma unroll
        for (int l = 0; l < kBLoads; ++l) {
            const int i = threadIdx.x + l * T::kThreads;
            const int r = i / (T::kBN / 4), c = i % (T::kBN / 4) * 4;
            *reinterpret_cast<float4*>(&b_tile[pair][r][c]) = b_staged[l];
        }
    };

    load_tiles(0);
    store_tiles(0);
    __syncthreads();
    for (int k0 = 0, pair = 0; k0 < K; k0 += T::kBK, pair ^= 1) {
        const bool more = k0 + T::kBK < K;
        if (more) load_tiles(k0 + T::kBK);  // in flight during the arithmetic below

#pragma unroll
        for (int k = 0; k < T::kBK; ++k) {
            float a[2 * kStrip], b[2 * kStrip];
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const float4 a4 = *reinterpret_cast<const float4*>(
                    &a_tile[pair][k][first_row + half * T::kWM / 2]);
                const float4 b4 = *reinterpret_cast<const float4*>(
                    &b_tile[pair][k][first_col + half * T::kWN / 2]);
                a[half * 4 + 0] = a4.x, a[half * 4 + 1] = a4.y;
                a[half * 4 + 2] = a4.z, a[half * 4 + 3] = a4.w;
                b[half * 4 + 0] = b4.x, b[half * 4 + 1] = b4.y;
                b[half * 4 + 2] = b4.z, b[half * 4 + 3] = b4.w;
            }
#pragma unroll
            for (int i = 0; i < 2 * kStrip; ++i)
#pragma unroll
                for (int j = 0; j < 2 * kStrip; ++j) acc[i][j] += a[i] * b[j];
        }

        // The other pair was last read in the previous step, which every thread has left (the
        // barrier below it): it may be overwritten now. The barrier after the store makes it
        // complete before the next step reads it, and this step's pair free for the next store.
        if (more) store_tiles(pair ^ 1);
        __syncthreads();
    }

    readable::store_outputs<T>(C, acc, M, N, alpha, beta, row0 + first_row, col0 + first_col);
}

namespace {

template <class T>
void launch_fast(int M, int N, int K, float alpha, const float* A, const float* B, float beta,
                 float* C) {
    readable::launch_kernel<T>(sgemm_warptile_fast_kernel<T>, M, N, K, alpha, A, B, beta, C);
}

// Two pairs of tiles must fit 48 KB of static shared memory: steps of 16 in k at most.
constexpr readable::Config kConfigs[] = {
    {"BM128 BN128 BK16 WM32 WN64", launch_fast<readable::Tiles<128, 128, 16, 32, 64>>},
    {"BM128 BN128 BK16 WM64 WN32", launch_fast<readable::Tiles<128, 128, 16, 64, 32>>},
    {"BM128 BN128 BK8 WM32 WN64", launch_fast<readable::Tiles<128, 128, 8, 32, 64>>},
    {"BM128 BN128 BK8 WM64 WN32", launch_fast<readable::Tiles<128, 128, 8, 64, 32>>},
    {"BM128 BN256 BK16 WM64 WN32", launch_fast<readable::Tiles<128, 256, 16, 64, 32>>},
};
// The one sgemm() runs: the autotuner's winner on an H100 (README.md).
constexpr int kChosen = 4;

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
