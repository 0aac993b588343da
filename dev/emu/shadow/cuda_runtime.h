// The CUDA runtime as the emulator provides it: device memory is host memory, a launch runs the
// kernel to completion before returning (emu.h), events read the host clock, errors carry CUDA's
// names and messages. Only what the harness,
// the checkers and the solutions call is here. The emulated GPU is an H100 by default:
//   EMU_CLUSTERS=0    a GPU without thread block clusters (pre-Hopper paths)
//   EMU_OPTIN=<KB>    the shared memory a block may opt into (227 H100, 163 A100, 99 consumer)
//   EMU_SM=<NN>       the compute capability reported (90), and the architecture kernels report
//                     having been compiled for (default: the build's, COURSE_EMULATED_ARCH)
#pragma once

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "emu.h"

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorInvalidConfiguration = emu::kInvalidConfiguration,
    cudaErrorIllegalAddress = emu::kIllegalAddress,
    cudaErrorMisalignedAddress = emu::kMisalignedAddress,
    cudaErrorInsufficientDriver = 35,  // the harness's words for a machine without a GPU
    cudaErrorNoDevice = 100,
};
enum cudaMemcpyKind {
    cudaMemcpyHostToHost,
    cudaMemcpyHostToDevice,
    cudaMemcpyDeviceToHost,
    cudaMemcpyDeviceToDevice,
    cudaMemcpyDefault
};
enum cudaDeviceAttr {
    cudaDevAttrMultiProcessorCount,
    cudaDevAttrClockRate,
    cudaDevAttrMemoryClockRate,
    cudaDevAttrMaxSharedMemoryPerBlockOptin,
    cudaDevAttrClusterLaunch,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
// Programmatic stream serialization (a kernel let start before the one it follows has ended) is
// accepted and changes nothing: the emulator runs each launch to its end before the next.
enum cudaLaunchAttributeID {
    cudaLaunchAttributeClusterDimension,
    cudaLaunchAttributeProgrammaticStreamSerialization,
};

using cudaStream_t = struct EmuStream*;
using cudaEvent_t = std::chrono::steady_clock::time_point*;
using dim3 = Dim3;

struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount, l2CacheSize, memoryBusWidth;
    std::size_t totalGlobalMem;
};
struct cudaFuncAttributes {
    std::size_t sharedSizeBytes;
    int binaryVersion;
    int ptxVersion;  // what course::clusters_available reads; EMU_SM, as binaryVersion
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    union {
        struct {
            unsigned x, y, z;
        } clusterDim;
        int programmaticStreamSerializationAllowed;
    } val;
};
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    std::size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute* attrs;
    unsigned numAttrs;
};

namespace emu {
inline int env_or(const char* name, int fallback) {
    const char* value = std::getenv(name);
    return value ? std::atoi(value) : fallback;
}
inline std::size_t optin_bytes() { return env_or("EMU_OPTIN", 227) * std::size_t(1024); }
}  // namespace emu

inline cudaError_t cudaGetDeviceCount(int* count) { return *count = 1, cudaSuccess; }
inline cudaError_t cudaGetDevice(int* device) { return *device = 0, cudaSuccess; }
inline cudaError_t cudaDriverGetVersion(int* version) { return *version = 13000, cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int* version) { return *version = 13000, cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int) {
    *prop = {};
    std::strcpy(prop->name, "CPU emulator (dev/emu)");
    const int sm = emu::env_or("EMU_SM", 90);
    prop->major = sm / 10;
    prop->minor = sm % 10;
    prop->multiProcessorCount = 132;
    prop->l2CacheSize = 50 << 20;
    prop->memoryBusWidth = 5120;
    prop->totalGlobalMem = std::size_t(8) << 30;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int) {
    switch (attribute) {
        case cudaDevAttrMultiProcessorCount: *value = 132; break;
        case cudaDevAttrClockRate: *value = 1980000; break;  // kHz, an H100 SXM's
        case cudaDevAttrMemoryClockRate: *value = 2619000; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(emu::optin_bytes()); break;
        case cudaDevAttrClusterLaunch: *value = emu::env_or("EMU_CLUSTERS", 1); break;
    }
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
    // The timing cases (256 MB and more) and the cases past 2^31 elements skip; a GPU this small
    // has no memory to wait for (course/large.h).
    *total_bytes = std::size_t(512) << 20;
    *free_bytes = *total_bytes;
    return cudaSuccess;
}
inline const char* cudaGetErrorName(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    }
    return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
        case cudaErrorMisalignedAddress: return "misaligned address";
    }
    return "unknown error";
}
// The sticky error of a faulted kernel, which every later call returns.
inline cudaError_t emu_status() { return static_cast<cudaError_t>(emu::sticky_error); }
inline cudaError_t cudaGetLastError() {
    const int error = emu::sticky_error ? emu::sticky_error : emu::launch_error;
    emu::launch_error = 0;
    return static_cast<cudaError_t>(error);
}
inline cudaError_t cudaDeviceSynchronize() { return emu_status(); }

inline cudaError_t cudaMalloc(void** p, std::size_t bytes) {
    *p = ::operator new(bytes == 0 ? 1 : bytes, std::align_val_t(256));
    return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** p, std::size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
inline cudaError_t cudaFree(void* p) {
    ::operator delete(p, std::align_val_t(256));
    return cudaSuccess;
}
// Launches and copies are done when they return: stream order is program order.
template <class T>
cudaError_t cudaMallocAsync(T** p, std::size_t bytes, cudaStream_t) {
    return cudaMalloc(p, bytes);
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }
inline cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind) {
    if (emu::sticky_error) return emu_status();
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int value, std::size_t bytes) {
    if (emu::sticky_error) return emu_status();
    std::memset(p, value, bytes);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* p, int value, std::size_t bytes, cudaStream_t = nullptr) {
    return cudaMemset(p, value, bytes);
}

inline cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = new std::chrono::steady_clock::time_point();
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) { return delete event, cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t = nullptr) {
    *event = std::chrono::steady_clock::now();
    return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = std::chrono::duration<float, std::milli>(*end - *start).count();
    return cudaSuccess;
}

template <class Kernel>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attributes, Kernel) {
    // What the code was compiled for: the emulated build's architecture (Emulate.cmake:
    // COURSE_EMULATED_ARCH), unless EMU_SM says otherwise.
    const int compiled = emu::env_or("EMU_SM", __CUDA_ARCH__ / 10);
    *attributes = {0, compiled, compiled};
    return cudaSuccess;
}
template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel, cudaFuncAttribute, int bytes) {
    return std::size_t(bytes) <= emu::optin_bytes() ? cudaSuccess : cudaErrorInvalidValue;
}
template <class Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel, int threads,
                                                          std::size_t) {
    *blocks = threads > 0 ? 2048 / threads : 0;
    return cudaSuccess;
}

template <class... Params, class... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(Params...),
                               Args... args) {
    unsigned cluster = 1;
    for (unsigned i = 0; i < config->numAttrs; ++i)
        if (config->attrs[i].id == cudaLaunchAttributeClusterDimension)
            cluster = config->attrs[i].val.clusterDim.x;
    emu::Launch<Params...>{kernel, config->gridDim, config->blockDim, cluster,
                           config->dynamicSmemBytes}(args...);
    return cudaGetLastError();
}
