// What the trainer's reference kernels share (ops_reference.cu, ops_generation.cu): the grid of
// an elementwise kernel, the warp's reductions, and rows moved 16 bytes per access.
#pragma once

#include <algorithm>

#include "course/launch.h"

namespace trainer {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarp = 32;
constexpr int kElementwiseBlock = 256;

// Grid for an elementwise kernel over n items with a grid-stride loop: enough blocks to fill
// the GPU, never more than the items need.
inline unsigned elementwise_blocks(long long n) {
    return static_cast<unsigned>(
        std::min<long long>(course::ceil_div(n, kElementwiseBlock), 65536));
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        x += __shfl_xor_sync(kFullMask, x, offset);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
    return x;
}

// W values of a row moved as one access (16 bytes where the row allows it). The alignment is what
// lets the compiler make it one wide load or store: without it, W narrow ones.
template <typename Act, int W>
struct alignas(sizeof(Act) * W) Pack {
    Act value[W];
};

// Values of Act per 16-byte access: the widest load a thread can issue.
template <typename Act>
constexpr int kWide = 16 / sizeof(Act);

// Whether n values at each of these pointers can be moved kWide<Act> at a time.
template <typename Act, typename... Pointers>
bool moves_wide(long long n, const Pointers*... pointers) {
    return n % kWide<Act> == 0 && (course::is_aligned(pointers, 16) && ...);
}

}  // namespace trainer
