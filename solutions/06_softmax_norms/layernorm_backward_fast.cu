// 06_softmax_norms/layernorm_backward_fast: LayerNorm backward, and the same gradients of the GPT
// trainer's bf16 rows. Fast reference: the readable solution (layernorm_backward.cu, included
// below) runs every float call; what this file adds is for module 08's trainer.
//
// Teaches (beyond the exercise): layernorm_backward_bf16 (layernorm_backward_bf16.h), the readable
// solution's two directions for bf16 rows, added into the trainer's gradients instead of written,
// so that its bf16 mode needs no float copies and no pass of its own to add them. dx by a warp per
// row (16 bytes, 8 values, per access; the row's first packs held in registers between its two
// sums and its write), added into dx as it is written. dgamma and dbeta as column sums, but over
// chunks of rows: at GPT-2's 768 columns the readable kernel's 24 blocks (one per 32 columns)
// would leave most of an H100 idle; 64 chunks of 256 rows make 768 blocks, whose partial sums a
// last kernel adds in chunk order (the same bits on every run) into dgamma and dbeta.
//
// Run:  grader run 06/layernorm_backward --solutions   (the "layernorm_backward (fast)" row)
// Contract: layernorm_backward.h, layernorm_backward_bf16.h   Notes:  notes/06_softmax_norms.md
#include <cuda_bf16.h>

#include <algorithm>
#include <cstddef>

#include "course/activation.h"
#include "course/exercise.h"
#include "layernorm_backward.h"
#include "layernorm_backward_bf16.h"

// The readable solution, whole: its row sums serve here, and readable::layernorm_backward runs
// every float call. (Every header it includes is included above, so that none of them lands
// inside the namespace.)
namespace readable {
#include "layernorm_backward.cu"
}  // namespace readable

void layernorm_backward(const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* rstd, float* dx, float* dgamma, float* dbeta, int rows,
                        int cols) {
    readable::layernorm_backward(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, rows, cols);
}

// ---- layernorm_backward_bf16 (layernorm_backward_bf16.h): the trainer's bf16 rows ----

