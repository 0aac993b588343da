// 09_quantization/pack_int4: group-wise INT4 (a scale per 128 values of a row), two values per
// byte, and the way back to float32.
//
// Teaches: why a group scale (one outlier spoils only its own 128 values); a group as a warp (32
// lanes x 4 floats, its absmax in five shuffles); bit packing: two's complement nibbles, the even
// column in the low half of the byte, and the sign extension on the way back (a nibble 0b1111 is
// -1, not 15). Memory-bound: the checker reports your bandwidth next to a copy, and the format's
// error in steps.
//
// Run:  grader run 09/pack_int4              Stuck:  grader hint 09/pack_int4
// Contract: pack_int4.h                      Notes:  notes/09_quantization.md
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "pack_int4.h"

__global__ void pack_int4_kernel(const float4* x, std::size_t groups, std::uint16_t* packed,
                                 float* scales) {
    // TODO: a warp per group of 128 (group i: float4s 32 i .. 32 i + 31, uint16s of packed
    //       32 i .. 32 i + 31, scales[i]), a grid-stride loop over the groups in 64 bits.
    // TODO: lane l: its float4; the group's absmax by __shfl_xor_sync with fmaxf; scale =
    //       absmax / 7 (lane 0 writes it); q = clamp(rintf(x / scale), -7, 7), 0 where the scale
    //       is 0; the four nibbles (q & 0xF) into one uint16, column 4 l in bits 0-3.
}

__global__ void unpack_int4_kernel(const std::uint16_t* packed, const float* scales,
                                   std::size_t groups, float4* out) {
    // TODO: the same loop; each nibble back to an int with its sign (two's complement), times
    //       the group's scale, into a float4.
}

void pack_int4(const float* x, int rows, int cols, std::uint8_t* packed, float* scales) {
    // TODO: groups = std::size_t(rows) * (cols / 128); launch pack_int4_kernel on the float4 and
    //       uint16 views of x and packed (reinterpret_cast), then CUDA_CHECK_LAUNCH().
    COURSE_TODO("pack_int4: write pack_int4_kernel and launch it, then delete this line");
}

void unpack_int4(const std::uint8_t* packed, const float* scales, int rows, int cols, float* out) {
    // TODO: launch unpack_int4_kernel likewise, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("unpack_int4: write unpack_int4_kernel and launch it, then delete this line");
}
