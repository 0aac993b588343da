// Contract of 04_sgemm/sgemm_blocktile_1d. Read-only: every rung of the ladder implements the same
// sgemm(M, N, K, alpha, A, B, beta, C), described in sgemm.h, and is graded by the same checker.
#pragma once

#include "sgemm.h"
