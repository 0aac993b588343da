// 04_sgemm/sgemm_blocktile_1d: each thread computes a column of kTM results in registers.
// Reference solution.
//
// Teaches: 1D register blocking. In sgemm_smem every multiply-add needs a shared-memory load of
// B; here a thread keeps kTM = 8 accumulators for 8 rows of one column of C, so each value of B
// it loads from shared memory serves 8 multiply-adds. The block tile becomes rectangular in the
// loop's terms: 64 x 64 outputs, but only 8 columns of A and 8 rows of B per step of k0.
//
// Run:  grader run 04/sgemm_blocktile_1d --solutions      Ladder:  grader report 04 --solutions
// Contract: sgemm.h                                       Notes:   notes/04_sgemm.md
#include "course/exercise.h"
#include "sgemm_blocktile_1d.h"

namespace {

constexpr int kBM = 64;  // rows of C per block (and rows of the A tile)
constexpr int kBN = 64;  // columns of C per block (and columns of the B tile)
constexpr int kBK = 8;   // columns of the A tile = rows of the B tile: one step of k0
constexpr int kTM = 8;   // rows of C per thread, one accumulator each
constexpr int kThreads = (kBM / kTM) * kBN;  // one thread per kTM x 1 column piece of the C tile

static_assert(kBM % kTM == 0, "a block's rows split into whole columns of kTM");
static_assert((kBM + kBN) * kBK * sizeof(float) <= 48 * 1024,
              "both tiles fit in the 48 KB of static shared memory a block has without opting in");

}  // namespace

__global__ void __launch_bounds__(kThreads)
    sgemm_blocktile_1d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                              const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ float a_tile[kBM][kBK];  // A[row0 .. + kBM)[k0 .. + kBK)
    __shared__ float b_tile[kBK][kBN];  // B[k0 .. + kBK)[col0 .. + kBN)

    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    // Consecutive threads take consecutive columns (a warp reads 32 neighbouring floats of a row
    // of b_tile: no bank conflict); thread t computes rows first_row .. first_row + kTM - 1.
    const int tile_col = static_cast<int>(threadIdx.x) % kBN;
    const int first_row = static_cast<int>(threadIdx.x) / kBN * kTM;
    float acc[kTM] = {};

    for (int k0 = 0; k0 < K; k0 += kBK) {
        // Both tiles, each thread a few elements, consecutive threads on consecutive floats of a
        // row (coalesced); 0 outside A or B, which adds nothing to the dot products.
        for (int i = threadIdx.x; i < kBM * kBK; i += kThreads) {
            const int r = i / kBK, c = i % kBK;
            const int a_row = row0 + r, a_col = k0 + c;
            a_tile[r][c] = a_row < M && a_col < K ? A[a_row * K + a_col] : 0.0f;
        }
        for (int i = threadIdx.x; i < kBK * kBN; i += kThreads) {
            const int r = i / kBN, c = i % kBN;
            const int b_row = k0 + r, b_col = col0 + c;
            b_tile[r][c] = b_row < K && b_col < N ? B[b_row * N + b_col] : 0.0f;
        }
        // The tiles are complete before anyone reads them.
        __syncthreads();

#pragma unroll
        for (int k = 0; k < kBK; ++k) {
            // One shared load of B serves kTM multiply-adds. The a_tile reads are the same
            // address for the whole warp (a broadcast).
            const float b = b_tile[k][tile_col];
#pragma unroll
            for (int i = 0; i < kTM; ++i) acc[i] += a_tile[first_row + i][k] * b;
        }
        // Everyone is done reading before the next iteration overwrites the tiles.
        __syncthreads();
    }

    const int col = col0 + tile_col;
#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int row = row0 + first_row + i;
        if (row < M && col < N) {
            // beta == 0 must not read C: it may hold NaN, and 0 * NaN is NaN.
            const int c = row * N + col;
            C[c] = beta == 0.0f ? alpha * acc[i] : alpha * acc[i] + beta * C[c];
        }
    }
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // One block per kBM x kBN tile of C; ceil_div covers the partial tiles at the edges.
    const dim3 grid(course::ceil_div(N, kBN), course::ceil_div(M, kBM));
    sgemm_blocktile_1d_kernel<<<grid, kThreads>>>(M, N, K, alpha, A, B, beta, C);
    CUDA_CHECK_LAUNCH();
}
