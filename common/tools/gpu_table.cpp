// course_gpu_table: the figures of this machine's GPU that the notes' arithmetic needs, one
// `key=value` per line, for `grader gpu` (grader/gpu_table.py turns them into the learner's
// table: peak FLOP/s, ridge point, what module 06's long rows can use here).
//
// Read from the device: the SM count and what an SM holds (threads, blocks, registers, shared
// memory), the L2 size, the opt-in shared memory per block, whether clusters launch, the peak SM
// clock and the memory's clock and bus width. Measured: the bandwidth of a device-to-device copy
// (counting the bytes read and the bytes written, as the course's copy baseline does), median
// of several copies after a warm-up.
//
// Run:  grader gpu     (or build/learner/bin/course_gpu_table for the raw lines)
// Exit status 0 with a GPU; 1 with one line `unavailable=<why>` without one.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "course/check.h"

namespace {

int attribute(cudaDeviceAttr which, int device) {
    int value = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&value, which, device));
    return value;
}

struct CopyTiming {
    std::size_t bytes = 0;  // copied, each way: the copy reads and writes this many
    double median_ms = 0;
};

// A device-to-device copy large enough that the L2 plays no part (512 MiB each way, less on a
// GPU with little free memory), timed with events, median of the samples after a warm-up.
CopyTiming time_device_copy() {
    constexpr int kWarmup = 3, kSamples = 21;
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    CopyTiming timing;
    timing.bytes = std::min<std::size_t>(std::size_t{512} << 20, free_bytes / 4);
    void* src = nullptr;
    void* dst = nullptr;
    CUDA_CHECK(cudaMalloc(&src, timing.bytes));
    CUDA_CHECK(cudaMalloc(&dst, timing.bytes));
    CUDA_CHECK(cudaMemset(src, 1, timing.bytes));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    std::vector<double> samples;
    for (int i = 0; i < kWarmup + kSamples; ++i) {
        CUDA_CHECK(cudaEventRecord(start));
        CUDA_CHECK(cudaMemcpyAsync(dst, src, timing.bytes, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (i >= kWarmup) samples.push_back(ms);
    }
    std::sort(samples.begin(), samples.end());
    timing.median_ms = samples[samples.size() / 2];
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaFree(src));
    CUDA_CHECK(cudaFree(dst));
    return timing;
}

void print_table(int device) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    std::printf("name=%s\n", prop.name);
    std::printf("compute_capability=%d.%d\n", prop.major, prop.minor);
    std::printf("multiprocessors=%d\n", prop.multiProcessorCount);
    std::printf("max_threads_per_sm=%d\n", prop.maxThreadsPerMultiProcessor);
    std::printf("max_blocks_per_sm=%d\n", prop.maxBlocksPerMultiProcessor);
    std::printf("registers_per_sm=%d\n", prop.regsPerMultiprocessor);
    std::printf("shared_memory_per_sm_bytes=%zu\n", prop.sharedMemPerMultiprocessor);
    std::printf("shared_memory_per_block_optin_bytes=%zu\n", prop.sharedMemPerBlockOptin);
    std::printf("l2_bytes=%d\n", prop.l2CacheSize);
    std::printf("global_memory_bytes=%zu\n", prop.totalGlobalMem);
    std::printf("cluster_launch=%d\n", attribute(cudaDevAttrClusterLaunch, device));
    std::printf("sm_clock_khz=%d\n", attribute(cudaDevAttrClockRate, device));
    std::printf("memory_clock_khz=%d\n", attribute(cudaDevAttrMemoryClockRate, device));
    std::printf("memory_bus_bits=%d\n", prop.memoryBusWidth);
    const CopyTiming copy = time_device_copy();
    std::printf("copy_bytes=%zu\n", copy.bytes);
    std::printf("copy_median_ms=%.6f\n", copy.median_ms);
}

}  // namespace

int main() {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        std::printf("unavailable=%s\n", status == cudaSuccess ? "no CUDA device found"
                                                              : cudaGetErrorString(status));
        return 1;
    }
    try {
        int device = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        print_table(device);
    } catch (const std::exception& error) {
        std::string reason = error.what();  // one line: the grader reads line by line
        std::replace(reason.begin(), reason.end(), '\n', ' ');
        std::printf("unavailable=%s\n", reason.c_str());
        return 1;
    }
    return 0;
}
