// 09_quantization/gemm_w4a16_fast: y = W x for 1 to 64 tokens on the tensor cores, INT4 weights
// dequantized on their way into mma.sync's B fragments. Fast reference: the readable solution
// (gemm_w4a16.cu, included below), its zeroing of y overlapped with the kernel.
//
// Teaches: programmatic dependent launch (Hopper). The readable launcher zeroes y with
// cudaMemsetAsync, then launches the kernel, which starts only once the memset has ended: at 16
// tokens of N = K = 8192 on an H200 that is 2.4 us of a 21.6 us call, though the kernel needs y
// only for its last instructions, the atomicAdds. Here y is zeroed by a kernel of our own whose
// blocks first execute griddepcontrol.launch_dependents, and the product kernel is launched with
// cudaLaunchAttributeProgrammaticStreamSerialization: it may start as soon as every block of the
// zeroing kernel has said so, and its blocks execute griddepcontrol.wait (which returns once the
// zeroing kernel has ended and its stores are visible) between their slice's products and their
// atomicAdds into y. The rest is the readable kernel's, called as it is. Built for a GPU before
// Hopper, where the instructions do not exist, it takes the readable path. On an H200 at 16
// tokens: 171.2-172.8% of cuBLAS against the readable 163.3-165.9% in the same runs (the call
// about 1.2 us shorter); at 64 tokens, no change.
//
// Run:  grader run 09/gemm_w4a16 --solutions     (the "gemm_w4a16 (fast)" row)
// Contract: gemm_w4a16.h                          Notes:  notes/09_quantization.md, section 5
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "course/exercise.h"
#include "course/gemm_layout.h"
#include "gemm_w4a16.h"
#include "tensor_core.h"

// The readable solution, whole: its kernel's two halves (slice_products, add_to_y), its split of
// K and its weight tiling are this file's. (Every header it includes is included above, so that
// none of them lands inside the namespace.)
namespace readable {
#include "gemm_w4a16.cu"
}  // namespace readable

namespace {

// griddepcontrol (PTX, sm_90 and newer): launch_dependents lets the grid launched after this one
// as its programmatic dependent start once every block of this grid has executed it (or ended);
// wait returns once the grids this one depends on have ended and their memory is visible. Both do
// nothing in a grid launched without the attribute (and on the CPU emulator, which runs each
// launch to its end before the next).
__device__ void allow_dependents_to_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(COURSE_EMULATOR)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ void wait_for_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(COURSE_EMULATOR)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

constexpr int kZeroThreads = 256;

// y[0 .. count) = 0, a thread per element; the product kernel may start at once.
__global__ void zero_y_kernel(float* __restrict__ y, std::size_t count) {
    allow_dependents_to_start();
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < count) y[i] = 0.0f;
}

// The readable kernel, waiting for y's zeroing only where it needs y.
template <int kTilesM>
__global__ void __launch_bounds__(readable::kThreads)
    overlapped_kernel(int M, int N, int K, const __nv_bfloat16* __restrict__ x,
                      const uint4* __restrict__ tiled, const float* __restrict__ scales,
                      float* __restrict__ y, int per_split, std::uint32_t pair136) {
    float acc[readable::kTilesPerWarp][kTilesM][4] = {};
    readable::slice_products<kTilesM>(M, N, K, x, tiled, scales, per_split, pair136, acc);
    wait_for_prerequisites();  // y is zeroed
    readable::add_to_y<kTilesM>(acc, M, N, y);
}

template <int kTilesM>
void launch(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
            const float* scales, float* y) {
    if (course::compiled_arch(overlapped_kernel<kTilesM>) < 90) {
        readable::gemm_w4a16(M, N, K, x, tiled, scales, y);  // no griddepcontrol before Hopper
        return;
    }
    // One wave holds what it holds of the readable kernel: this one has its registers.
    const int per_split = readable::slice_length(readable::wave_blocks<kTilesM>(), N, K);
    const std::size_t count = static_cast<std::size_t>(M) * N;
    zero_y_kernel<<<static_cast<unsigned>(course::ceil_div(count, std::size_t{kZeroThreads})),
                    kZeroThreads>>>(y, count);
    CUDA_CHECK_LAUNCH();

    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config{};
    config.gridDim =
        dim3(course::ceil_div(N, readable::kBlockN), course::ceil_div(K / kInt4Group, per_split));
    config.blockDim = dim3(readable::kThreads);
    config.attrs = &attribute;
    config.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&config, overlapped_kernel<kTilesM>, M, N, K, x,
                                  reinterpret_cast<const uint4*>(tiled), scales, y, per_split,
                                  readable::kBf16Pair136));
}

}  // namespace

void tile_int4_weights(const std::uint8_t* packed, int N, int K, std::uint8_t* tiled) {
    readable::tile_int4_weights(packed, N, K, tiled);
}

void gemm_w4a16(int M, int N, int K, const __nv_bfloat16* x, const std::uint8_t* tiled,
                const float* scales, float* y) {
    using Launch = decltype(&launch<1>);
    constexpr Launch kLaunches[] = {launch<1>, launch<2>, launch<3>, launch<4>};
    kLaunches[course::ceil_div(M, 16) - 1](M, N, K, x, tiled, scales, y);
}
