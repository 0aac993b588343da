// trainer/hopper_probe: whether module 07's flash_wgmma and flash_wgmma_backward run in this
// process, for the reference's bf16 attention (ops_reference.cu) and the line train_gpt prints.
//
// Teaches: how a program that links code built for sm_90a decides at run time whether to call it.
// sm_90a device code runs on compute capability 9.0 only, and a build without Hopper in its
// architectures has flash_wgmma's kernels compiled empty. This file is built with flash_wgmma.cu's
// architectures (trainer/CMakeLists.txt: 90 becomes 90a, as cmake/Course.cmake builds the
// exercise), so its probe kernel's device code is what flash_wgmma's is; the exercise's checker
// decides the same way (modules/07_attention/tests/flash_wgmma_test.cu).
//
// Build: part of trainer_model (trainer/CMakeLists.txt)
// Interface: ops.h (flash_wgmma_runs_here)
#include <cuda_runtime.h>

#include "course/launch.h"  // compiled_arch, CUDA_CHECK
#include "ops.h"

namespace trainer {
namespace {

__global__ void hopper_probe_kernel() {}

}  // namespace

bool flash_wgmma_runs_here() {
    static const bool runs = [] {
        int device = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
        return major == 9 && course::compiled_arch(hopper_probe_kernel) == 90;
    }();
    return runs;
}

}  // namespace trainer
