// 08_training/linear_backward: the backward pass of a linear layer: dinp and dweight with one
// tiled GEMM of your own, read through strides, and dbias as a deterministic column sum.
// Reference solution.
//
// Teaches: the two transposed products of a layer's backward (dinp = dout @ W, dweight += dout^T
// @ inp) as one kernel that reads its operands through strides, so that a transpose is a choice
// of strides and never a copy; module 04's shared-memory tiles and 8 x 8 register blocking with
// guards for every edge (the trainer's shapes are multiples of 32, the checker's are not); an
// epilogue that overwrites, accumulates, or multiplies by GELU' (the MLP's activation fused into
// the product that precedes it in the backward); and column sums without atomics. Timed against
// cuBLAS SGEMM doing the same two products.
//
// Run:  grader run 08/linear_backward --solutions
// Contract: linear_backward.h          Notes:  notes/08_training.md, notes/04_sgemm.md
#include "course/exercise.h"
#include "gelu.h"  // kGeluScale, kGeluCubic: GELU' must be the derivative of the forward's GELU
#include "linear_backward.h"

namespace {

constexpr int kBM = 128;                             // rows of the output per block
constexpr int kBN = 128;                             // columns of the output per block
constexpr int kBK = 32;                              // one step along the reduction
constexpr int kTM = 8;                               // rows of the output per thread
constexpr int kTN = 8;                               // columns of the output per thread
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 256: one thread per 8 x 8 block
// 64 accumulators per thread make registers what limits the blocks an SM holds: ask the compiler
// to fit 2 blocks (65536 registers / (2 x 256 threads) = 128 per thread), as module 04 does.
constexpr int kBlocksPerSm = 2;
// A tile row of kBK floats, padded by one: a column of the tile then falls in 32 different
// banks, so a warp storing down a column (an operand contiguous along its rows) does not
// conflict (notes/02_memory.md).
constexpr int kPitch = kBK + 1;

static_assert((kBM + kBN) * kPitch * sizeof(float) <= 48 * 1024,
              "both tiles fit in the 48 KB of static shared memory a block has without opting in");

// A matrix operand read through strides: element (i, k) is data[i * i_stride + k * k_stride].
// A row-major matrix has (row length, 1); its transpose is the same memory with the strides
// swapped.
struct Operand {
    const float* data;
    int i_stride, k_stride;
};

// What the product does with each result.
enum class Epilogue {
    kWrite,                // out = X Y^T
    kAccumulate,           // out += X Y^T
    kTimesGeluDerivative,  // out = (X Y^T) * GELU'(aux), aux laid out as out
};

// GELU'(x) of GPT-2's tanh approximation (08_training/gelu).
__device__ float gelu_derivative(float x) {
    const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

// tile[r][c] = op(first + r, k0 + c) for r < kRows, c < kBK; 0 past `extent` rows or past K (the
// partial tiles at the edges, which then add nothing). Consecutive threads take consecutive
// elements along whichever direction of the operand is contiguous in memory, so that a warp's
// loads are coalesced for a matrix and for its transpose alike.
template <int kRows>
__device__ void load_tile(float (*tile)[kPitch], const Operand& op, int first, int k0, int extent,
                          int K) {
    const bool along_k = op.k_stride == 1;
    for (int e = threadIdx.x; e < kRows * kBK; e += kThreads) {
        const int r = along_k ? e / kBK : e % kRows;
        const int c = along_k ? e % kBK : e / kRows;
        const int i = first + r, k = k0 + c;
        tile[r][c] = i < extent && k < K ? op.data[i * op.i_stride + k * op.k_stride] : 0.0f;
    }
}

// out[M][N] (row-major) from X (M x K) and Y (N x K): out[i][j] = sum over k of X(i, k) Y(j, k),
// then the epilogue. Both products of the backward have this form (the launcher says how). Every
// matrix has fewer than 2^31 elements (the contract): int offsets do.
template <Epilogue kEpilogue>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    gemm_kernel(float* out, const float* aux, Operand x, Operand y, int M, int N, int K) {
    __shared__ float x_tile[kBM][kPitch];  // X(row0 .. + kBM, k0 .. + kBK)
    __shared__ float y_tile[kBN][kPitch];  // Y(col0 .. + kBN, k0 .. + kBK)

    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    // The block's output tile is a 16 x 16 grid of 8 x 8 thread tiles.
    const int first_row = static_cast<int>(threadIdx.x) / (kBN / kTN) * kTM;
    const int first_col = static_cast<int>(threadIdx.x) % (kBN / kTN) * kTN;
    float acc[kTM][kTN] = {};
    float x_column[kTM], y_column[kTN];

    for (int k0 = 0; k0 < K; k0 += kBK) {
        load_tile<kBM>(x_tile, x, row0, k0, M, K);
        load_tile<kBN>(y_tile, y, col0, k0, N, K);
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int k = 0; k < kBK; ++k) {
            // kTM + kTN shared loads, then kTM * kTN multiply-adds from registers.
#pragma unroll
            for (int i = 0; i < kTM; ++i) x_column[i] = x_tile[first_row + i][k];
#pragma unroll
            for (int j = 0; j < kTN; ++j) y_column[j] = y_tile[first_col + j][k];
#pragma unroll
            for (int i = 0; i < kTM; ++i)
#pragma unroll
                for (int j = 0; j < kTN; ++j) acc[i][j] += x_column[i] * y_column[j];
        }
        __syncthreads();  // everyone is done reading before the next step overwrites the tiles
    }

#pragma unroll
    for (int i = 0; i < kTM; ++i) {
        const int row = row0 + first_row + i;
#pragma unroll
        for (int j = 0; j < kTN; ++j) {
            const int col = col0 + first_col + j;
            if (row >= M || col >= N) continue;
            const int o = row * N + col;
            if constexpr (kEpilogue == Epilogue::kWrite) {
                out[o] = acc[i][j];  // old contents never read: they may be NaN
            } else if constexpr (kEpilogue == Epilogue::kAccumulate) {
                out[o] += acc[i][j];  // one thread owns each element: no race, a fixed order
            } else {
                out[o] = acc[i][j] * gelu_derivative(aux[o]);
            }
        }
    }
}

template <Epilogue kEpilogue>
void gemm(float* out, const float* aux, const Operand& x, const Operand& y, int M, int N, int K) {
    // One block per kBM x kBN tile of out; ceil_div covers the partial tiles at the edges.
    const dim3 grid(course::ceil_div(N, kBN), course::ceil_div(M, kBM));
    gemm_kernel<kEpilogue><<<grid, kThreads>>>(out, aux, x, y, M, N, K);
    CUDA_CHECK_LAUNCH();
}

// dbias[col] += the sum of dout's column col over all rows, deterministically: a block of 32 x 32
// threads owns 32 consecutive columns; thread (tx, ty) sums rows ty, ty + 32, ... of column tx (a
// warp reads 32 consecutive floats of a row: coalesced); the 32 partial sums of each column then
// meet in shared memory and one thread adds them in a fixed order. No atomics across blocks: no
// two blocks share a column.
constexpr int kSumTile = 32;

__global__ void column_sums_kernel(float* dbias, const float* dout, int rows, int cols) {
    __shared__ float partials[kSumTile][kSumTile];
    const int col = blockIdx.x * kSumTile + threadIdx.x;
    float sum = 0.0f;
    if (col < cols)
        for (int r = threadIdx.y; r < rows; r += kSumTile) sum += dout[r * cols + col];
    partials[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
        float total = 0.0f;
        for (int k = 0; k < kSumTile; ++k) total += partials[k][threadIdx.x];
        dbias[col] += total;
    }
}

}  // namespace

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* gelu_input, const float* weight, int rows, int C, int OC) {
    // dinp[r][c] = sum over o of dout[r][o] * weight[o][c]: X = dout (r, o) row-major, Y(c, o) =
    // weight[o][c], weight read transposed. K = OC.
    const Operand dout_rows{dout, OC, 1}, weight_columns{weight, 1, C};
    if (gelu_input)
        gemm<Epilogue::kTimesGeluDerivative>(dinp, gelu_input, dout_rows, weight_columns, rows, C,
                                             OC);
    else
        gemm<Epilogue::kWrite>(dinp, nullptr, dout_rows, weight_columns, rows, C, OC);
    // dweight[o][c] += sum over r of dout[r][o] * inp[r][c]: X(o, r) = dout[r][o], dout read
    // transposed; Y(c, r) = inp[r][c], inp read transposed. K = rows.
    const Operand dout_columns{dout, 1, OC}, inp_columns{inp, 1, C};
    gemm<Epilogue::kAccumulate>(dweight, nullptr, dout_columns, inp_columns, OC, C, rows);
    if (!dbias) return;
    column_sums_kernel<<<course::ceil_div(OC, kSumTile), dim3(kSumTile, kSumTile)>>>(dbias, dout,
                                                                                     rows, OC);
    CUDA_CHECK_LAUNCH();
}
