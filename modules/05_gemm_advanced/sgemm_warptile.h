// Contract of 05_gemm_advanced/sgemm_warptile. Read-only.
#pragma once

#include "sgemm.h"

// sgemm(M, N, K, alpha, A, B, beta, C): module 04's contract (../04_sgemm/sgemm.h), graded by
// module 04's checker; your file instantiates its kernel for the tile configurations it lists, and
// sgemm() runs the one you chose.
//
// The autotuner's entry points: the checker's Autotune case (README.md: how to run it) calls
// sgemm_with_config(c, ...) for each c < sgemm_config_count(), named sgemm_config_name(c), checks
// it and times it against cuBLAS, and reports the fastest.
int sgemm_config_count();
const char* sgemm_config_name(int config);
void sgemm_with_config(int config, int M, int N, int K, float alpha, const float* A, const float* B,
                       float beta, float* C);
