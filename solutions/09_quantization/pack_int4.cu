// 09_quantization/pack_int4: group-wise INT4 (a scale per 128 values of a row), two values per
// byte, and the way back to float32. Reference solution.
//
// Teaches: why a group scale (one outlier spoils only its own 128 values, where a scale per row
// would spread it over thousands); a group as a warp (32 lanes x 4 floats = 128 values, its
// absmax in five shuffles); bit packing: two's complement nibbles, the even column in the low
// half of the byte, and the sign extension on the way back (a nibble 0b1111 is -1, not 15). The
// matrix is a sequence of groups: group i is floats 128 i .. 128 i + 127, bytes 64 i .. 64 i +
// 63, scale i, whatever the row. Memory-bound: the checker reports the bandwidth next to a copy.
//
// Run:  grader run 09/pack_int4 --solutions
// Contract: pack_int4.h              Notes:  notes/09_quantization.md
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "pack_int4.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlock = 256;          // 8 warps: 8 groups at a time per block
constexpr int kMaxBlocks = 1 << 16;  // then each warp strides over the groups
static_assert(kInt4Group == 32 * 4, "a group is a warp's 32 float4s");

__device__ int to_int4(float x, float scale) {
    if (scale == 0.0f) return 0;
    return static_cast<int>(fminf(fmaxf(rintf(x / scale), -kInt4Max), kInt4Max));
}

// The two's complement nibble in bits 0-3 of `bits`: moved to the top of the word, it comes back
// down with its sign by an arithmetic shift (0b1111 -> -1, 0b1000 -> -8, 0b0111 -> 7).
__device__ int sign_extend_nibble(unsigned bits) { return static_cast<int>(bits << 28) >> 28; }

// One warp per group of 128: lane l holds columns 4 l .. 4 l + 3 (one float4) and writes the
// two bytes 2 l, 2 l + 1 of the group's 64: (column 4 l, 4 l + 1) and (4 l + 2, 4 l + 3), the
// even column in the low nibble.
__global__ void __launch_bounds__(kBlock)
    pack_int4_kernel(const float4* __restrict__ x, std::size_t groups,
                     std::uint16_t* __restrict__ packed, float* __restrict__ scales) {
    const int lane = threadIdx.x % 32;
    const std::size_t first = (static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x) / 32;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock / 32;
    for (std::size_t group = first; group < groups; group += stride) {
        const float4 v = x[group * 32 + lane];
        float absmax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
        for (int offset = 16; offset > 0; offset /= 2)
            absmax = fmaxf(absmax, __shfl_xor_sync(kFullMask, absmax, offset));
        const float scale = absmax / kInt4Max;
        if (lane == 0) scales[group] = scale;
        const unsigned q0 = to_int4(v.x, scale) & 0xF, q1 = to_int4(v.y, scale) & 0xF;
        const unsigned q2 = to_int4(v.z, scale) & 0xF, q3 = to_int4(v.w, scale) & 0xF;
        // Little-endian: the first byte is the low 8 bits of the uint16.
        packed[group * 32 + lane] = static_cast<std::uint16_t>(q0 | q1 << 4 | q2 << 8 | q3 << 12);
    }
}

__global__ void __launch_bounds__(kBlock)
    unpack_int4_kernel(const std::uint16_t* __restrict__ packed, const float* __restrict__ scales,
                       std::size_t groups, float4* __restrict__ out) {
    const int lane = threadIdx.x % 32;
    const std::size_t first = (static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x) / 32;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock / 32;
    for (std::size_t group = first; group < groups; group += stride) {
        const unsigned bits = packed[group * 32 + lane];
        const float scale = scales[group];
        out[group * 32 + lane] =
            make_float4(static_cast<float>(sign_extend_nibble(bits)) * scale,
                        static_cast<float>(sign_extend_nibble(bits >> 4)) * scale,
                        static_cast<float>(sign_extend_nibble(bits >> 8)) * scale,
                        static_cast<float>(sign_extend_nibble(bits >> 12)) * scale);
    }
}

// Enough blocks for every warp to have a group, up to kMaxBlocks.
unsigned grid_for(std::size_t groups) {
    return static_cast<unsigned>(
        std::min<std::size_t>(course::ceil_div(groups, kBlock / 32), kMaxBlocks));
}

}  // namespace

void pack_int4(const float* x, int rows, int cols, std::uint8_t* packed, float* scales) {
    const std::size_t groups = static_cast<std::size_t>(rows) * (cols / kInt4Group);
    pack_int4_kernel<<<grid_for(groups), kBlock>>>(reinterpret_cast<const float4*>(x), groups,
                                                   reinterpret_cast<std::uint16_t*>(packed),
                                                   scales);
    CUDA_CHECK_LAUNCH();
}

void unpack_int4(const std::uint8_t* packed, const float* scales, int rows, int cols, float* out) {
    const std::size_t groups = static_cast<std::size_t>(rows) * (cols / kInt4Group);
    unpack_int4_kernel<<<grid_for(groups), kBlock>>>(reinterpret_cast<const std::uint16_t*>(packed),
                                                     scales, groups,
                                                     reinterpret_cast<float4*>(out));
    CUDA_CHECK_LAUNCH();
}
