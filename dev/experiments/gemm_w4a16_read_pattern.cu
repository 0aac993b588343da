// dev/experiments/gemm_w4a16_read_pattern.cu (course authors): does gemm_w4a16's order of reading
// W cost time by itself? At 16 tokens the kernel should be a read of W, yet it takes nearly twice a
// linear read's time. This times, at N = K = 8192, a linear read of the tiled W, W read in the
// kernel's order (grid of 64-column blocks by slices of K, each warp streaming its two n8 tiles'
// 512 bytes a group, 4 or 8 groups in flight, every warp at the same group at once), with and
// without the group scales loaded where the kernel used to load them (4 scattered floats a lane
// and group), the slices' start rotated per block, 4 or 8 slices; the memset of y alone; gemm_w4a16
// as committed (memset and kernel), and its kernel alone on the launcher's grid. L2 flushed before
// each sample, medians of 60. H200 (dev/tuning/09_quantization.md): fourteenth session, the
// kernel's order 12.8 us (8 slices 11.5), with the scales 19.2 us (8 slices 14.0); rotation
// changes nothing; gemm_w4a16 as it was then (its scales loaded per group) 24.3 us. Fifteenth
// session: the linear read 11.7 us (its first reader skipped its tail), so the kernel's order
// costs about 1 us; memset 3.5 us alone; gemm_w4a16 with the scales' tile 23.8 us, its kernel
// alone 21.0 us (the memset costs 2.8 us of the call); with the bf16 pair in a register, 21.6 and
// 19.2 us.
//
// Build and run on a GPU of compute capability 8.0 or newer, from the repository root:
//   nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -Isolutions/09_quantization \
//     -Icommon/include -Imodules/09_quantization -Idev/experiments \
//     dev/experiments/gemm_w4a16_read_pattern.cu -o /tmp/read_pattern && /tmp/read_pattern
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include "bench_timing.h"
#include "gemm_w4a16.cu"

// grid (N / 64, splits), 128 threads: warp w reads tiles 8 bx + 2 w, + 1, groups of its slice,
// kAhead groups at a time (all loads of a pass issued, then used).
template <int kAhead, bool kScales>
__global__ void gemm_pattern(const uint4* __restrict__ tiled, const float* __restrict__ scales,
                             int groups, int per_split, int rotate, unsigned* out) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int t0 = blockIdx.x * 8 + warp * 2;
    const int begin = blockIdx.y * per_split;
    const int rot = rotate ? (blockIdx.x * 5 + blockIdx.y * 3) % per_split : 0;
    unsigned acc = 0;
    float facc = 0;
    for (int i = 0; i < per_split; i += kAhead) {
        uint4 v[kAhead][2];
        float s[kAhead][4];
#pragma unroll
        for (int d = 0; d < kAhead; ++d) {
            const int g = begin + (i + d + rot) % per_split;
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                v[d][j] = tiled[((std::size_t)(t0 + j) * groups + g) * 32 + lane];
                if (kScales) {
                    const int col = 8 * (t0 + j) + 2 * (lane % 4);
                    s[d][2 * j] = scales[(std::size_t)col * groups + g];
                    s[d][2 * j + 1] = scales[(std::size_t)(col + 1) * groups + g];
                }
            }
        }
#pragma unroll
        for (int d = 0; d < kAhead; ++d)
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                acc ^= v[d][j].x ^ v[d][j].y ^ v[d][j].z ^ v[d][j].w;
                if (kScales) facc += s[d][2 * j] + s[d][2 * j + 1];
            }
    }
    if (acc == 0x12345678u || facc == 1234.5f) *out = acc;
}

