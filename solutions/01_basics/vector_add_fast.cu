// 01_basics/vector_add_fast: vector add with a grid of one wave and an unrolled grid-stride loop.
// Fast reference (the readable one is vector_add.cu: one element per thread).
//
// Teaches: what the last points of bandwidth are made of once the loads are coalesced: a grid of
// exactly the blocks the GPU holds at once, so no block waits for a second wave, and more bytes
// in flight per thread (four elements of a and b loaded before the first store). Memory-bound:
// the checker reports the bandwidth next to a device-to-device copy of the same size. Beyond the
// exercise, vector_add_bf16 (vector_add_bf16.h): the same add on bf16 vectors, 16 bytes (8
// values) per access, the GPT trainer's residual add in its bf16 mode.
//
// Run:  grader run 01/vector_add --solutions      (the "vector_add (fast)" row)
// Contract: vector_add.h, vector_add_bf16.h   Notes:  notes/01_basics.md
#include <cuda_bf16.h>

#include <algorithm>

#include "course/exercise.h"
#include "vector_add.h"
#include "vector_add_bf16.h"

__global__ void vector_add_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                  float* __restrict__ c, std::size_t n) {
    // Global index of this thread. Widen before multiplying: blockIdx.x * blockDim.x is computed
    // in 32-bit unsigned arithmetic and wraps past 2^32.
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    // Threads in the whole grid: each thread handles first, first + stride, ... so the kernel is
    // correct for any grid size, including one much smaller than n (the launcher's).
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    // Consecutive threads touch consecutive floats: each warp reads 128 contiguous bytes per
    // array, one fully coalesced transaction. Four of the thread's elements per trip, all eight
    // loads issued before the first store, so that each thread has 32 bytes on their way instead
    // of 8 (__restrict__ promises the compiler that c overlaps neither a nor b).
    std::size_t i = first;
    for (; i + 3 * stride < n; i += 4 * stride) {
        float sum[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) sum[k] = a[i + k * stride] + b[i + k * stride];
#pragma unroll
        for (int k = 0; k < 4; ++k) c[i + k * stride] = sum[k];
    }
    for (; i < n; i += stride) c[i] = a[i] + b[i];  // the thread's last 0 to 3 elements
}

// Blocks of `threads` threads of `kernel` the whole GPU holds at once: SMs x resident blocks per
// SM.
template <class Kernel>
std::size_t blocks_per_wave(Kernel kernel, int threads) {
    int blocks_per_sm = 0;
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, 0));
    return static_cast<std::size_t>(course::multiprocessor_count()) * blocks_per_sm;
}

void vector_add(const float* a, const float* b, float* c, std::size_t n) {
    // 256 threads = 8 warps per block. The grid is one full wave, as many blocks as the GPU holds
    // at once (8 per SM on an H100), or fewer when n needs fewer: every thread then loops over
    // n / (grid threads) elements, and no block waits for a second wave. Device memory needs
    // about 3 TB/s x 1 us = 3 MB in flight on an H100, 23 KB per SM: one float per thread from a
    // and b is 16 KB per SM (2048 threads), four are 64 KB. The wave is asked for once: the
    // queries take microseconds on the host, time the GPU would sit idle before every launch.
    const int threads = 256;
    static const std::size_t wave = blocks_per_wave(vector_add_kernel, threads);
    const std::size_t blocks = std::min(course::ceil_div(n, threads), wave);
    vector_add_kernel<<<static_cast<unsigned>(blocks), threads>>>(a, b, c, n);
    CUDA_CHECK_LAUNCH();
}

// ---- vector_add_bf16 (vector_add_bf16.h): the trainer's residual add ----

namespace {

// kWidth bf16 values moved as one access: 8 (16 bytes) where n and every pointer allow it, else 1.
template <int kWidth>
struct alignas(2 * kWidth) Bf16Pack {
    __nv_bfloat16 value[kWidth];
};

template <int kWidth>
__device__ Bf16Pack<kWidth> add(const Bf16Pack<kWidth>& a, const Bf16Pack<kWidth>& b) {
    Bf16Pack<kWidth> c;
#pragma unroll
    for (int k = 0; k < kWidth; ++k)
        c.value[k] = __float2bfloat16(__bfloat162float(a.value[k]) + __bfloat162float(b.value[k]));
    return c;
}

// vector_add_kernel's loop over packs: four packs of a and b in flight per thread, a grid of one
// wave striding over them.
template <int kWidth>
__global__ void vector_add_bf16_kernel(const Bf16Pack<kWidth>* __restrict__ a,
                                       const Bf16Pack<kWidth>* __restrict__ b,
                                       Bf16Pack<kWidth>* __restrict__ c, std::size_t packs) {
    const std::size_t threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    std::size_t p = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; p + 3 * threads < packs; p += 4 * threads) {
        Bf16Pack<kWidth> sum[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) sum[k] = add(a[p + k * threads], b[p + k * threads]);
#pragma unroll
        for (int k = 0; k < 4; ++k) c[p + k * threads] = sum[k];
    }
    for (; p < packs; p += threads) c[p] = add(a[p], b[p]);
}

template <int kWidth>
void launch_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, std::size_t n) {
    using Pack = Bf16Pack<kWidth>;
    const int threads = 256;
    static const std::size_t wave = blocks_per_wave(vector_add_bf16_kernel<kWidth>, threads);
    const std::size_t packs = n / kWidth;
    const std::size_t blocks = std::min(course::ceil_div(packs, threads), wave);
    vector_add_bf16_kernel<kWidth><<<static_cast<unsigned>(blocks), threads>>>(
        reinterpret_cast<const Pack*>(a), reinterpret_cast<const Pack*>(b),
        reinterpret_cast<Pack*>(c), packs);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void vector_add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c,
                     std::size_t n) {
    if (n % 8 == 0 && course::is_aligned(a, 16) && course::is_aligned(b, 16) &&
        course::is_aligned(c, 16))
        launch_bf16<8>(a, b, c, n);
    else
        launch_bf16<1>(a, b, c, n);
}
