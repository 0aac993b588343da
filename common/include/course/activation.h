// Activations stored as float, bf16 or fp16 and computed in float: the two conversions a kernel
// templated on its storage type needs (module 08's gelu, embedding and adamw; the trainer's
// reference kernels, which add fp16 for GPUs without bf16).
//
//   using course::to_float; using course::from_float;
//   out[i] = from_float<Act>(2.0f * to_float(in[i]));
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace course {

__device__ inline float to_float(float x) { return x; }
__device__ inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline float to_float(__half x) { return __half2float(x); }

template <typename Act>
__device__ Act from_float(float x);
template <>
__device__ inline float from_float<float>(float x) {
    return x;
}
// Round to nearest, ties to even: the one rounding of a result stored in bf16.
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16(x);
}
// Round to nearest, ties to even; beyond fp16's largest value (65504) the result is inf, an
// overflow that the trainer's loss scaler sees in the gradient's norm.
template <>
__device__ inline __half from_float<__half>(float x) {
    return __float2half(x);
}

}  // namespace course
