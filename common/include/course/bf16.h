// bf16 for checkers: device buffers of bf16 are DeviceBuffer<std::uint16_t> (the bits of
// __nv_bfloat16), converted on the host here, rounding as the GPU's __float2bfloat16 does (to
// nearest, ties to even).
//
//   course::DeviceBuffer<std::uint16_t> d_x("x", course::bf16_bits(x));   // x: floats
//   kernel(course::as_bf16(d_x), ...);
//   const auto got = course::bf16_values(d_out.download());   // floats; never written = poison
//   course::time_against(..., {course::sign_flipped(d_x)});  // every sign flipped between calls
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "course/bench.h"
#include "course/buffer.h"
#include "course/poison.h"

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

// An input whose every sign time_against flips between its timed calls (TimedInput): floats, or
// bf16 bits (the sign is bit 15).
template <class Elem>
TimedInput sign_flipped(DeviceBuffer<Elem>& buffer) {
    if constexpr (std::is_same_v<Elem, std::uint16_t>)
        return TimedInput(buffer, std::uint16_t{0x8000});
    else
        return TimedInput(buffer);
}

}  // namespace course
