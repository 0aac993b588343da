// CUDA error checking and launch arithmetic, for exercises, solutions and checkers alike.
//
//   CUDA_CHECK(cudaMalloc(&p, bytes));      // any runtime call
//   my_kernel<<<grid, block>>>(...);
//   CUDA_CHECK_LAUNCH();                     // right after every launch
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace course {

// Thrown by CUDA_CHECK. The "[course:cuda-error]" tag lets the grader report a crashed kernel
// (illegal address, misaligned access, launch failure) as a crash rather than a wrong answer.
class CudaError : public std::runtime_error {
  public:
    CudaError(cudaError_t code, const std::string& message)
        : std::runtime_error(message), code_(code) {}
    cudaError_t code() const { return code_; }

  private:
    cudaError_t code_;
};

// Set by the checkers' harness (common/src/error_notes.cpp): what it can say about an error beyond
// its name (which input a load read past the end of, what a refused launch usually means). Null
// elsewhere (the trainer, tools).
inline std::string (*cuda_error_context)(cudaError_t status, const char* expression) = nullptr;

inline void cuda_check(cudaError_t status, const char* expression, const char* file, int line) {
    if (status == cudaSuccess) return;
    throw CudaError(status, std::string("[course:cuda-error] ") + cudaGetErrorName(status) + ": " +
                                cudaGetErrorString(status) + "\n  in `" + expression + "` at " +
                                file + ":" + std::to_string(line) +
                                (cuda_error_context ? cuda_error_context(status, expression) : ""));
}

// Runs `call`; a CudaError it throws goes on with `note` appended. For a case whose description
// must reach the learner when the code under test throws (a learner's cudaMalloc that fails):
// gtest reports an exception after the test's SCOPED_TRACEs are unwound, so they never show.
template <class Call>
void with_note_on_cuda_error(const std::string& note, Call&& call) {
    try {
        call();
    } catch (const CudaError& error) {
        throw CudaError(error.code(), std::string(error.what()) + "\n  " + note);
    }
}

// Number of blocks of `per_block` items needed to cover `count` items: the last block may be
// partial, so the kernel still needs its `if (i < n)` guard.
template <class A, class B>
__host__ __device__ constexpr std::common_type_t<A, B> ceil_div(A count, B per_block) {
    using T = std::common_type_t<A, B>;
    return (static_cast<T>(count) + static_cast<T>(per_block) - 1) / static_cast<T>(per_block);
}

}  // namespace course

#define CUDA_CHECK(expression) ::course::cuda_check((expression), #expression, __FILE__, __LINE__)

// A launch reports a bad configuration (too many threads, too much shared memory) only through
// cudaGetLastError; errors inside the kernel surface at the next synchronizing call.
#define CUDA_CHECK_LAUNCH() \
    ::course::cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
