// 01_basics/saxpy_vec4: SAXPY with 16-byte vector loads and stores. Reference solution.
//
// Teaches: vectorized memory access with float4, the alignment it needs, and how to split any
// array into a scalar head (up to the first 16-byte boundary), a float4 body and a scalar tail.
// Memory-bound: the checker reports the bandwidth next to a device-to-device copy.
//
// Run:  grader run 01/saxpy_vec4 --solutions
// Contract: saxpy_vec4.h               Notes:  notes/01_basics.md
#include <algorithm>
#include <cstdint>

#include "course/exercise.h"
#include "saxpy_vec4.h"

// y[i] = a * x[i] + y[i] over
//   head: i in [0, head)                             one float per thread, head <= 3
//   body: i in [head, head + 4 * body)               one float4 per thread and loop step
//   tail: i in [head + 4 * body, head + 4 * body + tail)   one float per thread, tail <= 3
// x + head and y + head are 16-byte aligned (the launcher chose head so), so the body can be
// read and written as float4. __restrict__ promises that x and y do not overlap (the contract
// says so), which lets the compiler keep the loads of x and y independent of the stores to y.
__global__ void saxpy_vec4_kernel(float a, const float* __restrict__ x, float* __restrict__ y,
                                  std::size_t head, std::size_t body, std::size_t tail) {
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;

    // Body. One float4 load is one 16-byte instruction instead of four 4-byte ones: a warp moves
    // 512 contiguous bytes per instruction, with a quarter of the instructions to issue. The two
    // loads (x and y) are independent, so both are in flight at once.
    const float4* x4 = reinterpret_cast<const float4*>(x + head);
    float4* y4 = reinterpret_cast<float4*>(y + head);
    for (std::size_t v = first; v < body; v += stride) {
        const float4 xv = x4[v];
        float4 yv = y4[v];
        yv.x = a * xv.x + yv.x;
        yv.y = a * xv.y + yv.y;
        yv.z = a * xv.z + yv.z;
        yv.w = a * xv.w + yv.w;
        y4[v] = yv;
    }

    // Head and tail: at most 3 elements each, done by the first threads of the grid (the grid
    // has at least one block of 256 threads). Each element is updated by exactly one thread:
    // updating one twice would add a * x[i] twice.
    if (first < head) y[first] = a * x[first] + y[first];
    const std::size_t tail_start = head + 4 * body;
    if (first < tail) y[tail_start + first] = a * x[tail_start + first] + y[tail_start + first];
}

void saxpy_vec4(float a, const float* x, float* y, std::size_t n) {
    // How many floats x starts past the last 16-byte boundary (0..3; the same for y, by the
    // contract). The head runs up to the next boundary: 4 - that, or nothing when x is aligned.
    // It can not be longer than the array itself (n = 1 or 2 with x 1 float past a boundary).
    const std::size_t floats_past_boundary =
        (reinterpret_cast<std::uintptr_t>(x) % 16) / sizeof(float);
    const std::size_t head = std::min<std::size_t>((4 - floats_past_boundary) % 4, n);
    const std::size_t body = (n - head) / 4;       // whole float4s after the head
    const std::size_t tail = n - head - 4 * body;  // 0..3 floats left after them

    // One float4 per thread: 2^25 floats make 32768 blocks, many times what the 132 SMs hold at
    // once, so every SM always has loads in flight (each thread has two 16-byte loads out, ~64 KB
    // per SM). At least one block, for arrays too short for a float4 (head and tail only).
    const int threads = 256;
    const std::size_t blocks = std::max<std::size_t>(course::ceil_div(body, threads), 1);
    saxpy_vec4_kernel<<<static_cast<unsigned>(blocks), threads>>>(a, x, y, head, body, tail);
    CUDA_CHECK_LAUNCH();
}
