// An optional entry point beside flash_wgmma (flash_wgmma.h): the same attention forward with q, k
// and v read where the GPT trainer's qkv projection writes them and O written where its next layer
// reads it, so that no head is copied out and back around the kernel. Module 08's trainer calls it
// (its reference's --attention flash on a Hopper GPU); flash_wgmma's fast reference defines it (no
// stub asks for it, and the exercise's contract stays flash_wgmma.h's). The checker
// (tests/flash_wgmma_test.cu) runs flash_wgmma's cases through it where the file defines it and
// skips them, naming it, where not.
#pragma once

#include <cuda_bf16.h>

// flash_wgmma (flash_wgmma.h) on the trainer's layouts: qkv is [batch][T][3][heads][D] (each
// token's row of 3 heads D holds its q, then its k, then its v, head after head), O is
// [batch][T][heads][D]; L is [batch][heads][T], as there. The same limits as flash_wgmma's, and
// qkv and O start on 16-byte boundaries.
void flash_wgmma_packed(const __nv_bfloat16* qkv, __nv_bfloat16* O, float* L, int batch, int heads,
                        int T, int D, float scale, bool causal);
