// An optional entry point beside cross_entropy (cross_entropy.h): the loss and its gradient over
// the GPT trainer's bf16 logits, as the trainer keeps them: rows padded past the vocabulary (its
// LM head's product is 50304 wide for 50257 tokens), the gradient scaled by the trainer's and
// written over the logits. Module 08's trainer calls it where the library it loads defines it,
// and otherwise copies the logits to float, the padding masked to -inf, around cross_entropy;
// cross_entropy's fast reference defines it (no stub asks for it). The checker
// (tests/cross_entropy_test.cu) runs its cases where the file defines it and skips them, naming
// it, where not.
#pragma once

#include <cuda_bf16.h>

// Each row r of logits holds `stride` bf16 values, of which the first `vocab` are the classes'
// logits (finite) and the rest padding, never a class and never read as one:
//   losses[r] = log(sum over c < vocab of exp(logits[r][c])) - logits[r][targets[r]]   (float)
// and, where dlogits is not null,
//   dlogits[r][c] = (softmax(logits[r][0 .. vocab))[c] - (c == targets[r] ? 1 : 0)) * scale
// for c < vocab, 0 for vocab <= c < stride (bf16, rows of `stride`). dlogits may be logits itself
// (the trainer's call: the gradient written over the logits); otherwise no output aliases
// another. 0 <= targets[r] < vocab; rows >= 1, 1 <= vocab <= stride; rows * stride at most 2^26
// (the trainer calls it in chunks of rows); the pointers are 2-byte aligned (bf16), no more.
void cross_entropy_bf16(const __nv_bfloat16* logits, const int* targets, float* losses,
                        __nv_bfloat16* dlogits, float scale, int rows, int vocab, int stride);
