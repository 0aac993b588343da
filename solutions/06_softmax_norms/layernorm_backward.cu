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

// kWidth consecutive floats: one 16-byte float4 access when kWidth is 4, else a single float.
template <int kWidth>
struct Pack {
    float v[kWidth];
};

template <int kWidth>
__device__ Pack<kWidth> load_pack(const float* p) {
    if constexpr (kWidth == 4) {
        const float4 q = *reinterpret_cast<const float4*>(p);
        return {{q.x, q.y, q.z, q.w}};
    } else {
        return {{*p}};
    }
}

template <int kWidth>
__device__ void store_pack(float* p, const Pack<kWidth>& pack) {
    if constexpr (kWidth == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(pack.v[0], pack.v[1], pack.v[2], pack.v[3]);
    } else {
        *p = pack.v[0];
    }
}

// The two row sums of the dx formula, reduced together.
struct RowSums {
    float g;       // sum of g = dy * gamma
    float g_xhat;  // sum of g * xhat
};

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

// dx, one block per row. kWidth divides cols, and every row start is then aligned for packs.
template <int kWidth>
__global__ void layernorm_backward_dx_kernel(const float* __restrict__ x,
                                             const float* __restrict__ dy,
                                             const float* __restrict__ gamma,
                                             const float* __restrict__ mean,
                                             const float* __restrict__ rstd,
                                             float* __restrict__ dx, int cols) {
    const std::size_t row = blockIdx.x;
    const std::size_t first = row * cols;  // 64-bit offset: rows * cols can pass 2^31
    const float row_mean = mean[row], row_rstd = rstd[row];
    const int packs = cols / kWidth;

    // Pass 1: this thread's share of the two sums (coalesced: consecutive threads, consecutive
    // packs).
    RowSums sums{0.0f, 0.0f};
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        const int col = p * kWidth;
        const Pack<kWidth> in = load_pack<kWidth>(x + first + col);
        const Pack<kWidth> grad = load_pack<kWidth>(dy + first + col);
        const Pack<kWidth> scale = load_pack<kWidth>(gamma + col);
        for (int k = 0; k < kWidth; ++k) {
            const float g = grad.v[k] * scale.v[k];
            sums.g += g;
            sums.g_xhat += g * ((in.v[k] - row_mean) * row_rstd);
        }
    }
    const RowSums row_sums = block_sum(sums);
    const float mean_g = row_sums.g / cols, mean_g_xhat = row_sums.g_xhat / cols;

    // Pass 2: x, dy and gamma again (from the caches), dx written once.
    for (int p = threadIdx.x; p < packs; p += blockDim.x) {
        const int col = p * kWidth;
        const Pack<kWidth> in = load_pack<kWidth>(x + first + col);
        const Pack<kWidth> grad = load_pack<kWidth>(dy + first + col);
        const Pack<kWidth> scale = load_pack<kWidth>(gamma + col);
        Pack<kWidth> out;
        for (int k = 0; k < kWidth; ++k) {
            const float xhat = (in.v[k] - row_mean) * row_rstd;
            out.v[k] = row_rstd * (grad.v[k] * scale.v[k] - mean_g - xhat * mean_g_xhat);
        }
        store_pack(dx + first + col, out);
    }
}

// dgamma and dbeta: sums down the columns. A block owns kColumns consecutive columns and has
// kRowLanes rows of threads: thread (tx, ty) walks rows ty, ty + kRowLanes, ... of its column,
// so each warp (fixed ty, tx = 0..31) reads 32 consecutive floats of one row: coalesced.
constexpr int kColumns = 32;
constexpr int kRowLanes = 32;

__global__ void layernorm_backward_dgamma_dbeta_kernel(const float* __restrict__ x,
                                                       const float* __restrict__ dy,
                                                       const float* __restrict__ mean,
                                                       const float* __restrict__ rstd,
                                                       float* __restrict__ dgamma,
                                                       float* __restrict__ dbeta, int rows,
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
        layernorm_backward_dx_kernel<4><<<rows, threads>>>(x, dy, gamma, mean, rstd, dx, cols);
    } else {
        layernorm_backward_dx_kernel<1><<<rows, threads>>>(x, dy, gamma, mean, rstd, dx, cols);
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
