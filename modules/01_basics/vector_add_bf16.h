// An optional entry point beside vector_add (vector_add.h): the same sum of bf16 vectors, the GPT
// trainer's residual add in its bf16 mode. Module 08's trainer calls it where the library it loads
// defines it, and otherwise converts around vector_add (a and b copied to float, c rounded back);
// vector_add's fast reference defines it (no stub asks for it). The checker
// (tests/vector_add_test.cu) runs its case where the file defines it and skips it, naming it,
// where not.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>

// c[i] = a[i] + b[i] for every 0 <= i < n, added in float and rounded to bf16 once. a, b and c are
// device pointers to n bf16 values, 2-byte aligned, no more. n from 1 up to 2^26 (the trainer
// calls it in chunks).
void vector_add_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c,
                     std::size_t n);
