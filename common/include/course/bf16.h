// bf16 and fp16 for checkers: device buffers of 16-bit floats are DeviceBuffer<std::uint16_t>
// (the bits of __nv_bfloat16 or __half), converted on the host here, rounding as the GPU's
// __float2bfloat16 and __float2half do (to nearest, ties to even).
//
//   course::DeviceBuffer<std::uint16_t> d_x("x", course::bf16_bits(x));   // x: floats
//   kernel(course::as_bf16(d_x), ...);
//   const auto got = course::bf16_values(d_out.download());   // floats; never written = poison
//   course::time_against(..., {course::sign_flipped(d_x)});  // every sign flipped between calls
//
// The tensor-core exercises take course::TensorElement (course/tensor_element.h: bf16, or fp16 in
// a build for sm_75): tensor_bits, tensor_values, as_tensor, kTensorRoundoff and sign_flipped are
// the same for whichever it is.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "course/bench.h"
#include "course/buffer.h"
#include "course/poison.h"
#include "course/tensor_element.h"

namespace course {

// bf16 keeps 8 significant bits: a rounding is within 2^-9 of the value, relatively; two
// roundings that may go either way (a result a kernel rounds, a reference rounded again) are
// within 2^-8.
constexpr double kBf16Roundoff = 0x1.0p-8;

inline std::uint16_t to_bf16(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<std::uint16_t>(bits >> 16);
}
inline float from_bf16(std::uint16_t half) {
    const std::uint32_t bits = static_cast<std::uint32_t>(half) << 16;
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
}
// value rounded to the nearest bf16, as a float.
inline float round_to_bf16(float value) { return from_bf16(to_bf16(value)); }

inline std::vector<std::uint16_t> bf16_bits(const std::vector<float>& values) {
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) bits[i] = to_bf16(values[i]);
    return bits;
}
// A downloaded bf16 output as floats; an element still holding the poison becomes the float
// poison, so that the comparison reports it as never written.
inline std::vector<float> bf16_values(const std::vector<std::uint16_t>& bits) {
    std::vector<float> values(bits.size());
    const std::uint32_t poison = static_cast<std::uint32_t>(poison_pattern<float>());
    for (std::size_t i = 0; i < bits.size(); ++i) {
        if (is_poison(bits[i]))
            std::memcpy(&values[i], &poison, 4);
        else
            values[i] = from_bf16(bits[i]);
    }
    return values;
}
inline const __nv_bfloat16* as_bf16(const DeviceBuffer<std::uint16_t>& buffer) {
    return reinterpret_cast<const __nv_bfloat16*>(buffer.data());
}
inline __nv_bfloat16* as_bf16(DeviceBuffer<std::uint16_t>& buffer) {
    return reinterpret_cast<__nv_bfloat16*>(buffer.data());
}

// fp16 keeps 11 significant bits: two roundings are within 2^-10 of the value, relatively (for
// values of at least 2^-14; below, fp16 is subnormal and its rounding 2^-25 absolute).
constexpr double kFp16Roundoff = 0x1.0p-10;

inline std::uint16_t to_fp16(float value) {
    std::uint32_t bits;
    std::memcpy(&bits, &value, 4);
    const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    bits &= 0x7fffffffu;
    if (bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
    if (bits >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and up round to infinity
    if (bits >= 0x38800000u) {                       // 2^-14 and up: a normal fp16
        bits += 0x0fffu + ((bits >> 13) & 1u);       // round the 13 dropped bits, ties to even
        return sign | static_cast<std::uint16_t>((bits - 0x38000000u) >> 13);
    }
    // Subnormal: a multiple of 2^-24 (the scaling by 2^24 is exact; nearbyint rounds to even).
    return sign | static_cast<std::uint16_t>(std::nearbyint(std::fabs(value) * 0x1.0p24f));
}
inline float from_fp16(std::uint16_t half) {
    const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
    const std::uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
    float value;
    if (exponent == 0) {
        value = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -value : value;
    }
    const std::uint32_t bits =
        sign | (exponent == 31 ? 0x7f800000u : (exponent + 112) << 23) | mantissa << 13;
    std::memcpy(&value, &bits, 4);
    return value;
}

// ---- The tensor-core exercises' element (course::TensorElement) ----
// Two roundings of it, relatively.
constexpr double kTensorRoundoff = kFp16TensorCores ? kFp16Roundoff : kBf16Roundoff;

inline std::uint16_t to_tensor_element(float value) {
    return kFp16TensorCores ? to_fp16(value) : to_bf16(value);
}
inline float from_tensor_element(std::uint16_t bits) {
    return kFp16TensorCores ? from_fp16(bits) : from_bf16(bits);
}
inline std::vector<std::uint16_t> tensor_bits(const std::vector<float>& values) {
    std::vector<std::uint16_t> bits(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) bits[i] = to_tensor_element(values[i]);
    return bits;
}
// As bf16_values: the poison stays the float poison.
inline std::vector<float> tensor_values(const std::vector<std::uint16_t>& bits) {
    std::vector<float> values(bits.size());
    const std::uint32_t poison = static_cast<std::uint32_t>(poison_pattern<float>());
    for (std::size_t i = 0; i < bits.size(); ++i) {
        if (is_poison(bits[i]))
            std::memcpy(&values[i], &poison, 4);
        else
            values[i] = from_tensor_element(bits[i]);
    }
    return values;
}
inline const TensorElement* as_tensor(const DeviceBuffer<std::uint16_t>& buffer) {
    return reinterpret_cast<const TensorElement*>(buffer.data());
}
inline TensorElement* as_tensor(DeviceBuffer<std::uint16_t>& buffer) {
    return reinterpret_cast<TensorElement*>(buffer.data());
}

// An input whose every sign time_against flips between its timed calls (TimedInput): floats, or
// the bits of bf16 or fp16 (the tensor-core exercises' TensorElement): the sign is bit 15 of both.
template <class Elem>
TimedInput sign_flipped(DeviceBuffer<Elem>& buffer) {
    if constexpr (std::is_same_v<Elem, std::uint16_t>)
        return TimedInput(buffer, std::uint16_t{0x8000});
    else
        return TimedInput(buffer);
}

}  // namespace course
