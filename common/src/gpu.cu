#include "course/gpu.h"

#include <cuda_runtime.h>

#include <cstdio>

#include "course/check.h"

namespace course {

namespace {

// FP32 results per clock per SM (an FMA counts once), from the CUDA C++ Programming Guide's
// table of arithmetic instruction throughput: the same table as grader/gpu_table.py's. A GPU not
// listed gets no FP32 peak (and its FLOP rates no ceiling).
int fp32_lanes_per_sm(int sm) {
    switch (sm) {
        case 70:
        case 72:
        case 75:
        case 80:
            return 64;
        case 86:
        case 87:
        case 89:
        case 90:
        case 100:
        case 120:
            return 128;
        default:
            return 0;
    }
}

// Dense bf16 multiply-adds (float32 accumulation) per clock per SM on the tensor cores, from
// NVIDIA's architecture whitepapers (an upper bound where a family's parts differ: a ceiling must
// never be below what the GPU does). None before Ampere: those tensor cores have no bf16.
int bf16_tensor_fmas_per_sm(int sm) {
    switch (sm) {
        case 80:
        case 86:
        case 87:
        case 89:
        case 120:
            return 1024;
        case 90:
            return 2048;
        case 100:
            return 4096;
        default:
            return 0;
    }
}

// The same for fp16 inputs: the rate of bf16 where the GPU has both, and Turing's (sm_75: a T4's 8
// tensor cores of 64 fp16 multiply-adds per SM, the fp32-accumulation rate of its whitepaper).
int fp16_tensor_fmas_per_sm(int sm) { return sm == 75 ? 512 : bf16_tensor_fmas_per_sm(sm); }

std::string fixed(double value, int decimals) {
    char text[32];
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
    return text;
}

void fill_peaks(GpuInfo& g, const cudaDeviceProp& prop) {
    int memory_khz = 0, sm_khz = 0;
    // A device may decline to say (an emulator, some virtual GPUs): then no peak.
    if (cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, g.device) != cudaSuccess)
        memory_khz = 0;
    if (cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, g.device) != cudaSuccess) sm_khz = 0;
    cudaGetLastError();
    if (memory_khz > 0 && prop.memoryBusWidth > 0) {
        g.memory_peak_gb_s = 2.0 * memory_khz * 1e3 * (prop.memoryBusWidth / 8) / 1e9;
        g.memory_peak_formula = "2 transfers per clock x " + fixed(memory_khz / 1e3, 0) +
                                " MHz x " + std::to_string(prop.memoryBusWidth) + "-bit bus";
    }
    const int lanes = fp32_lanes_per_sm(g.sm);
    if (lanes > 0 && sm_khz > 0) {
        g.fp32_peak_tflop_s = 2.0 * g.multiprocessors * lanes * sm_khz * 1e3 / 1e12;
        g.fp32_peak_formula = std::to_string(g.multiprocessors) + " SMs x " +
                              std::to_string(lanes) + " FP32 lanes x 2 FLOP per FMA x " +
                              fixed(sm_khz / 1e6, 3) + " GHz";
    }
    const int fmas = bf16_tensor_fmas_per_sm(g.sm);
    if (fmas > 0 && sm_khz > 0) {
        g.bf16_tensor_peak_tflop_s = 2.0 * g.multiprocessors * fmas * sm_khz * 1e3 / 1e12;
        g.bf16_tensor_peak_formula = std::to_string(g.multiprocessors) + " SMs x " +
                                     std::to_string(fmas) +
                                     " bf16 tensor-core multiply-adds per clock x 2 FLOP x " +
                                     fixed(sm_khz / 1e6, 3) + " GHz";
    }
    const int fp16_fmas = fp16_tensor_fmas_per_sm(g.sm);
    if (fp16_fmas > 0 && sm_khz > 0) {
        g.fp16_tensor_peak_tflop_s = 2.0 * g.multiprocessors * fp16_fmas * sm_khz * 1e3 / 1e12;
        g.fp16_tensor_peak_formula = std::to_string(g.multiprocessors) + " SMs x " +
                                     std::to_string(fp16_fmas) +
                                     " fp16 tensor-core multiply-adds per clock x 2 FLOP x " +
                                     fixed(sm_khz / 1e6, 3) + " GHz";
    }
}

// Why no device is usable, in words that point at the cause: without any NVIDIA driver the
// runtime says "CUDA driver version is insufficient", which reads as "upgrade your driver".
std::string no_device_reason(cudaError_t status) {
    if (status == cudaSuccess || status == cudaErrorNoDevice) return "no NVIDIA GPU found";
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    cudaGetLastError();
    const auto version = [](int v) {
        return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    };
    if (driver == 0) return "no NVIDIA GPU driver on this machine";
    if (status == cudaErrorInsufficientDriver)
        return "the NVIDIA driver supports CUDA " + version(driver) + ", older than the CUDA " +
               version(runtime) + " these checkers were built with: update the driver";
    return std::string("no usable NVIDIA GPU (") + cudaGetErrorString(status) + ")";
}

}  // namespace

const GpuInfo& gpu() {
    static const GpuInfo info = [] {
        GpuInfo g;
        int count = 0;
        const cudaError_t status = cudaGetDeviceCount(&count);
        if (status != cudaSuccess || count == 0) {
            g.unavailable_reason = no_device_reason(status);
            cudaGetLastError();  // clear it: skipping is not an error
            return g;
        }
        cudaDeviceProp prop{};
        CUDA_CHECK(cudaGetDevice(&g.device));
        CUDA_CHECK(cudaGetDeviceProperties(&prop, g.device));
        g.available = true;
        g.sm = prop.major * 10 + prop.minor;
        g.multiprocessors = prop.multiProcessorCount;
        g.l2_bytes = static_cast<std::size_t>(prop.l2CacheSize);
        g.global_memory_bytes = prop.totalGlobalMem;
        g.name = prop.name;
        fill_peaks(g, prop);
        return g;
    }();
    return info;
}

std::optional<std::string> gpu_skip_reason(int min_sm) {
    const GpuInfo& g = gpu();
    if (!g.available) return g.unavailable_reason + ": this checker needs an NVIDIA GPU";
    if (g.sm < min_sm)
        return "needs compute capability " + std::to_string(min_sm / 10) + "." +
               std::to_string(min_sm % 10) + " or newer; " + g.name + " is " +
               std::to_string(g.sm / 10) + "." + std::to_string(g.sm % 10);
    return std::nullopt;
}

std::optional<std::string> gpu_count_skip_reason(int min_gpus) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        cudaGetLastError();  // no driver: the machine has no GPU, which is a reason, not an error
        count = 0;
    }
    if (count >= min_gpus) return std::nullopt;
    return "needs " + std::to_string(min_gpus) + " GPUs, this machine has " + std::to_string(count);
}

std::optional<std::string> memory_skip_reason(std::size_t bytes) {
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    if (bytes <= free_bytes) return std::nullopt;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    return "needs " + std::to_string(bytes / gib).substr(0, 4) + " GiB of device memory, " +
           std::to_string(free_bytes / gib).substr(0, 4) + " GiB free";
}

}  // namespace course
