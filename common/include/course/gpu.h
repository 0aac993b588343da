// The GPU this checker runs on, and the reasons to skip rather than fail.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace course {

struct GpuInfo {
    bool available = false;
    std::string unavailable_reason;  // why not, when !available
    int device = 0;
    int sm = 0;  // compute capability as major*10+minor (90 = Hopper)
    int multiprocessors = 0;
    std::size_t l2_bytes = 0;
    std::size_t global_memory_bytes = 0;
    std::string name;
    // What the GPU can physically deliver, on paper (0 where the device does not say): DRAM
    // bytes per second, 2 transfers per memory clock over the bus; FP32 FLOP per second, an FMA
    // as 2, on the CUDA cores at the peak clock; dense bf16 FLOP per second with float32
    // accumulation on the tensor cores at the peak clock. `*_formula` says how, for messages.
    double memory_peak_gb_s = 0;
    std::string memory_peak_formula;
    double fp32_peak_tflop_s = 0;
    std::string fp32_peak_formula;
    double bf16_tensor_peak_tflop_s = 0;
    std::string bf16_tensor_peak_formula;
    double fp16_tensor_peak_tflop_s = 0;  // the same with fp16 inputs (a T4 has these only)
    std::string fp16_tensor_peak_formula;
};

// Queried once per process.
const GpuInfo& gpu();

// Why a test needing compute capability `min_sm` cannot run here, or nothing.
std::optional<std::string> gpu_skip_reason(int min_sm);

// Why a test needing `min_gpus` GPUs of this machine cannot run here ("needs 2 GPUs, this machine
// has 1"), or nothing.
std::optional<std::string> gpu_count_skip_reason(int min_gpus);

// Why a test needing `bytes` of free device memory cannot run here, or nothing.
std::optional<std::string> memory_skip_reason(std::size_t bytes);

// True in a build for the CPU emulator of dev/emu (its targets define COURSE_EMULATOR), where the
// kernels run on the host, thousands of times slower than on a GPU.
constexpr bool emulated() {
#if defined(COURSE_EMULATOR)
    return true;
#else
    return false;
#endif
}

}  // namespace course
