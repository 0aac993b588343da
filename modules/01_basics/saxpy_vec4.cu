// 01_basics/saxpy_vec4: SAXPY with 16-byte vector loads and stores.
//
// Teaches: vectorized memory access with float4, the alignment it needs, and how to split any
// array into a scalar head (up to the first 16-byte boundary), a float4 body and a scalar tail.
// Memory-bound: the checker reports your bandwidth next to a device-to-device copy.
//
// Run:  grader run 01/saxpy_vec4       Stuck:  grader hint 01/saxpy_vec4
// Contract: saxpy_vec4.h               Notes:  notes/01_basics.md
#include <algorithm>
#include <cstdint>

#include "course/exercise.h"
#include "saxpy_vec4.h"

// y[i] = a * x[i] + y[i] over
//   head: i in [0, head)                             head <= 3, one float per thread
//   body: i in [head, head + 4 * body)               one float4 per thread (and loop step)
//   tail: i in [head + 4 * body, head + 4 * body + tail)   tail <= 3, one float per thread
// The launcher picks head so that x + head and y + head are 16-byte aligned.
__global__ void saxpy_vec4_kernel(float a, const float* __restrict__ x, float* __restrict__ y,
                                  std::size_t head, std::size_t body, std::size_t tail) {
    // TODO: the global index of this thread and the grid's stride (as in vector_add).
    // TODO: body: view x + head and y + head as arrays of float4 (reinterpret_cast<const float4*>
    //       and reinterpret_cast<float4*>), and for v = index, index + stride, ... while v < body:
    //       load one float4 of x and one of y, update the four components (.x .y .z .w), store
    //       the float4 back to y.
    // TODO: head and tail with plain floats: the threads whose index is below head update
    //       y[index]; those whose index is below tail update y[head + 4 * body + index]. Each
    //       element must be updated exactly once.
}

void saxpy_vec4(float a, const float* x, float* y, std::size_t n) {
    // TODO: how many floats x starts past a 16-byte boundary:
    //       (reinterpret_cast<std::uintptr_t>(x) % 16) / sizeof(float), 0..3.
    // TODO: head = floats up to the next boundary ((4 - that) % 4), but never more than n;
    //       body = whole float4s in what is left; tail = the 0..3 floats after them.
    // TODO: launch saxpy_vec4_kernel with 256 threads per block and enough blocks for one float4
    //       per thread (course::ceil_div), but at least one block (an array of 3 floats has no
    //       body, only a head or a tail); then CUDA_CHECK_LAUNCH().
    COURSE_TODO("saxpy_vec4: launch saxpy_vec4_kernel, then delete this line");
}
