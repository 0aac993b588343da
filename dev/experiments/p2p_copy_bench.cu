// How fast a chunk crosses NVLink between two GPUs, both directions at once, four ways: the copy
// engine pulling (cudaMemcpyPeerAsync on the receiver's stream, what ring_allreduce's readable
// solution does) or pushing (on the sender's stream), and the SMs pulling (a kernel on the
// receiver loading through the peer pointer, the fast reference) or pushing (stores to the peer).
// Decides what module 11's readable ring should teach; the figures go to dev/tuning/11_multi_gpu.md.
//
//   nvcc -O3 -arch=sm_90 -o p2p dev/experiments/p2p_copy_bench.cu && ./p2p
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t e = (x);                                                             \
        if (e != cudaSuccess) {                                                          \
            std::printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e), __LINE__);      \
            std::exit(1);                                                                \
        }                                                                                \
    } while (0)

__global__ void copy_kernel(int4* dst, const int4* src, size_t n) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += 4 * stride) {
        int4 v[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (i + j * stride < n) v[j] = src[i + j * stride];
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (i + j * stride < n) dst[i + j * stride] = v[j];
    }
}

int main() {
    const size_t bytes = size_t(64) << 20;
    int4 *src[2], *dst[2];
    cudaStream_t stream[2];
    cudaEvent_t start[2], stop[2];
    for (int g = 0; g < 2; ++g) {
        CHECK(cudaSetDevice(g));
        CHECK(cudaDeviceEnablePeerAccess(1 - g, 0));
        CHECK(cudaMalloc(&src[g], bytes));
        CHECK(cudaMalloc(&dst[g], bytes));
        CHECK(cudaMemset(src[g], g + 1, bytes));
        CHECK(cudaStreamCreateWithFlags(&stream[g], cudaStreamNonBlocking));
        CHECK(cudaEventCreate(&start[g]));
        CHECK(cudaEventCreate(&stop[g]));
    }
    int sms = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const size_t n = bytes / sizeof(int4);
    // issue(g): GPU g's part, on stream[g] with GPU g current; each moves `bytes` one way.
    auto time = [&](const char* name, const std::function<void(int)>& issue) {
        std::vector<double> samples;
        for (int k = 0; k < 12; ++k) {
            for (int g = 0; g < 2; ++g) { CHECK(cudaSetDevice(g)); CHECK(cudaDeviceSynchronize()); }
            for (int g = 0; g < 2; ++g) {
                CHECK(cudaSetDevice(g));
                CHECK(cudaEventRecord(start[g], stream[g]));
                issue(g);
                CHECK(cudaEventRecord(stop[g], stream[g]));
            }
            float worst = 0;
            for (int g = 0; g < 2; ++g) {
                CHECK(cudaSetDevice(g));
                CHECK(cudaEventSynchronize(stop[g]));
                float ms = 0;
                CHECK(cudaEventElapsedTime(&ms, start[g], stop[g]));
                worst = std::max(worst, ms);
            }
            if (k >= 2) samples.push_back(worst);
        }
        std::sort(samples.begin(), samples.end());
        const double ms = samples[samples.size() / 2];
        std::printf("%-44s %8.3f ms  %7.1f GB/s each way\n", name, ms, bytes / (ms * 1e6));
    };
    time("copy engine, pull (receiver's stream)", [&](int g) {
        CHECK(cudaMemcpyPeerAsync(dst[g], g, src[1 - g], 1 - g, bytes, stream[g]));
    });
    time("copy engine, push (sender's stream)", [&](int g) {
        CHECK(cudaMemcpyPeerAsync(dst[1 - g], 1 - g, src[g], g, bytes, stream[g]));
    });
    time("copy engine, pull, 4 copies of a quarter", [&](int g) {
        for (int q = 0; q < 4; ++q)
            CHECK(cudaMemcpyPeerAsync(dst[g] + q * n / 4, g, src[1 - g] + q * n / 4, 1 - g,
                                      bytes / 4, stream[g]));
    });
    for (int blocks : {sms / 4, sms, 2 * sms}) {
        char name[64];
        std::snprintf(name, sizeof name, "SMs pull (loads), %d blocks of 512", blocks);
        time(name, [&](int g) { copy_kernel<<<blocks, 512, 0, stream[g]>>>(dst[g], src[1 - g], n); });
        std::snprintf(name, sizeof name, "SMs push (stores), %d blocks of 512", blocks);
        time(name, [&](int g) { copy_kernel<<<blocks, 512, 0, stream[g]>>>(dst[1 - g], src[g], n); });
    }
    return 0;
}
