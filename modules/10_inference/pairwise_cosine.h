// Contract of 10_inference/pairwise_cosine. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

#include "course/host_device.h"

// The index of pair (i, j), i < j, in the packed upper triangle: row 0's N - 1 pairs, then row
// 1's N - 2, and so on (row-major, the diagonal left out).
COURSE_HOST_DEVICE inline constexpr std::size_t triangle_index(std::size_t i, std::size_t j,
                                                               std::size_t N) {
    return i * N - i * (i + 1) / 2 + (j - i - 1);
}

// All pairwise cosine distances of N embeddings, and their mean:
//     d_ij = 1 - (x_i . x_j) / (|x_i| |x_j|)   for every i < j,
//     distances[triangle_index(i, j, N)] = d_ij,   mean[0] = the mean of the N (N - 1) / 2 d_ij.
// - X: [N][D] bf16, row-major, no row all zero; distances: N (N - 1) / 2 float32; mean: one
//   float32; workspace: N float32 of scratch memory (the rows' inverse norms, say), its contents
//   on entry anything. Device pointers, 16-byte aligned, none aliasing another.
// - 2 <= N <= 8192; 64 <= D <= 4096, D a multiple of 64.
// - Products of bf16 in float32 (the tensor cores' bf16 mma with float32 accumulation), norms
//   and distances in float32: the checker allows 1e-4 on each distance, and 1e-4 relative on
//   the mean (its order of summation is yours: atomics are fine).
// Needs the bf16 tensor cores (sm_80). Enqueue the work on the default stream and return; the
// checker synchronizes.
void pairwise_cosine(const __nv_bfloat16* X, float* distances, float* mean, float* workspace, int N,
                     int D);
