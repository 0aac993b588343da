// Launch helpers for exercises and solutions: the shared-memory opt-in, alignment, and thread
// block clusters (Hopper, compute capability 9.0 and newer).
//
//   const std::size_t stage = course::opt_in_shared_bytes(my_kernel);     // once per kernel
//   if (course::clusters_available(my_kernel))
//       course::launch_in_clusters(my_kernel, grid, block, cluster, 0, args...);
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "course/check.h"

namespace course {

// True when p is a multiple of `bytes` (a float4 load needs 16).
inline bool is_aligned(const void* p, std::size_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}

// The current device's SMs (cudaDevAttrMultiProcessorCount): a grid sized in waves of blocks.
inline int multiprocessor_count() {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
}

// Opts `kernel` into all the shared memory a block may have on this GPU (227 KB on an H100,
// 163 KB on an A100, 99 KB on consumer Ampere and Ada, 64 KB on a T4) and returns how many bytes
// of it are left for dynamic shared memory after the kernel's static arrays. Above 48 KB a
// kernel must ask for it explicitly; asking once per kernel and process is enough.
template <class Kernel>
std::size_t opt_in_shared_bytes(Kernel kernel) {
    int device = 0, optin = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const int bytes = optin - static_cast<int>(attributes.sharedSizeBytes);
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return static_cast<std::size_t>(bytes);
}

// The architecture `kernel`'s device code was compiled for, as major * 10 + minor (75, 80, 90): its
// __CUDA_ARCH__ / 10, also when the driver compiled it from PTX for a newer GPU. A kernel whose
// body needs newer instructions than that (bf16 tensor cores: 80; wgmma: 90, in an sm_90a build)
// is compiled empty, and its launcher refuses to run it.
template <class Kernel>
int compiled_arch(Kernel kernel) {
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    return attributes.ptxVersion;
}

// Whether `kernel` can run in clusters here: the GPU launches them, and the kernel's device code
// was compiled for sm_90 or newer. ptxVersion is the architecture the code was compiled for (its
// __CUDA_ARCH__ / 10), which is what decides between the cluster and the one-block paths of
// course/cluster.h; binaryVersion is the GPU's own after a JIT from older PTX, so it would send
// clusters to code compiled without them.
template <class Kernel>
bool clusters_available(Kernel kernel) {
    int device = 0, cluster_launch = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&cluster_launch, cudaDevAttrClusterLaunch, device));
    cudaFuncAttributes attributes{};
    CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    return cluster_launch != 0 && attributes.ptxVersion >= 90;
}

// Launches `kernel` on `grid` blocks of `block` threads, in clusters of `cluster` consecutive
// blocks (grid must be a multiple of cluster; up to 8 blocks is portable), on the default stream.
template <class... Params, class... Args>
void launch_in_clusters(void (*kernel)(Params...), unsigned grid, unsigned block,
                        unsigned cluster, std::size_t shared_bytes, Args... args) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = cluster;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(block);
    config.dynamicSmemBytes = shared_bytes;
    config.attrs = &attribute;
    config.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace course
