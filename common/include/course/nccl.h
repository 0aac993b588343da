// NCCL error checking, for the exercises that call NCCL (module 11) and the trainer.
//
//   NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm, stream));
#pragma once

#include <nccl.h>

#include <stdexcept>
#include <string>

namespace course {

// Thrown by NCCL_CHECK, as CudaError is by CUDA_CHECK: the call's text, file and line, and
// NCCL's own words (NCCL_DEBUG=WARN prints more).
inline void nccl_check(ncclResult_t status, const char* expression, const char* file, int line) {
    if (status == ncclSuccess) return;
    throw std::runtime_error(std::string("NCCL: ") + ncclGetErrorString(status) + "\n  in `" +
                             expression + "` at " + file + ":" + std::to_string(line) +
                             " (NCCL_DEBUG=WARN says more)");
}

}  // namespace course

#define NCCL_CHECK(expression) ::course::nccl_check((expression), #expression, __FILE__, __LINE__)
