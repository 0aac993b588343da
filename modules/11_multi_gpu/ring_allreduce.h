// Contract of 11_multi_gpu/ring_allreduce. Read-only: the checker calls exactly this.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

// The sum of `gpus` buffers, one per GPU, in place: buffers[g] is a device pointer on GPU g
// (g = 0 .. gpus - 1) to `count` elements. After the call, every buffers[g][i] holds
// buffers[0][i] + buffers[1][i] + ... + buffers[gpus - 1][i] as they were before the call.
// Integer sums are checked exactly; float sums may add in any order (the checker's tolerance
// grows with gpus).
//
// scratch[g], on GPU g, has room for course::ceil_div(count, gpus) elements, for your own use (a
// chunk pulled from the neighbour before it is added). Allocate nothing yourself.
//
// gpus is 2 or more (up to every GPU of the machine); count is anything from 1 up, also fewer
// than gpus (some chunks are then empty). The checker has enabled peer access between every pair
// of GPUs that supports it (cudaDeviceEnablePeerAccess), so a cudaMemcpyPeerAsync between them
// goes over NVLink or PCIe without a stop in host memory.
//
// streams[g] is a stream of GPU g, made by the checker with cudaStreamNonBlocking (no implicit
// ordering with any other stream, the legacy default stream included, as NCCL's streams): enqueue
// GPU g's work there (cudaSetDevice(g) first) and return. buffers[g] holds its input once what the
// caller enqueued on streams[g] before the call has run. The checker synchronizes every GPU before
// it reads a buffer. Leave the current device as you found it. You may keep CUDA events between
// calls (created once per GPU).
void ring_allreduce(float* const* buffers, float* const* scratch, const cudaStream_t* streams,
                    int gpus, std::size_t count);
void ring_allreduce(int* const* buffers, int* const* scratch, const cudaStream_t* streams, int gpus,
                    std::size_t count);
