// The SGEMM contract of module 04 (its sgemm.h), which 05_gemm_advanced/sgemm_warptile implements
// as a sixth rung of that ladder and which module 04's checker grades. Read-only.
#pragma once

#include "../04_sgemm/sgemm.h"
