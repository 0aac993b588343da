// Optional entry points beside flash_wgmma (flash_wgmma.h) and flash_wgmma_backward
// (flash_wgmma_backward.h): the same attention with q, k and v read where the GPT trainer's qkv
// projection writes them, O (and dO) where its next layer reads (writes) them, and the backward's
// gradient where the projection's backward reads it, so that no head is copied out and back
// around the kernels. Module 08's trainer calls them (its reference's --attention flash on a
// Hopper GPU); the two fast references define them (no stub asks for them, and the exercises'
// contracts stay as they are). The checkers (tests/flash_wgmma_test.cu,
// tests/flash_wgmma_backward_test.cu) run their cases through them where the file defines them and
// skip them, naming them, where not.
#pragma once

#include <cuda_bf16.h>

// flash_wgmma (flash_wgmma.h) on the trainer's layouts: qkv is [batch][T][3][heads][D] (each
// token's row of 3 heads D holds its q, then its k, then its v, head after head), O is
// [batch][T][heads][D]; L is [batch][heads][T], as there. The same limits as flash_wgmma's, and
// qkv and O start on 16-byte boundaries.
void flash_wgmma_packed(const __nv_bfloat16* qkv, __nv_bfloat16* O, float* L, int batch, int heads,
                        int T, int D, float scale, bool causal);

// flash_wgmma_backward (flash_wgmma_backward.h) on the trainer's layouts: qkv as above, O and dO
// [batch][T][heads][D], L as there; the gradient written as the trainer's dqkv, laid out as qkv
// ([batch][T][3][heads][D]: each token's dq, dk, dv of every head), in bf16. dq_sums is scratch
// of batch * heads * T * D floats, where dQ's sums over the key blocks are added up (its old
// contents may be anything). The same limits as flash_wgmma_backward's, and qkv, O, dO and dqkv
// start on 16-byte boundaries.
void flash_wgmma_backward_packed(const __nv_bfloat16* qkv, const __nv_bfloat16* O,
                                 const __nv_bfloat16* dO, const float* L, float* dq_sums,
                                 __nv_bfloat16* dqkv, int batch, int heads, int T, int D,
                                 float scale, bool causal);
