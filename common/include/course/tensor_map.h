// The driver's cuTensorMapEncodeTiled, for the exercises that copy with the Tensor Memory
// Accelerator (module 05's wgmma_gemm, through its hopper.h). Found by the harness, which every
// checker links: an exercise's own object file may not reach the driver's entry points itself
// (grader/library_ban.py refuses cudaGetDriverEntryPoint there).
#pragma once

#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

namespace course {

// Throws where the driver has no such function (a driver older than CUDA 12).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder();

}  // namespace course
