#include "course/hashed.h"

#include <algorithm>

#include "course/check.h"

namespace course {

namespace {

// One thread per element over a grid-stride loop; `value(i)` is one of hashed::'s functions.
template <class T, class Value>
__global__ void fill_kernel(T* out, std::size_t n, std::size_t period, Value value) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        out[i] = value(period ? i % period : i);
}

struct Uniform {
    std::uint64_t seed;
    float lo, hi;
    __device__ float operator()(std::size_t i) const { return hashed::uniform(i, seed, lo, hi); }
};
struct UniformInt {
    std::uint64_t seed;
    int lo, hi;
    __device__ int operator()(std::size_t i) const { return hashed::uniform_int(i, seed, lo, hi); }
};
struct Byte {
    std::uint64_t seed;
    __device__ std::uint8_t operator()(std::size_t i) const { return hashed::byte(i, seed); }
};

template <class T, class Value>
void fill(T* out, std::size_t n, std::size_t period, Value value) {
    if (n == 0) return;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<std::size_t>(ceil_div(n, threads), 8192));
    fill_kernel<T, Value><<<blocks, threads>>>(out, n, period, value);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void fill_uniform(float* out, std::size_t n, std::uint64_t seed, float lo, float hi,
                  std::size_t period) {
    fill(out, n, period, Uniform{seed, lo, hi});
}

void fill_uniform_int(int* out, std::size_t n, std::uint64_t seed, int lo, int hi,
                      std::size_t period) {
    fill(out, n, period, UniformInt{seed, lo, hi});
}

void fill_bytes(std::uint8_t* out, std::size_t n, std::uint64_t seed, std::size_t period) {
    fill(out, n, period, Byte{seed});
}

}  // namespace course
