// bf16 as the emulator provides it: the bits of a float's upper half, converted as the GPU
// converts them (round to nearest even, NaN kept a NaN). Only what the kernels call is here.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    std::uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

inline __nv_bfloat16 __float2bfloat16(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return {0x7fff};  // a NaN: rounding could make it inf
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return {static_cast<std::uint16_t>(bits >> 16)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float value) { return __float2bfloat16(value); }
inline float __bfloat162float(__nv_bfloat16 value) {
    const std::uint32_t bits = static_cast<std::uint32_t>(value.bits) << 16;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}
inline __nv_bfloat162 __floats2bfloat162_rn(float low, float high) {
    return {__float2bfloat16(low), __float2bfloat16(high)};
}
// Exact where the result is a bf16 (module 09's integers): the float difference, rounded.
inline __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) {
    return {__float2bfloat16(__bfloat162float(a.x) - __bfloat162float(b.x)),
            __float2bfloat16(__bfloat162float(a.y) - __bfloat162float(b.y))};
}
