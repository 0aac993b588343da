// 04_sgemm/sgemm_blocktile_2d: each thread computes a kTM x kTN block of C as outer products.
// Reference solution.
//
// Teaches: 2D register blocking. At each step k a thread copies kTM values of A's column k and
// kTN values of B's row k from shared memory into registers, then does kTM * kTN multiply-adds
// with them (their outer product): 16 shared loads for 64 FMAs with 8 x 8, where the 1D rung
// needed 9 for 8. Bigger block tiles (128 x 128) also halve the global traffic per FMA again,
// and longer steps of k (32: tuned with dev/sweep.sh) halve the barriers per FMA.
//
// Run:  grader run 04/sgemm_blocktile_2d --solutions      Ladder:  grader report 04 --solutions
// Contract: sgemm.h                                       Notes:   notes/04_sgemm.md
#include "course/exercise.h"
#include "sgemm_blocktile_2d.h"

namespace {

constexpr int kBM = 128;  // rows of C per block (and rows of the A tile)
constexpr int kBN = 128;  // columns of C per block (and columns of the B tile)
constexpr int kBK = 32;   // columns of the A tile = rows of the B tile: one step of k0
constexpr int kTM = 8;    // rows of C per thread
constexpr int kTN = 8;    // columns of C per thread
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // one thread per kTM x kTN block of C
// kTM * kTN accumulators per thread make registers what limits the blocks an SM holds: ask the
// compiler to fit kBlocksPerSm blocks (65536 registers / (2 x 256 threads) = 128 per thread).
constexpr int kBlocksPerSm = 2;

static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the block tile splits into whole thread tiles");
static_assert((kBM + kBN) * kBK * sizeof(float) <= 48 * 1024,
              "both tiles fit in the 48 KB of static shared memory a block has without opting in");

}  // namespace

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    sgemm_blocktile_2d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                              const float* __restrict__ B, float beta, float* __restrict__ C) {
    __shared__ float a_tile[kBM][kBK];  // A[row0 .. + kBM)[k0 .. + kBK)
    __shared__ float b_tile[kBK][kBN];  // B[k0 .. + kBK)[col0 .. + kBN)

    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    // The block tile is a (kBM / kTM) x (kBN / kTN) grid of thread tiles; consecutive threads
    // take neighbouring thread tiles of one row of that grid.
    const int first_row = static_cast<int>(threadIdx.x) / (kBN / kTN) * kTM;
    const int first_col = static_cast<int>(threadIdx.x) % (kBN / kTN) * kTN;
    float acc[kTM][kTN] = {};
    float a_column[kTM];  // A(first_row + i, k0 + k) for the current k
    float b_row[kTN];     // B(k0 + k, first_col + j) for the current k

    for (int k0 = 0; k0 < K; k0 += kBK) {
        // Both tiles, each thread kBM * kBK / kThreads elements of each, consecutive threads on
        // consecutive floats of a row (coalesced); 0 outside A or B.
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
            // kTM + kTN shared loads into registers ...
#pragma unroll
            for (int i = 0; i < kTM; ++i) {
                a_column[i] = a_tile[first_row + i][k];
            }
#pragma unroll
            for (int j = 0; j < kTN; ++j) {
                b_row[j] = b_tile[k][first_col + j];
            }
            // ... then kTM * kTN multiply-adds from registers: the outer product.
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += a_column[i] * b_row[j];
        }
        // Everyone is done reading before the next iteration overwrites the tiles.
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int row = row0 + first_row + i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const int col = col0 + first_col + j;
            if (row < M && col < N) {
                // beta == 0 must not read C: it may hold NaN, and 0 * NaN is NaN.
                const int c = row * N + col;
                C[c] = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * C[c];
            }
        }
    }
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // One block per kBM x kBN tile of C; ceil_div covers the partial tiles at the edges.
    const dim3 grid(course::ceil_div(N, kBN), course::ceil_div(M, kBM));
    sgemm_blocktile_2d_kernel<<<grid, kThreads>>>(M, N, K, alpha, A, B, beta, C);
    CUDA_CHECK_LAUNCH();
}
