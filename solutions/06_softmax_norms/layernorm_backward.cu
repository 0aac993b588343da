// 06_softmax_norms/layernorm_backward: LayerNorm backward: dx by rows, dgamma and dbeta by
// columns. Reference solution.
//
// Teaches: the LayerNorm gradient (two row sums per row), column sums over all rows done
// deterministically (per-thread partials, then a fixed-order sum in shared memory) instead of
// with atomics, and why one kernel per reduction direction keeps both coalesced.
//
// Run:  grader run 06/layernorm_backward --solutions
// Contract: layernorm_backward.h            Notes:  notes/06_softmax_norms.md
#include <algorithm>

#include "course/exercise.h"
#include "layernorm_backward.h"

namespace {

// The two row sums of the dx formula, reduced together.
struct RowSums {
    float g;       // sum of g = dy * gamma
    float g_xhat;  // sum of g * xhat
};

// The row sums' terms and dx for one loaded vector: a float, or a float4 of 4 consecutive columns.
// g = dy * gamma; xhat = (x - mean) * rstd.
__device__ RowSums row_terms(float x, float dy, float gamma, float row_mean, float row_rstd) {
    const float g = dy * gamma;
    return {g, g * ((x - row_mean) * row_rstd)};
}
__device__ RowSums row_terms(float4 x, float4 dy, float4 gamma, float row_mean, float row_rstd) {
    const RowSums a = row_terms(x.x, dy.x, gamma.x, row_mean, row_rstd);
    const RowSums b = row_terms(x.y, dy.y, gamma.y, row_mean, row_rstd);
    const RowSums c = row_terms(x.z, dy.z, gamma.z, row_mean, row_rstd);
    const RowSums d = row_terms(x.w, dy.w, gamma.w, row_mean, row_rstd);
    return {((a.g + b.g) + c.g) + d.g, ((a.g_xhat + b.g_xhat) + c.g_xhat) + d.g_xhat};
}

// dx = rstd * (g - mean_g - xhat * mean_g_xhat).
__device__ float dx_of(float x, float dy, float gamma, float row_mean, float row_rstd, float mean_g,
                       float mean_g_xhat) {
    const float xhat = (x - row_mean) * row_rstd;
    return row_rstd * (dy * gamma - mean_g - xhat * mean_g_xhat);
}
__device__ float4 dx_of(float4 x, float4 dy, float4 gamma, float row_mean, float row_rstd,
                        float mean_g, float mean_g_xhat) {
    return make_float4(dx_of(x.x, dy.x, gamma.x, row_mean, row_rstd, mean_g, mean_g_xhat),
                       dx_of(x.y, dy.y, gamma.y, row_mean, row_rstd, mean_g, mean_g_xhat),
                       dx_of(x.z, dy.z, gamma.z, row_mean, row_rstd, mean_g, mean_g_xhat),
                       dx_of(x.w, dy.w, gamma.w, row_mean, row_rstd, mean_g, mean_g_xhat));
}

// Butterfly over the 32 lanes: every lane ends with the warp's sums.
__device__ RowSums warp_sum(RowSums sums) {
    for (int offset = 16; offset > 0; offset /= 2) {
        sums.g += __shfl_xor_sync(0xffffffffu, sums.g, offset);
        sums.g_xhat += __shfl_xor_sync(0xffffffffu, sums.g_xhat, offset);
    }
    return sums;
}

// Sums over all threads of the block (blockDim.x a multiple of 32), returned to every thread.
// Called once per block.
__device__ RowSums block_sum(RowSums sums) {
    __shared__ RowSums warp_sums[32];
    __shared__ RowSums total;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    sums = warp_sum(sums);
    if (lane == 0) warp_sums[warp] = sums;
    __syncthreads();  // every warp's sums are in shared memory
    if (warp == 0) {
        const int warps = blockDim.x / 32;
        sums = warp_sum(lane < warps ? warp_sums[lane] : RowSums{0.0f, 0.0f});
        if (lane == 0) total = sums;
    }
    __syncthreads();  // total is written
    return total;
}

// dx, one block per row. Vec is float4 when every row starts 16-byte aligned, else float; the row
// is then cols / (floats per Vec) vectors, with no tail.
template <class Vec>
__global__ void layernorm_backward_dx_kernel(const float* __restrict__ x,
                                             const float* __restrict__ dy,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd, float* __restrict__ dx,
                                             int cols) {
    const std::size_t row = blockIdx.x;
    const std::size_t first = row * cols;  // 64-bit offset: rows * cols can pass 2^31
    const Vec* x_row = reinterpret_cast<const Vec*>(x + first);
    const Vec* dy_row = reinterpret_cast<const Vec*>(dy + first);
    const Vec* scale = reinterpret_cast<const Vec*>(gamma);
    Vec* dx_row = reinterpret_cast<Vec*>(dx + first);
    const float row_mean = mean[row], row_rstd = rstd[row];
    const int vecs = cols / static_cast<int>(sizeof(Vec) / sizeof(float));

    // Pass 1: this thread's share of the two sums (coalesced: consecutive threads, consecutive
    // vectors).
    RowSums sums{0.0f, 0.0f};
    for (int k = threadIdx.x; k < vecs; k += blockDim.x) {
        const RowSums terms = row_terms(x_row[k], dy_row[k], scale[k], row_mean, row_rstd);
        sums.g += terms.g;
        sums.g_xhat += terms.g_xhat;
    }
    const RowSums row_sums = block_sum(sums);
    const float mean_g = row_sums.g / cols, mean_g_xhat = row_sums.g_xhat / cols;

    // Pass 2: x, dy and gamma again (from the caches), dx written once.
    for (int k = threadIdx.x; k < vecs; k += blockDim.x)
        dx_row[k] = dx_of(x_row[k], dy_row[k], scale[k], row_mean, row_rstd, mean_g, mean_g_xhat);
}

// dgamma and dbeta: sums down the columns. A block owns kColumns consecutive columns and has
// kRowLanes rows of threads: thread (tx, ty) walks rows ty, ty + kRowLanes, ... of its column,
// so each warp (fixed ty, tx = 0..31) reads 32 consecutive floats of one row: coalesced.
constexpr int kColumns = 32;
constexpr int kRowLanes = 32;

__global__ void layernorm_backward_dgamma_dbeta_kernel(
    const float* __restrict__ x, const float* __restrict__ dy, const float* __restrict__ mean,
    const float* __restrict__ rstd, float* __restrict__ dgamma, float* __restrict__ dbeta, int rows,
    int cols) {
    __shared__ float partial_dgamma[kRowLanes][kColumns];
    __shared__ float partial_dbeta[kRowLanes][kColumns];
    const int col = blockIdx.x * kColumns + threadIdx.x;

    float sum_dgamma = 0.0f, sum_dbeta = 0.0f;
    if (col < cols) {
        for (int r = threadIdx.y; r < rows; r += kRowLanes) {
            const std::size_t i = std::size_t(r) * cols + col;
            const float grad = dy[i];
            sum_dgamma += grad * ((x[i] - mean[r]) * rstd[r]);
            sum_dbeta += grad;
        }
    }
    partial_dgamma[threadIdx.y][threadIdx.x] = sum_dgamma;
    partial_dbeta[threadIdx.y][threadIdx.x] = sum_dbeta;
    __syncthreads();  // all kRowLanes partials of every column are in shared memory

    // One thread per column adds its partials, always in the same order: the same inputs give
    // the same bits (atomicAdd would add them in whatever order the threads arrive). Across
    // the warp the reads are consecutive floats of one shared-memory row: no bank conflicts.
    if (threadIdx.y == 0 && col < cols) {
        float total_dgamma = 0.0f, total_dbeta = 0.0f;
        for (int lane = 0; lane < kRowLanes; ++lane) {
            total_dgamma += partial_dgamma[lane][threadIdx.x];
            total_dbeta += partial_dbeta[lane][threadIdx.x];
        }
        dgamma[col] = total_dgamma;
        dbeta[col] = total_dbeta;
    }
}

}  // namespace

