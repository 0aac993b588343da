// A trusted GPU reference for attention (module 07), in float32: the same formulas as the CPU
// reference (course/reference/attention.h), one warp per query row (forward, dQ) or key row (dK,
// dV), no tiling, no online softmax, nothing clever. It makes references for shapes the CPU
// reference would take minutes over (B 4, H 16, T 4096); its own test
// (common/tests/attention_gpu_test.cu) checks it against the CPU reference on small shapes.
//
// All pointers are device pointers to float32 [B][H][T][D] tensors (L: [B][H][T]); D is a
// multiple of 32 up to 128. The calls enqueue on the default stream and check their launches.
#pragma once

#include "course/reference/attention.h"

namespace course::reference::gpu {

// O and L of every head.
void attention_forward(const float* Q, const float* K, const float* V, float* O, float* L,
                       const AttentionShape& shape, float scale, bool causal);

// dQ, dK, dV from dO, with P recomputed from L, and D_i = dO_i . O_i (O and L as the forward
// above wrote them).
void attention_backward(const float* Q, const float* K, const float* V, const float* O,
                        const float* L, const float* dO, float* dQ, float* dK, float* dV,
                        const AttentionShape& shape, float scale, bool causal);

}  // namespace course::reference::gpu
