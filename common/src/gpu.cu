#include "course/gpu.h"

#include <cuda_runtime.h>

#include "course/check.h"

namespace course {

const GpuInfo& gpu() {
    static const GpuInfo info = [] {
        GpuInfo g;
        int count = 0;
        const cudaError_t status = cudaGetDeviceCount(&count);
        if (status != cudaSuccess || count == 0) {
            // Without a GPU the runtime usually reports a missing or too old driver: say both.
            g.unavailable_reason = status == cudaSuccess
                                       ? "no CUDA device found"
                                       : std::string("no NVIDIA GPU or driver found (") +
                                             cudaGetErrorString(status) + ")";
            cudaGetLastError();  // clear it: skipping is not an error
            return g;
        }
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDevice(&g.device));
        CUDA_CHECK(cudaGetDeviceProperties(&prop, g.device));
        g.available = true;
        g.sm = prop.major * 10 + prop.minor;
        g.multiprocessors = prop.multiProcessorCount;
        g.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
        g.global_memory_bytes = prop.totalGlobalMem;
        g.name = prop.name;
        return g;
    }();
    return info;
}

std::optional<std::string> gpu_skip_reason(int min_sm) {
    const GpuInfo& g = gpu();
    if (!g.available) return g.unavailable_reason + ": this checker needs an NVIDIA GPU";
    if (g.sm < min_sm)
        return "needs compute capability " + std::to_string(min_sm / 10) + "." +
               std::to_string(min_sm % 10) + " or newer; " + g.name + " is " +
               std::to_string(g.sm / 10) + "." + std::to_string(g.sm % 10);
    return std::nullopt;
}

std::optional<std::string> memory_skip_reason(std::size_t bytes) {
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (bytes <= free_bytes) return std::nullopt;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return "needs " + std::to_string(bytes / gib).substr(0, 4) + " GiB of device memory, " +
           std::to_string(free_bytes / gib).substr(0, 4) + " GiB free";
}

}  // namespace course