void layernorm_backward(const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* rstd, float* dx, float* dgamma, float* dbeta, int rows,
                        int cols) {
    // dx: as the forward, one block per row with about 8 floats per thread (512 threads for
    // cols = 4096), float4 when every row start is 16-byte aligned.
    const int threads = std::clamp(course::ceil_div(cols, 8 * 32) * 32, 32, 1024);
    if (cols % 4 == 0 && course::is_aligned(x, 16) && course::is_aligned(dy, 16) &&
        course::is_aligned(gamma, 16) && course::is_aligned(dx, 16)) {
        layernorm_backward_dx_kernel<float4><<<rows, threads>>>(x, dy, gamma, mean, rstd, dx, cols);
    } else {
        layernorm_backward_dx_kernel<float><<<rows, threads>>>(x, dy, gamma, mean, rstd, dx, cols);
    }
    CUDA_CHECK_LAUNCH();

    // dgamma, dbeta: a second kernel, because its reduction runs down the columns. It reads x
    // and dy again (for large inputs from device memory: they no longer fit in L2), the price of
    // keeping both kernels coalesced and the column sums deterministic without scratch space.
    const dim3 block(kColumns, kRowLanes);
    const int blocks = course::ceil_div(cols, kColumns);
    layernorm_backward_dgamma_dbeta_kernel<<<blocks, block>>>(x, dy, mean, rstd, dgamma, dbeta,
                                                              rows, cols);
    CUDA_CHECK_LAUNCH();
}
