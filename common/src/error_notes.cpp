#include "error_notes.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "course/check.h"
#if !defined(COURSE_EMULATOR)
#include "end_guard.h"
#endif

namespace course {

namespace {

// `expression` is what CUDA_CHECK was given; CUDA_CHECK_LAUNCH passes "kernel launch".
std::string explain(cudaError_t status, const char* expression) {
    const bool launch = std::strcmp(expression, "kernel launch") == 0;
    switch (status) {
        case cudaErrorIllegalAddress:
#if !defined(COURSE_EMULATOR)
            return end_guard::describe_fault();
#else
            return "";
#endif
        case cudaErrorMisalignedAddress:
            return "\n  a load or store of several elements at once (a float4, a float2, a 16-byte "
                   "cp.async) at an address that is not a multiple of its size: the contract may "
                   "promise only an element's alignment. Take the vector path only where the "
                   "pointer is aligned (course::is_aligned(p, 16)) and, for a row of a matrix, "
                   "where the row length keeps every row aligned (a multiple of 4 floats)";
        case cudaErrorInvalidConfiguration:
            if (!launch) return "";
            return "\n  the GPU refused the launch's shape: a block has at most 1024 threads in "
                   "all, a grid at most 65535 blocks along y and z (2^31 - 1 along x) and at "
                   "least 1 along each. Put a long extent (the rows of a tall matrix, batch x "
                   "heads) on grid.x, or give each block more of it; count blocks with "
                   "course::ceil_div, never n / per_block, which is 0 for a short n";
        case cudaErrorInvalidValue:
            if (!launch) return "";
            // Drivers word a grid past its limits either way (invalid configuration, or this).
            return "\n  the GPU refused the launch's arguments: more dynamic shared memory than a "
                   "block gets by default (48 KB), above which a kernel must opt in first, "
                   "cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, "
                   "bytes) (course::opt_in_shared_bytes(kernel) does it and returns what this GPU "
                   "allows); or a grid past its limits (some drivers say this for it): at most "
                   "65535 blocks along y and z (2^31 - 1 along x) and at least 1 along each. Put a "
                   "long extent (the rows of a tall matrix, batch x heads) on grid.x, or give each "
                   "block more of it; count blocks with course::ceil_div, never n / per_block, "
                   "which is 0 for a short n";
        default:
            return "";
    }
}

}  // namespace

void install_error_notes() { cuda_error_context = &explain; }

}  // namespace course
