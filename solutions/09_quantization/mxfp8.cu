// 09_quantization/mxfp8: OCP Microscaling FP8 (MXFP8: E4M3 elements, blocks of 32 sharing an
// E8M0 scale), quantized and dequantized bit for bit as the specification writes it. Reference
// solution.
//
// Teaches: a floating-point format taken apart by hand, with integer operations on the bits of a
// float32: the block's shared exponent is its absmax's exponent field (floor(log2), for free)
// minus E4M3's largest exponent 8, and E8M0 stores nothing else; an element is rounded to 3
// mantissa bits by adding 0x7FFFF plus the kept bit's parity (round half to even, in one integer
// addition whose carry moves the exponent by itself), the subnormals are multiples of 2^-9, and
// past 448 it saturates; decoding moves E4M3's bits under float32's exponent and fixes the bias
// with one product. A block is 8 lanes of 4 floats: its absmax in three shuffles. Memory-bound:
// the checker reports the bandwidth next to a copy. (cuda_fp8.h's __nv_cvt_float_to_fp8 with
// __NV_SATFINITE rounds the same way; GPUs of compute capability 8.9 and newer have it as one
// instruction, cvt.rn.satfinite.e4m3x2.f32.)
//
// Run:  grader run 09/mxfp8 --solutions
// Contract: mxfp8.h                  Notes:  notes/09_quantization.md
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "mxfp8.h"

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kBlock = 256;
constexpr int kLanesPerMxBlock = kMxBlock / 4;  // 8 lanes of one float4 each
constexpr int kMaxBlocks = 1 << 16;             // then each thread strides over the data
constexpr int kE4m3MaxExponent = 8;             // 448 = 1.75 * 2^8

// The E4M3 code nearest to v, |v| < 512 (what x / X is), ties to even, saturated at 448.
__device__ unsigned e4m3_from_float(float v) {
    const unsigned bits = __float_as_uint(v);
    const unsigned sign = (bits >> 24) & 0x80u;
    const float a = fabsf(v);
    if (a >= 448.0f) return sign | 0x7Eu;  // 0x7F is NaN: the spec saturates to the largest finite
    // Below 2^-6 the codes are m * 2^-9, m = 0 .. 7 (m = 8 is 2^-6, code 0x08: the same integer).
    if (a < 0x1p-6f) return sign | static_cast<unsigned>(rintf(a * 512.0f));
    // Keep 3 of float32's 23 mantissa bits, rounding half to even on the 20 dropped: add just under
    // half (0x7FFFF) plus the lowest kept bit. A carry out of the mantissa moves the exponent.
    unsigned m = __float_as_uint(a);
    m += 0x7FFFFu + ((m >> 20) & 1u);
    const unsigned exponent = (m >> 23) - 127 + 7;  // E4M3's bias is 7
    return sign | exponent << 3 | ((m >> 20) & 7u);
}

// E4M3's bits under float32's exponent (sign to bit 31, exponent and mantissa at bits 20-26) make
// the value times 2^-120 (the biases 127 and 7), subnormals included: one product restores it.
__device__ float e4m3_to_float(unsigned code) {
    if ((code & 0x7Fu) == 0x7Fu) return __uint_as_float(0x7FC00000u);  // S.1111.111 is NaN
    return __uint_as_float((code & 0x80u) << 24 | (code & 0x7Fu) << 20) * 0x1p120f;
}

// 2^(biased - 127): float32 has the same exponent bias. 0 is 2^-127, below float's normals.
__device__ float e8m0_to_float(unsigned biased) {
    if (biased == 0xFFu) return __uint_as_float(0x7FC00000u);  // NaN
    if (biased == 0) return 0x1p-127f;
    return __uint_as_float(biased << 23);
}

// Thread i takes floats 4 i .. 4 i + 3; the 8 threads of an aligned group of 8 lanes hold one
// block of 32. The loop runs whole warps (shuffles need every lane), so a thread past the end
// takes part with zeros and stores nothing; blocks never straddle the end (cols % 32 == 0).
__global__ void __launch_bounds__(kBlock)
    mxfp8_quantize_kernel(const float4* __restrict__ x, std::size_t quads,
                          std::uint32_t* __restrict__ elements, std::uint8_t* __restrict__ scales) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
    for (std::size_t base = static_cast<std::size_t>(blockIdx.x) * kBlock; base < quads;
         base += stride) {
        const std::size_t i = base + threadIdx.x;
        const bool inside = i < quads;
        const float4 v = inside ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        float absmax = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
        for (int offset = 1; offset < kLanesPerMxBlock; offset *= 2)
            absmax = fmaxf(absmax, __shfl_xor_sync(kFullMask, absmax, offset));
        // floor(log2(absmax)) is its exponent field minus 127; the shared exponent s is that
        // minus 8, at least -127, so the stored s + 127 is the field minus 8, at least 0 (a block
        // of zeros, or of float32 subnormals, has field 0).
        const int field = static_cast<int>(__float_as_uint(absmax) >> 23);
        const unsigned biased = static_cast<unsigned>(max(field - kE4m3MaxExponent, 0));
        // x / 2^s = x * 2^-s, exact: 2^-s is the float whose exponent field is 127 - s.
        const float inverse = __uint_as_float((254u - biased) << 23);
        if (!inside) continue;
        if (threadIdx.x % kLanesPerMxBlock == 0)
            scales[i / kLanesPerMxBlock] = static_cast<std::uint8_t>(biased);
        elements[i] = e4m3_from_float(v.x * inverse) | e4m3_from_float(v.y * inverse) << 8 |
                      e4m3_from_float(v.z * inverse) << 16 | e4m3_from_float(v.w * inverse) << 24;
    }
}

__global__ void __launch_bounds__(kBlock)
    mxfp8_dequantize_kernel(const std::uint32_t* __restrict__ elements,
                            const std::uint8_t* __restrict__ scales, std::size_t quads,
                            float4* __restrict__ out) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kBlock;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * kBlock + threadIdx.x; i < quads;
         i += stride) {
        const unsigned codes = elements[i];
        const float X = e8m0_to_float(scales[i / kLanesPerMxBlock]);
        out[i] =
            make_float4(e4m3_to_float(codes & 0xFFu) * X, e4m3_to_float(codes >> 8 & 0xFFu) * X,
                        e4m3_to_float(codes >> 16 & 0xFFu) * X, e4m3_to_float(codes >> 24) * X);
    }
}

unsigned grid_for(std::size_t quads) {
    return static_cast<unsigned>(
        std::min<std::size_t>(course::ceil_div(quads, kBlock), kMaxBlocks));
}

}  // namespace

void mxfp8_quantize(const float* x, int rows, int cols, std::uint8_t* elements,
                    std::uint8_t* scales) {
    const std::size_t quads = static_cast<std::size_t>(rows) * cols / 4;
    mxfp8_quantize_kernel<<<grid_for(quads), kBlock>>>(reinterpret_cast<const float4*>(x), quads,
                                                       reinterpret_cast<std::uint32_t*>(elements),
                                                       scales);
    CUDA_CHECK_LAUNCH();
}

void mxfp8_dequantize(const std::uint8_t* elements, const std::uint8_t* scales, int rows, int cols,
                      float* out) {
    const std::size_t quads = static_cast<std::size_t>(rows) * cols / 4;
    mxfp8_dequantize_kernel<<<grid_for(quads), kBlock>>>(
        reinterpret_cast<const std::uint32_t*>(elements), scales, quads,
        reinterpret_cast<float4*>(out));
    CUDA_CHECK_LAUNCH();
}
