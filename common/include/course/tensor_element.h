// The element type of the tensor-core exercises (modules 05 and 07): bf16 where the build's device
// code has bf16 tensor cores (sm_80 and newer: an A100, an H100), fp16 where it is for a GPU
// without them (sm_75: the T4 of free notebooks, whose tensor cores take fp16). The build decides,
// not the learner: cmake/Course.cmake defines COURSE_FP16_TENSOR_CORES for the exercises when the
// oldest architecture it builds for is below 80. The contracts (gemm_bf16.h, flash_tc.h,
// flash_backward.h) take course::TensorElement, so a learner writes one file: with bf16 and the
// sm_80 instructions on an A100 or H100, with fp16 and the sm_75 ones on a T4.
//
//   void gemm_bf16(int M, int N, int K, const course::TensorElement* A, ...);
//   if constexpr (course::kFp16TensorCores) { /* mma.sync.m16n8k8.f16, no cp.async */ }
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace course {

// (Constants of internal linkage: a translation unit without the definition, the harness's own,
// sees bf16 without contradicting the exercise's.)
#if defined(COURSE_FP16_TENSOR_CORES)
using TensorElement = __half;
constexpr bool kFp16TensorCores = true;
constexpr const char* kTensorElementName = "fp16";
#else
using TensorElement = __nv_bfloat16;
constexpr bool kFp16TensorCores = false;
constexpr const char* kTensorElementName = "bf16";
#endif

}  // namespace course
