// The naive transpose, given: the version to beat. The checker of 02_memory/transpose times it
// next to yours (perf_baseline "naive_transpose").
//
// One thread per element. A warp takes 32 consecutive columns of one row of `in`: its reads are
// coalesced (128 contiguous bytes), but its writes go to 32 different rows of `out`, `rows`
// floats apart: 32 separate memory transactions of which 4 bytes each are used. The bandwidth
// lost on those writes is what the shared-memory tile wins back.
#pragma once

#include "course/check.h"

__global__ void naive_transpose_kernel(const float* __restrict__ in, float* __restrict__ out,
                                       int rows, int cols) {
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < rows && col < cols) {
        out[static_cast<std::size_t>(col) * rows + row] =
            in[static_cast<std::size_t>(row) * cols + col];
    }
}

// Same contract as transpose() in transpose.h.
inline void naive_transpose(const float* in, float* out, int rows, int cols) {
    const dim3 block(32, 8);
    const dim3 grid(course::ceil_div(cols, 32), course::ceil_div(rows, 8));
    naive_transpose_kernel<<<grid, block>>>(in, out, rows, cols);
    CUDA_CHECK_LAUNCH();
}