namespace {

using bf16 = __nv_bfloat16;
using course::from_float;
using course::to_float;
using readable::RowSums;

// dx: a warp per row, kHeldPacks packs per lane kept in registers between the sums and the write
// (a row of up to 1024 values at 8 per pack; the rest of a longer one is read again, from L1).
constexpr int kRowBlock = 256;
constexpr int kRowsPerBlock = kRowBlock / 32;
constexpr int kHeldPacks = 4;

// dgamma and dbeta: a block sums kSumLanes x 32 threads' columns over a chunk of kChunkRows rows;
// lane x of row ty takes kWidth neighbouring columns of rows ty, ty + kSumLanes, ... so that a
// warp reads 32 x kWidth contiguous values of a row.
constexpr int kSumLanes = 8;
constexpr int kChunkRows = 256;
// The chunks' partial sums of a column, added by 32 x kPartialLanes threads per 32 columns.
constexpr int kPartialLanes = 32;

// kWidth bf16 values moved as one access.
template <int kWidth>
struct alignas(2 * kWidth) Bf16Pack {
    bf16 value[kWidth];
};

// The row sums' terms of one pack (readable::row_terms, value by value).
template <int kWidth>
__device__ RowSums row_terms(const Bf16Pack<kWidth>& x, const Bf16Pack<kWidth>& dy,
                             const Bf16Pack<kWidth>& gamma, float row_mean, float row_rstd) {
    RowSums sums{0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
        const RowSums t = readable::row_terms(to_float(x.value[k]), to_float(dy.value[k]),
                                              to_float(gamma.value[k]), row_mean, row_rstd);
        sums.g += t.g;
        sums.g_xhat += t.g_xhat;
    }
    return sums;
}

// dx += the pack's gradient (readable::dx_of), rounded to bf16 once.
template <int kWidth>
__device__ void add_dx(Bf16Pack<kWidth>* dx, const Bf16Pack<kWidth>& x, const Bf16Pack<kWidth>& dy,
                       const Bf16Pack<kWidth>& gamma, float row_mean, float row_rstd, float mean_g,
                       float mean_g_xhat) {
    Bf16Pack<kWidth> sum = *dx;
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
        sum.value[k] = from_float<bf16>(to_float(sum.value[k]) +
                                        readable::dx_of(to_float(x.value[k]), to_float(dy.value[k]),
                                                        to_float(gamma.value[k]), row_mean,
                                                        row_rstd, mean_g, mean_g_xhat));
    *dx = sum;
}

template <int kWidth>
__global__ void __launch_bounds__(kRowBlock)
    dx_bf16_rows(const bf16* __restrict__ x, const bf16* __restrict__ dy,
                 const bf16* __restrict__ gamma, const float* __restrict__ mean,
                 const float* __restrict__ rstd, bf16* __restrict__ dx, int rows, int cols) {
    using Pack = Bf16Pack<kWidth>;
    const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;  // the whole warp: it shares the row
    const std::size_t offset = static_cast<std::size_t>(row) * cols;
    const Pack* x_row = reinterpret_cast<const Pack*>(x + offset);
    const Pack* dy_row = reinterpret_cast<const Pack*>(dy + offset);
    const Pack* scale = reinterpret_cast<const Pack*>(gamma);
    Pack* dx_row = reinterpret_cast<Pack*>(dx + offset);
    const float row_mean = mean[row], row_rstd = rstd[row];
    const int packs = cols / kWidth;

    // The two row sums: the held packs' loads in flight first, then the rest of a long row.
    Pack xs[kHeldPacks], dys[kHeldPacks];
#pragma unroll
    for (int j = 0; j < kHeldPacks; ++j)
        if (lane + 32 * j < packs) xs[j] = x_row[lane + 32 * j], dys[j] = dy_row[lane + 32 * j];
    RowSums sums{0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < kHeldPacks; ++j) {
        const int p = lane + 32 * j;
        if (p >= packs) continue;
        const RowSums t = row_terms(xs[j], dys[j], scale[p], row_mean, row_rstd);
        sums.g += t.g;
        sums.g_xhat += t.g_xhat;
    }
    for (int p = lane + 32 * kHeldPacks; p < packs; p += 32) {
        const RowSums t = row_terms(x_row[p], dy_row[p], scale[p], row_mean, row_rstd);
        sums.g += t.g;
        sums.g_xhat += t.g_xhat;
    }
    sums = readable::warp_sum(sums);
    // Lane 0's sums for the whole row: the butterfly adds in each lane's own order, and one set of
    // numbers for the row keeps its dx consistent.
    const float mean_g = __shfl_sync(0xffffffffu, sums.g, 0) / cols;
    const float mean_g_xhat = __shfl_sync(0xffffffffu, sums.g_xhat, 0) / cols;

#pragma unroll
    for (int j = 0; j < kHeldPacks; ++j) {
        const int p = lane + 32 * j;
        if (p < packs)
            add_dx(dx_row + p, xs[j], dys[j], scale[p], row_mean, row_rstd, mean_g, mean_g_xhat);
    }
    for (int p = lane + 32 * kHeldPacks; p < packs; p += 32)
        add_dx(dx_row + p, x_row[p], dy_row[p], scale[p], row_mean, row_rstd, mean_g, mean_g_xhat);
}

// partials[chunk][0][c] = sum over the chunk's rows of dy * xhat, partials[chunk][1][c] = of dy,
// for the 32 x kWidth columns of block `band` of the row and the chunk, both from a 1D grid of
// chunks x bands (either may pass 65535, the limit of grid.y: 2^26 rows of one column).
template <int kWidth>
__global__ void column_sums_bf16(const bf16* __restrict__ x, const bf16* __restrict__ dy,
                                 const float* __restrict__ mean, const float* __restrict__ rstd,
                                 float* __restrict__ partials, int rows, int cols, int bands) {
    using Pack = Bf16Pack<kWidth>;
    __shared__ float sums[2][kSumLanes][32 * kWidth];
    const int band = blockIdx.x % bands, chunk = blockIdx.x / bands;
    const int pack = band * 32 + threadIdx.x;  // of the row
    const int packs = cols / kWidth;
    const int first = chunk * kChunkRows, last = min(first + kChunkRows, rows);
    float dgamma[kWidth] = {}, dbeta[kWidth] = {};
    if (pack < packs) {
        for (int r = first + threadIdx.y; r < last; r += kSumLanes) {
            const std::size_t offset = static_cast<std::size_t>(r) * cols;
            const Pack xs = reinterpret_cast<const Pack*>(x + offset)[pack];
            const Pack dys = reinterpret_cast<const Pack*>(dy + offset)[pack];
            const float row_mean = mean[r], row_rstd = rstd[r];
#pragma unroll
            for (int k = 0; k < kWidth; ++k) {
                const float grad = to_float(dys.value[k]);
                dgamma[k] += grad * ((to_float(xs.value[k]) - row_mean) * row_rstd);
                dbeta[k] += grad;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
        sums[0][threadIdx.y][threadIdx.x * kWidth + k] = dgamma[k];
        sums[1][threadIdx.y][threadIdx.x * kWidth + k] = dbeta[k];
    }
    __syncthreads();  // every lane's sums are in shared memory
    // The lanes' sums of each column added in lane order: a fixed order, the same bits every run.
    for (int i = threadIdx.y * 32 + threadIdx.x; i < 2 * 32 * kWidth; i += kSumLanes * 32) {
        const int which = i / (32 * kWidth), slot = i % (32 * kWidth);
        const int col = band * 32 * kWidth + slot;
        if (col >= cols) continue;
        float total = 0.0f;
        for (int lane = 0; lane < kSumLanes; ++lane) total += sums[which][lane][slot];
        partials[(static_cast<std::size_t>(chunk) * 2 + which) * cols + col] = total;
    }
}

// dgamma[c] += sum over chunks of partials[chunk][0][c], dbeta[c] += of partials[chunk][1][c]: a
// block of 32 x kPartialLanes threads per 32 of the 2 cols columns; lane (x, y) adds chunks y,
// y + kPartialLanes, ... of its column, then the kPartialLanes sums are added in order.
__global__ void add_partials(float* __restrict__ dgamma, float* __restrict__ dbeta,
                             const float* __restrict__ partials, int chunks, int cols) {
    __shared__ float sums[kPartialLanes][33];          // +1: no bank conflicts on the column reads
    const int column = blockIdx.x * 32 + threadIdx.x;  // of the 2 cols: dgamma's, then dbeta's
    const int which = column / cols, col = column % cols;
    float sum = 0.0f;
    if (column < 2 * cols)
        for (int chunk = threadIdx.y; chunk < chunks; chunk += kPartialLanes)
            sum += partials[(static_cast<std::size_t>(chunk) * 2 + which) * cols + col];
    sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || column >= 2 * cols) return;
    float total = 0.0f;
    for (int y = 0; y < kPartialLanes; ++y) total += sums[y][threadIdx.x];
    (which == 0 ? dgamma : dbeta)[col] += total;
}

// The chunks' partial sums, grown to the largest request (calls run one after another on the
// default stream).
float* partials_for(std::size_t floats) {
    static float* buffer = nullptr;
    static std::size_t size = 0;
    if (floats > size) {
        if (buffer) CUDA_CHECK(cudaFree(buffer));
        CUDA_CHECK(cudaMalloc(&buffer, floats * sizeof(float)));
        size = floats;
    }
    return buffer;
}

template <int kRowWidth, int kColumnWidth>
void launch_bf16(const bf16* x, const bf16* dy, const bf16* gamma, const float* mean,
                 const float* rstd, bf16* dx, float* dgamma, float* dbeta, int rows, int cols) {
    dx_bf16_rows<kRowWidth><<<course::ceil_div(rows, kRowsPerBlock), kRowBlock>>>(
        x, dy, gamma, mean, rstd, dx, rows, cols);
    CUDA_CHECK_LAUNCH();
    const int chunks = course::ceil_div(rows, kChunkRows);
    float* partials = partials_for(static_cast<std::size_t>(chunks) * 2 * cols);
    const int bands = course::ceil_div(cols / kColumnWidth, 32);
    column_sums_bf16<kColumnWidth><<<static_cast<unsigned>(chunks) * bands, dim3(32, kSumLanes)>>>(
        x, dy, mean, rstd, partials, rows, cols, bands);
    CUDA_CHECK_LAUNCH();
    add_partials<<<course::ceil_div(2 * cols, 32), dim3(32, kPartialLanes)>>>(
        dgamma, dbeta, partials, chunks, cols);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void layernorm_backward_bf16(const bf16* x, const bf16* dy, const bf16* gamma, const float* mean,
                             const float* rstd, bf16* dx, float* dgamma, float* dbeta, int rows,
                             int cols) {
    // dx's rows in 16-byte packs where every row starts on a 16-byte boundary; the column sums
    // in pairs (4 bytes) where x's and dy's rows start on 4 bytes. Otherwise one value at a time.
    const bool rows_in_16 = cols % 8 == 0 && course::is_aligned(x, 16) &&
                            course::is_aligned(dy, 16) && course::is_aligned(gamma, 16) &&
                            course::is_aligned(dx, 16);
    const bool columns_in_pairs =
        cols % 2 == 0 && course::is_aligned(x, 4) && course::is_aligned(dy, 4);
    if (rows_in_16 && columns_in_pairs)
        launch_bf16<8, 2>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, rows, cols);
    else if (columns_in_pairs)
        launch_bf16<1, 2>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, rows, cols);
    else
        launch_bf16<1, 1>(x, dy, gamma, mean, rstd, dx, dgamma, dbeta, rows, cols);
}
