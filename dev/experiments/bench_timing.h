// dev/experiments/bench_timing.h: the timing of the standalone benches beside it
// (gemv_read_ceiling.cu, pairwise_cosine_epilogue/bench.cu), as the harness times a case
// (common/src/bench.cu) without its pairs and checks: L2 flushed before each sample by a read of
// 100 MB (clean lines, so nothing is written back during the next sample), warm-up calls first,
// CUDA events around the call, the median.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <vector>

#include "course/check.h"

namespace bench {

// Reads `count` float4 and keeps the reads (the buffer is zeros: the store never happens).
__global__ void read_through_kernel(const float4* buffer, std::size_t count, float* sink) {
    float sum = 0;
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const float4 v = buffer[i];
        sum += v.x + v.y + v.z + v.w;
    }
    if (sum == 12345.678f) *sink = sum;
}

// A pure read of `n` uint4s (W, say), `kLoads` of them in flight a thread, streamed (__ldcs): the
// read ceiling the benches hold a kernel that reads the same bytes against.
template <int kLoads>
__global__ void read_kernel(const uint4* __restrict__ w, std::size_t n, unsigned* out) {
    unsigned acc = 0;
    const std::size_t stride = std::size_t(gridDim.x) * blockDim.x;
    std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + (kLoads - 1) * stride < n; i += kLoads * stride) {
        uint4 v[kLoads];
#pragma unroll
        for (int j = 0; j < kLoads; ++j) v[j] = __ldcs(w + i + j * stride);
#pragma unroll
        for (int j = 0; j < kLoads; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = __ldcs(w + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) *out = acc;  // never: keeps the loads
}

// Prints the GPU's name and SM count (unbuffered output from here on) and returns the count.
inline int print_device() {
    setvbuf(stdout, nullptr, _IONBF, 0);
    int sms = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s, %d SMs\n", prop.name, sms);
    return sms;
}

class Timer {
  public:
    static constexpr std::size_t kFlushBytes = std::size_t(100) << 20;  // twice an H100's L2

    Timer() {
        CUDA_CHECK(cudaEventCreate(&start_));
        CUDA_CHECK(cudaEventCreate(&stop_));
        CUDA_CHECK(cudaMalloc(&flush_, kFlushBytes + sizeof(float)));
        CUDA_CHECK(cudaMemset(flush_, 0, kFlushBytes + sizeof(float)));
        CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, 0));
    }

    // Enqueues the flush (also timed on its own, or after a call, by the read-ceiling bench).
    void flush_l2() const {
        read_through_kernel<<<multiprocessors_ * 4, 512>>>(
            reinterpret_cast<const float4*>(flush_), kFlushBytes / sizeof(float4),
            reinterpret_cast<float*>(flush_ + kFlushBytes));
        CUDA_CHECK_LAUNCH();
    }

    // The median time of `run` in microseconds, each sample after a flush.
    template <class F>
    float median_us(F run, int samples = 60) {
        for (int i = 0; i < 3; ++i) run();
        std::vector<float> us;
        for (int i = 0; i < samples; ++i) {
            flush_l2();
            CUDA_CHECK(cudaEventRecord(start_));
            run();
            CUDA_CHECK(cudaEventRecord(stop_));
            CUDA_CHECK(cudaEventSynchronize(stop_));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
            us.push_back(ms * 1000);
        }
        CUDA_CHECK(cudaGetLastError());
        std::sort(us.begin(), us.end());
        return us[us.size() / 2];
    }

  private:
    cudaEvent_t start_{}, stop_{};
    unsigned char* flush_ = nullptr;
    int multiprocessors_ = 0;
};

}  // namespace bench
