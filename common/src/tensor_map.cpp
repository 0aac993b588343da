#include "course/tensor_map.h"

#include <cuda_runtime.h>

#include <stdexcept>

#include "course/check.h"

namespace course {

PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    // Through the runtime: the checkers link no driver library (they must start, and skip, on a
    // machine without one).
    static const auto encoder = [] {
        void* function = nullptr;
        cudaDriverEntryPointQueryResult found{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000,
                                                    cudaEnableDefault, &found));
        if (found != cudaDriverEntryPointSuccess || function == nullptr)
            throw std::runtime_error("the driver has no cuTensorMapEncodeTiled");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(function);
    }();
    return encoder;
}

}  // namespace course
