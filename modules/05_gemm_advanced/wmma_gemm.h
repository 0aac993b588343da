// Contract of 05_gemm_advanced/wmma_gemm. Read-only: every tensor-core rung of the module
// implements the same gemm_bf16(M, N, K, A, B, C), described in gemm_bf16.h, and is graded by the
// same checker.
#pragma once

#include "gemm_bf16.h"
