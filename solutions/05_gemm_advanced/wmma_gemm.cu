// 05_gemm_advanced/wmma_gemm: C = A B^T on the tensor cores through nvcuda::wmma, bf16 inputs
// (fp16 on a T4), float32 accumulators. Reference solution.
//
// Teaches: the tensor cores' unit of work, a 16 x 16 x 16 product whose operands and result are
// fragments the 32 lanes of a warp hold together (which lane holds what is the library's
// business here; mma_gemm opens it); tiles of A and B staged in shared memory with 16-byte loads,
// zeros past M, N and K on the way in; the accumulators written back through shared memory, so
// that a partial tile at the edge of C is a guarded copy rather than a fragment store.
//
// Run:  grader run 05/wmma_gemm --solutions      Ladder:  grader report 05 --solutions
// Contract: gemm_bf16.h                          Notes:   notes/05_gemm_advanced.md
#include <mma.h>

#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "wmma_gemm.h"

namespace {

constexpr int kBM = 64;     // rows of C per block
constexpr int kBN = 64;     // columns of C per block
constexpr int kBK = 32;     // k per step: two 16-deep fragments
constexpr int kWarpsM = 2;  // warps along M ...
constexpr int kWarpsN = 2;  // ... and along N: each owns a kWarpM x kWarpN tile of C
constexpr int kWarpM = kBM / kWarpsM;
constexpr int kWarpN = kBN / kWarpsN;
constexpr int kFrag = 16;  // wmma's bf16 and fp16 shape: 16 x 16 x 16
constexpr int kFragsM = kWarpM / kFrag;
constexpr int kFragsN = kWarpN / kFrag;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
constexpr int kChunk = 8;  // 16-bit elements per 16-byte load
// Shared rows padded by one 16-byte chunk: wmma reads 16 rows at a time, and rows 80 bytes apart
// spread them over the banks (64 bytes apart, every other row would start in the same banks).
// wmma needs row strides that are multiples of 16 bytes, and fragments that start on 32 bytes.
constexpr int kTileStride = kBK + kChunk;  // in elements
constexpr int kCStride = kBN + 4;          // in floats

static_assert(kFragsM * kFrag == kWarpM && kFragsN * kFrag == kWarpN && kBK % kFrag == 0,
              "a warp's tile and a K step are whole fragments");
static_assert(kBK % kChunk == 0 && kBN % 4 == 0, "whole 16-byte chunks");
static_assert(kFrag * kTileStride * 2 % 32 == 0 && kFrag * kCStride * 4 % 32 == 0,
              "every fragment starts on 32 bytes");

// bf16, or fp16 where this build is for a GPU without bf16 tensor cores (sm_75: a T4); wmma takes
// either, the same code (course/tensor_element.h).
using Element = course::TensorElement;

// Rows row0 .. row0 + kRows - 1, columns k0 .. k0 + kBK - 1 of a row-major matrix with `rows`
// rows and K columns into tile[kRows][kTileStride], zeros outside the matrix. K is a multiple of
// 8, so a chunk of 8 lies entirely inside or entirely outside.
template <int kRows>
__device__ void load_tile(Element (*tile)[kTileStride], const Element* matrix, int rows, int K,
                          int row0, int k0) {
    for (int i = threadIdx.x; i < kRows * kBK / kChunk; i += kThreads) {
        const int r = i / (kBK / kChunk), c = i % (kBK / kChunk) * kChunk;
        const int row = row0 + r, k = k0 + c;
        uint4 chunk = make_uint4(0, 0, 0, 0);
        if (row < rows && k < K) chunk = *reinterpret_cast<const uint4*>(matrix + row * K + k);
        *reinterpret_cast<uint4*>(&tile[r][c]) = chunk;
    }
}

}  // namespace

__global__ void __launch_bounds__(kThreads)
    wmma_gemm_kernel(int M, int N, int K, const Element* __restrict__ A,
                     const Element* __restrict__ B, float* __restrict__ C) {
    // bf16 fragments exist from sm_80 on, fp16 ones before (a build for sm_75 has fp16 elements):
    // bf16 compiled for an older GPU leaves the kernel empty, and the launcher refuses to run it.
#if defined(COURSE_FP16_TENSOR_CORES) || __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    __shared__ alignas(128) Element a_tile[kBM][kTileStride];  // A[row0 + r][k0 + k]
    __shared__ alignas(128) Element b_tile[kBN][kTileStride];  // B[col0 + n][k0 + k]
    __shared__ alignas(128) float c_tile[kBM][kCStride];

    const int row0 = blockIdx.y * kBM, col0 = blockIdx.x * kBN;
    const int warp = threadIdx.x / 32;
    const int warp_row = warp / kWarpsN * kWarpM, warp_col = warp % kWarpsN * kWarpN;

    wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> acc[kFragsM][kFragsN];
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < K; k0 += kBK) {
        load_tile<kBM>(a_tile, A, M, K, row0, k0);
        load_tile<kBN>(b_tile, B, N, K, col0, k0);
        __syncthreads();  // the tiles are complete before any warp reads them

#pragma unroll
        for (int k = 0; k < kBK; k += kFrag) {
            // A's fragment is row-major (row m, k along the row). B's tile holds B as it is in
            // memory, n-major with k contiguous, which for the k x n operand of the product is
            // column-major: element (k, n) at b_tile[n][k].
            wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, Element, wmma::row_major>
                a[kFragsM];
            wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, Element, wmma::col_major>
                b[kFragsN];
#pragma unroll
            for (int i = 0; i < kFragsM; ++i)
                wmma::load_matrix_sync(a[i], &a_tile[warp_row + i * kFrag][k], kTileStride);
#pragma unroll
            for (int j = 0; j < kFragsN; ++j)
                wmma::load_matrix_sync(b[j], &b_tile[warp_col + j * kFrag][k], kTileStride);
#pragma unroll
            for (int i = 0; i < kFragsM; ++i)
#pragma unroll
                for (int j = 0; j < kFragsN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // every warp is done reading before the next tiles overwrite them
    }

    // Which lane holds which element of an accumulator is not specified: store the fragments to
    // shared memory as a plain row-major tile, then copy what lies inside C, 4 floats at a time
    // (N is a multiple of 8, so a group of 4 is entirely inside or outside; rows of C start on 16
    // bytes because C does and N * 4 bytes is a multiple of 16).
#pragma unroll
    for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j)
            wmma::store_matrix_sync(&c_tile[warp_row + i * kFrag][warp_col + j * kFrag], acc[i][j],
                                    kCStride, wmma::mem_row_major);
    __syncthreads();
    for (int i = threadIdx.x; i < kBM * kBN / 4; i += kThreads) {
        const int r = i / (kBN / 4), c = i % (kBN / 4) * 4;
        const int row = row0 + r, col = col0 + c;
        if (row < M && col < N)
            *reinterpret_cast<float4*>(C + row * N + col) =
                *reinterpret_cast<const float4*>(&c_tile[r][c]);
    }
#endif
}

void gemm_bf16(int M, int N, int K, const Element* A, const Element* B, float* C) {
    if (!course::kFp16TensorCores && course::compiled_arch(wmma_gemm_kernel) < 80)
        throw std::runtime_error(
            "wmma_gemm: bf16 tensor cores need device code for sm_80 or newer");
    // One block per kBM x kBN tile of C; ceil_div covers the partial tiles at the edges.
    const dim3 grid(course::ceil_div(N, kBN), course::ceil_div(M, kBM));
    wmma_gemm_kernel<<<grid, kThreads>>>(M, N, K, A, B, C);
    CUDA_CHECK_LAUNCH();
}
