// 04_sgemm/sgemm_vectorized: the 2D block tiling with 16-byte loads, and A transposed in shared
// memory. Reference solution.
//
// Teaches: float4 (16-byte) global loads, four floats per instruction where a row allows it (the
// address must be a multiple of 16 bytes), with a one-by-one fallback at the edges and for rows
// that are not 16-byte aligned; storing the A tile transposed, so that the kTM values of A's
// column k that a thread needs are contiguous in shared memory and come in 16-byte reads, like
// B's row k. Same block tiles, thread tiles and steps of k as sgemm_blocktile_2d: only the loads
// change.
//
// Run:  grader run 04/sgemm_vectorized --solutions      Ladder:  grader report 04 --solutions
// Contract: sgemm.h                                     Notes:   notes/04_sgemm.md
#include "course/exercise.h"
#include "sgemm_vectorized.h"

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

// A float4 holds 4 floats: tiles, thread tiles and steps of k0 come in whole float4s, so that a
// float4 of a tile row starts on a 16-byte boundary whenever the matrix row does.
static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the block tile splits into whole thread tiles");
static_assert(kBK % 4 == 0 && kBN % 4 == 0 && kTM % 4 == 0 && kTN % 4 == 0, "whole float4s");

// row[col .. col + 3], 0 past `cols`: one 16-byte load when the row may be read as float4s
// (`row_is_aligned`: it starts on a 16-byte boundary, and so does every 4th float of it) and all 4
// floats lie inside it; else one by one (the right edge, or a misaligned row).
__device__ float4 load4(const float* row, int col, int cols, bool row_is_aligned) {
    if (row_is_aligned && col + 3 < cols) return *reinterpret_cast<const float4*>(row + col);
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) v[q] = col + q < cols ? row[col + q] : 0.0f;
    return make_float4(v[0], v[1], v[2], v[3]);
}

}  // namespace

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    sgemm_vectorized_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                            const float* __restrict__ B, float beta, float* __restrict__ C,
                            bool a_rows_aligned, bool b_rows_aligned) {
    // a_tile is A's tile transposed: a_tile[k][m] = A(row0 + m, k0 + k). A thread's kTM values
    // of A's column k are then kTM consecutive floats, read 4 at a time like those of b_tile.
    // alignas(16): float4 reads and writes need it.
    __shared__ alignas(16) float a_tile[kBK][kBM];
    __shared__ alignas(16) float b_tile[kBK][kBN];  // B[k0 .. + kBK)[col0 .. + kBN)

    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    const int first_row = static_cast<int>(threadIdx.x) / (kBN / kTN) * kTM;
    const int first_col = static_cast<int>(threadIdx.x) % (kBN / kTN) * kTN;
    float acc[kTM][kTN] = {};
    float a_column[kTM];  // A(row0 + first_row + i, k0 + k) for the current k
    float b_row[kTN];     // B(k0 + k, col0 + first_col + j) for the current k

    for (int k0 = 0; k0 < K; k0 += kBK) {
        // The A tile as float4s: kBK / 4 of them per tile row, consecutive threads on
        // consecutive float4s of a row. Each float4 holds 4 values of k: they go to 4 rows of
        // the transposed tile.
        for (int i = threadIdx.x; i < kBM * kBK / 4; i += kThreads) {
            const int r = i / (kBK / 4), c = i % (kBK / 4) * 4;
            const int a_row = row0 + r;
            const float4 v = a_row < M ? load4(A + a_row * K, k0 + c, K, a_rows_aligned)
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            a_tile[c + 0][r] = v.x;
            a_tile[c + 1][r] = v.y;
            a_tile[c + 2][r] = v.z;
            a_tile[c + 3][r] = v.w;
        }
        // The B tile as float4s, stored as they come: b_tile's rows are B's rows.
        for (int i = threadIdx.x; i < kBK * kBN / 4; i += kThreads) {
            const int r = i / (kBN / 4), c = i % (kBN / 4) * 4;
            const int b_row = k0 + r;
            *reinterpret_cast<float4*>(&b_tile[r][c]) =
                b_row < K ? load4(B + b_row * N, col0 + c, N, b_rows_aligned)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        // The tiles are complete before anyone reads them.
        __syncthreads();

#pragma unroll
        for (int k = 0; k < kBK; ++k) {
            // (kTM + kTN) / 4 shared loads of 16 bytes ...
#pragma unroll
            for (int i = 0; i < kTM; i += 4) {
                const float4 a = *reinterpret_cast<const float4*>(&a_tile[k][first_row + i]);
                a_column[i + 0] = a.x, a_column[i + 1] = a.y;
                a_column[i + 2] = a.z, a_column[i + 3] = a.w;
            }
#pragma unroll
            for (int j = 0; j < kTN; j += 4) {
                const float4 b = *reinterpret_cast<const float4*>(&b_tile[k][first_col + j]);
                b_row[j + 0] = b.x, b_row[j + 1] = b.y, b_row[j + 2] = b.z, b_row[j + 3] = b.w;
            }
            // ... then kTM * kTN multiply-adds from registers, as in sgemm_blocktile_2d.
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
    // Row r of A starts at A + r * K: on a 16-byte boundary for every r only when A does and K
    // is a multiple of 4 (likewise B with N). Otherwise the kernel loads those rows one float at
    // a time: correct, just slower.
    const bool a_rows_aligned = course::is_aligned(A, 16) && K % 4 == 0;
    const bool b_rows_aligned = course::is_aligned(B, 16) && N % 4 == 0;
    // One block per kBM x kBN tile of C; ceil_div covers the partial tiles at the edges.
    const dim3 grid(course::ceil_div(N, kBN), course::ceil_div(M, kBM));
    sgemm_vectorized_kernel<<<grid, kThreads>>>(M, N, K, alpha, A, B, beta, C, a_rows_aligned,
                                                b_rows_aligned);
    CUDA_CHECK_LAUNCH();
}