int main() {
    const int sms = bench::print_device();
    bench::Timer T;
    const int N = 8192, K = 8192, M = 16, groups = K / 128;
    const std::size_t wbytes = std::size_t(N) * K / 2, sbytes = std::size_t(N) * groups * 4;
    std::uint8_t *W, *tiled;
    float *s, *y;
    __nv_bfloat16* x;
    unsigned* out;
    CUDA_CHECK(cudaMalloc(&W, wbytes));
    CUDA_CHECK(cudaMalloc(&tiled, wbytes));
    CUDA_CHECK(cudaMalloc(&s, sbytes));
    CUDA_CHECK(cudaMalloc(&y, M * N * 4));
    CUDA_CHECK(cudaMalloc(&x, M * K * 2));
    CUDA_CHECK(cudaMalloc(&out, 4));
    CUDA_CHECK(cudaMemset(W, 0x37, wbytes));
    CUDA_CHECK(cudaMemset(s, 0, sbytes));
    CUDA_CHECK(cudaMemset(x, 0, M * K * 2));
    tile_int4_weights(W, N, K, tiled);
    CUDA_CHECK(cudaDeviceSynchronize());
    const auto* t4 = reinterpret_cast<const uint4*>(tiled);
    auto report = [&](const char* name, float us, double bytes) {
        printf("  %-44s %7.1f us  %6.0f GB/s\n", name, us, bytes / us / 1e3);
    };
    for (int round = 0; round < 2; ++round) {
        printf("round %d\n", round);
        report("memset of y (512 KB) alone", T.median_us([&] { cudaMemsetAsync(y, 0, M * N * 4); }),
               M * N * 4.0);
        report("linear read of W, 16 blocks/SM",
               T.median_us([&] { bench::read_kernel<4><<<sms * 16, 256>>>(t4, wbytes / 16, out); }),
               wbytes);
        report("linear read of W, 4 blocks/SM",
               T.median_us([&] { bench::read_kernel<4><<<sms * 4, 256>>>(t4, wbytes / 16, out); }),
               wbytes);
        for (int splits : {4, 8}) {
            const int per = groups / splits;
            const dim3 grid(N / 64, splits);
            char name[96];
            snprintf(name, sizeof name, "gemm pattern, 4 ahead, %d splits", splits);
            report(name, T.median_us([&] {
                gemm_pattern<4, false><<<grid, 128>>>(t4, s, groups, per, 0, out);
            }),
                   wbytes);
            snprintf(name, sizeof name, "gemm pattern, 4 ahead, %d splits, rotated", splits);
            report(name, T.median_us([&] {
                gemm_pattern<4, false><<<grid, 128>>>(t4, s, groups, per, 1, out);
            }),
                   wbytes);
            snprintf(name, sizeof name, "gemm pattern + scales, 4 ahead, %d splits", splits);
            report(name, T.median_us([&] {
                gemm_pattern<4, true><<<grid, 128>>>(t4, s, groups, per, 0, out);
            }),
                   wbytes + sbytes);
            snprintf(name, sizeof name, "gemm pattern + scales, 8 ahead, %d splits", splits);
            report(name, T.median_us([&] {
                gemm_pattern<8, true><<<grid, 128>>>(t4, s, groups, per, 0, out);
            }),
                   wbytes + sbytes);
            snprintf(name, sizeof name, "gemm pattern + scales, 4 ahead, %d splits, rotated",
                     splits);
            report(name, T.median_us([&] {
                gemm_pattern<4, true><<<grid, 128>>>(t4, s, groups, per, 1, out);
            }),
                   wbytes + sbytes);
        }
        report("gemm_w4a16 (readable, memset + kernel)",
               T.median_us([&] { gemm_w4a16(M, N, K, x, tiled, s, y); }), wbytes + sbytes);
        // The kernel alone, on the launcher's grid, y not zeroed: what the memset before it costs
        // inside the call.
        const int per_split = slice_length(wave_blocks<1>(), N, K);
        report("gemm_w4a16's kernel alone (y not zeroed)", T.median_us([&] {
            gemm_w4a16_kernel<1>
                <<<dim3(N / kBlockN, course::ceil_div(groups, per_split)), kThreads>>>(
                    M, N, K, x, t4, s, y, per_split, kBf16Pair136);
        }),
               wbytes + sbytes);
    }
    CUDA_CHECK(cudaGetLastError());
    return 0;
}
