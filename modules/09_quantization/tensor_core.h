// The tensor-core wrappers of gemm_w4a16 and mxfp8_gemm: module 07's, used as they are (one copy
// of the inline PTX in the course). tc::mma_bf16 (mma.sync.m16n8k16, bf16 in, float32
// accumulators), tc::ldmatrix_x4, tc::pack_bf16 (two floats as a bf16 pair) and tc::swizzled (the
// XOR swizzle of shared tiles): ../07_attention/tensor_core.h has each with the fragment layout it
// assumes; module 05's notes draw them. The data here is bf16 in every build, so these are the
// bf16 ones, never tc::mma and tc::pack, which a build for a T4 makes fp16 (module 07's element
// type): a T4 has no bf16 tensor cores, and the two exercises skip there. Read-only.
#pragma once

#include "../07_attention/tensor_core.h"
