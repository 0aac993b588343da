// fp16 as the emulator provides it: IEEE half precision, converted as the GPU converts it (round
// to nearest even, subnormals kept, NaN kept a NaN; the same arithmetic as the checkers'
// course::to_fp16). Only what the kernels call is here.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

struct __half {
    std::uint16_t bits;
};
struct alignas(4) __half2 {
    __half x, y;
};

inline __half __float2half(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    bits &= 0x7fffffffu;
    if (bits > 0x7f800000u) return {static_cast<std::uint16_t>(sign | 0x7e00u)};   // NaN
    if (bits >= 0x477ff000u) return {static_cast<std::uint16_t>(sign | 0x7c00u)};  // to infinity
    if (bits >= 0x38800000u) {                                                     // normal
        bits += 0x0fffu + ((bits >> 13) & 1u);
        return {static_cast<std::uint16_t>(sign | ((bits - 0x38000000u) >> 13))};
    }
    return {static_cast<std::uint16_t>(
        sign | static_cast<std::uint16_t>(std::nearbyint(std::fabs(value) * 0x1.0p24f)))};
}
inline __half __float2half_rn(float value) { return __float2half(value); }
inline float __half2float(__half value) {
    const std::uint32_t sign = static_cast<std::uint32_t>(value.bits & 0x8000u) << 16;
    const std::uint32_t exponent = (value.bits >> 10) & 0x1fu, mantissa = value.bits & 0x3ffu;
    float out;
    if (exponent == 0) {
        out = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -out : out;
    }
    const std::uint32_t bits =
        sign | (exponent == 31 ? 0x7f800000u : (exponent + 112) << 23) | mantissa << 13;
    std::memcpy(&out, &bits, 4);
    return out;
}
inline __half2 __floats2half2_rn(float low, float high) {
    return {__float2half(low), __float2half(high)};
}
