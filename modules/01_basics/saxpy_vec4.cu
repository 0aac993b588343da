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

// y[i] = a * x[i] + y[i] for the n = head + 4 * body + tail floats of the arrays, in three parts:
//   head: the first `head` floats (0..3), those before the first 16-byte boundary
//   body: the next `body` float4s; x + head and y + head are 16-byte aligned
//   tail: the last `tail` floats (0..3), after the body
__global__ void saxpy_vec4_kernel(float a, const float* __restrict__ x, float* __restrict__ y,
                                  std::size_t head, std::size_t body, std::size_t tail) {
    // TODO: the body, in a grid-stride loop: each float4 of x and of y read with one 16-byte
    //       load, its four components updated, stored back to y with one 16-byte store.
    // TODO: the head and the tail, one float per thread. Every element exactly once: y is
    //       updated in place, so an element updated twice is as wrong as one never updated.
}

void saxpy_vec4(float a, const float* x, float* y, std::size_t n) {
    // TODO: split the n floats into head, body and tail from the address of x (the contract
    //       gives y the same misalignment): no float4 access may start at an address that is not
    //       a multiple of 16, and head can never be more than n.
    // TODO: launch saxpy_vec4_kernel with enough threads for one float4 each, but at least one
    //       block (3 floats have no body, only a head or a tail); then CUDA_CHECK_LAUNCH().
    COURSE_TODO("saxpy_vec4: launch saxpy_vec4_kernel, then delete this line");
}
