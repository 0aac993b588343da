// The tensor-core wrappers of pairwise_cosine: module 07's, used as they are (one copy of the
// inline PTX in the course). tc::mma_bf16 (mma.sync.m16n8k16, bf16 in, float32 accumulators),
// tc::ldmatrix_x4, tc::cp_async_16 with its commit and wait, and tc::swizzled (the XOR swizzle
// of shared tiles): ../07_attention/tensor_core.h has each with the fragment layout it assumes;
// module 05's notes draw them. The embeddings are bf16 in every build, so the product is
// tc::mma_bf16, never tc::mma, which a build for a T4 makes fp16 (module 07's element type): a T4
// has no bf16 tensor cores (nor cp.async), and the exercise skips there. Read-only.
#pragma once

#include "../07_attention/tensor_core.h"
