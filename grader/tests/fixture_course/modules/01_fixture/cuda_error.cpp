// 01_fixture/cuda_error: the TODO filled (COURSE_TODO deleted) with a bad access, reported the
// way CUDA_CHECK reports it (course/check.h), without a GPU.
#include <stdexcept>
#include <string>

#include "cuda_error.h"

int twice(int) {
    throw std::runtime_error(std::string("[course:cuda-error] cudaErrorIllegalAddress: an illegal "
                                         "memory access was encountered\n  in `cudaDeviceSynchronize()` at ") +
                             __FILE__ + ":" + std::to_string(__LINE__));
}
