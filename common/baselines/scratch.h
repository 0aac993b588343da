// A grow-only device buffer (private to common/baselines/): scratch space of a library call that
// every later call reuses, so that timed calls pay for the work and not for cudaMalloc.
#pragma once

#include <cstddef>

#include "course/check.h"

namespace course::baseline::library {

struct Scratch {
    void* data = nullptr;
    std::size_t capacity = 0;

    // At least `bytes` of device memory; a larger buffer replaces it only when asked for more.
    void* get(std::size_t bytes) {
        if (bytes > capacity) {
            if (data) CUDA_CHECK(cudaFree(data));
            CUDA_CHECK(cudaMalloc(&data, bytes));
            capacity = bytes;
        }
        return data;
    }
};

}  // namespace course::baseline::library
