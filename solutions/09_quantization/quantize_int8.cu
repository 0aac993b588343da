// 09_quantization/quantize_int8: symmetric INT8 quantization with one scale per row (a weight
// matrix's output channel, an activation matrix's token), and the way back to float32.
// Reference solution.
//
// Teaches: what a quantization format is made of (a grid of integers, a scale, a rounding, a
// clamp); the absmax of a row as a block-wide max reduction; round half to even (rintf, one
// instruction) and why not truncation; the float32 division the format states, bit for bit; the
// clamp at -127 and 127 (a symmetric grid: -x gives -q); float4 loads and char4 stores. The row
// is read twice, for its absmax and for its quantization; the second read comes from L2, so the
// kernel moves each byte of x from device memory once: the checker reports its bandwidth next
// to a device-to-device copy.
//
// Run:  grader run 09/quantize_int8 --solutions
// Contract: quantize_int8.h          Notes:  notes/09_quantization.md
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "quantize_int8.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlock = 256;  // threads per row: a block per row
constexpr int kWarps = kBlock / 32;

// The largest |x| of a vector of x.
__device__ float absmax_of(float v) { return fabsf(v); }
__device__ float absmax_of(float4 v) {
    return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}

// The block's largest value, returned to every thread: a butterfly in each warp, then every warp
// reduces the warps' posted values the same way.
__device__ float block_max(float value) {
    __shared__ float warp_max[kWarps];
    for (int offset = 16; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_max[warp] = value;
    __syncthreads();  // every warp's maximum is posted before anyone reads them
    value = lane < kWarps ? warp_max[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
    return value;
}

// One value: the division the format states (IEEE, as nvcc compiles `/` by default), rounded
// half to even by rintf (truncation would pull every value toward zero, a bias of half a step),
// then clamped to the symmetric grid. A scale of 0 (a row of zeros) would make 0 / 0 = NaN.
__device__ std::int8_t to_int8(float x, float scale) {
    if (scale == 0.0f) return 0;
    const float q = rintf(x / scale);
    return static_cast<std::int8_t>(fminf(fmaxf(q, -kInt8Max), kInt8Max));
}
__device__ char4 to_int8(float4 v, float scale) {
    return make_char4(to_int8(v.x, scale), to_int8(v.y, scale), to_int8(v.z, scale),
                      to_int8(v.w, scale));
}

__device__ float to_float(std::int8_t q, float scale) { return static_cast<float>(q) * scale; }
__device__ float4 to_float(char4 q, float scale) {
    return make_float4(to_float(q.x, scale), to_float(q.y, scale), to_float(q.z, scale),
                       to_float(q.w, scale));
}

// Block r quantizes row r. Vec is float4 (and Q char4) when every row starts on a 16-byte
// boundary (cols % 4 == 0), else float (and int8): the row is then cols / 4 or cols vectors,
// with no tail. Thread t takes vectors t, t + kBlock, ...: each step of the block reads kBlock
// consecutive vectors (coalesced).
template <class Vec, class Q>
__global__ void __launch_bounds__(kBlock)
    quantize_int8_kernel(const float* __restrict__ x, int cols, std::int8_t* __restrict__ q,
                         float* __restrict__ scales) {
    constexpr int kPerVec = sizeof(Vec) / sizeof(float);
    // 64-bit offset: rows * cols can pass 2^31.
    const std::size_t offset = static_cast<std::size_t>(blockIdx.x) * cols;
    const Vec* row = reinterpret_cast<const Vec*>(x + offset);
    Q* q_row = reinterpret_cast<Q*>(q + offset);
    const int vecs = cols / kPerVec;

    float absmax = 0.0f;
#pragma unroll 4
    for (int i = threadIdx.x; i < vecs; i += kBlock) absmax = fmaxf(absmax, absmax_of(row[i]));
    const float scale = block_max(absmax) / kInt8Max;
    if (threadIdx.x == 0) scales[blockIdx.x] = scale;

        // The second read of the row: recently read by this block, it comes from L2.
#pragma unroll 4
    for (int i = threadIdx.x; i < vecs; i += kBlock) q_row[i] = to_int8(row[i], scale);
}

// Block r dequantizes row r: its scale is read once.
template <class Vec, class Q>
__global__ void __launch_bounds__(kBlock)
    dequantize_int8_kernel(const std::int8_t* __restrict__ q, const float* __restrict__ scales,
                           int cols, float* __restrict__ out) {
    constexpr int kPerVec = sizeof(Vec) / sizeof(float);
    const std::size_t offset = static_cast<std::size_t>(blockIdx.x) * cols;
    const Q* q_row = reinterpret_cast<const Q*>(q + offset);
    Vec* out_row = reinterpret_cast<Vec*>(out + offset);
    const float scale = scales[blockIdx.x];
    const int vecs = cols / kPerVec;
#pragma unroll 4
    for (int i = threadIdx.x; i < vecs; i += kBlock) out_row[i] = to_float(q_row[i], scale);
}

}  // namespace

void quantize_int8(const float* x, int rows, int cols, std::int8_t* q, float* scales) {
    if (cols % 4 == 0)
        quantize_int8_kernel<float4, char4><<<rows, kBlock>>>(x, cols, q, scales);
    else
        quantize_int8_kernel<float, std::int8_t><<<rows, kBlock>>>(x, cols, q, scales);
    CUDA_CHECK_LAUNCH();
}

void dequantize_int8(const std::int8_t* q, const float* scales, int rows, int cols, float* out) {
    if (cols % 4 == 0)
        dequantize_int8_kernel<float4, char4><<<rows, kBlock>>>(q, scales, cols, out);
    else
        dequantize_int8_kernel<float, std::int8_t><<<rows, kBlock>>>(q, scales, cols, out);
    CUDA_CHECK_LAUNCH();
}
