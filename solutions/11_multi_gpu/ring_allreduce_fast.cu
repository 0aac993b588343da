// 11_multi_gpu/ring_allreduce_fast: the ring all-reduce with the reduce-scatter's copy and add
// fused. Fast reference: the readable solution (ring_allreduce.cu, included below) plus one
// kernel.
//
// Teaches: with peer access, a kernel on GPU g can load the left neighbour's memory through its
// plain pointer, over NVLink or PCIe. So each reduce-scatter step is one kernel that reads the
// neighbour's chunk and adds it into its own copy in the same pass: the link is never idle while
// an add runs, and no scratch chunk is written and read back. The all-gather keeps the readable
// solution's peer-to-peer copies (there is nothing to add). Where a pair of GPUs has no peer
// access, the readable solution runs. The module README compares them.
//
// Run:  grader run 11/ring_allreduce --solutions    (the "ring_allreduce (fast)" row)
// Contract: ring_allreduce.h           Notes:  notes/11_multi_gpu.md
#include <algorithm>

#include "course/exercise.h"
#include "ring_allreduce.h"

// The readable solution, whole: its chunking, events and all-gather step serve here too, and
// readable::ring_allreduce runs where peer access is missing. (Every header it includes is
// included above, so that none of them lands inside the namespace.)
namespace readable {
#include "ring_allreduce.cu"
}  // namespace readable

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

// own[i] += left[i] for i < n, where `left` lives on the left neighbour: every load of it
// crosses the link, and the sum is written to local memory.
template <typename T>
__global__ void add_from_peer_kernel(T* own, const T* left, std::size_t n) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        own[i] += left[i];
}

template <typename T>
void add_from_peer(T* own, const T* left, std::size_t n) {
    const int blocks =
        static_cast<int>(std::min<std::size_t>(course::ceil_div(n, kThreads), kMaxBlocks));
    add_from_peer_kernel<<<blocks, kThreads>>>(own, left, n);
    CUDA_CHECK_LAUNCH();
}

// Whether every GPU can load from its left neighbour (asked of the driver; the contract says the
// checker enabled peer access wherever it is possible).
bool ring_has_peer_access(int gpus) {
    for (int g = 0; g < gpus; ++g) {
        int possible = 0;
        CUDA_CHECK(cudaDeviceCanAccessPeer(&possible, g, (g + gpus - 1) % gpus));
        if (!possible) return false;
    }
    return true;
}

// One reduce-scatter step: GPU g adds chunk (g - 1 - s) mod gpus of its left neighbour into its
// own, in one kernel. The same waits and records as readable::ring_step.
template <typename T>
void reduce_step_from_peer(T* const* buffers, int gpus, std::size_t count, int s) {
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        CUDA_CHECK(cudaStreamWaitEvent(0, readable::step_done((g + gpus - 1) % gpus), 0));
    }
    for (int g = 0; g < gpus; ++g) {
        const int left = (g + gpus - 1) % gpus;
        const readable::Chunk chunk =
            readable::chunk_of(((g - 1 - s) % gpus + gpus) % gpus, gpus, count);
        CUDA_CHECK(cudaSetDevice(g));
        if (chunk.size > 0)
            add_from_peer(buffers[g] + chunk.begin, buffers[left] + chunk.begin, chunk.size);
        CUDA_CHECK(cudaEventRecord(readable::step_done(g), 0));
    }
}

template <typename T>
void ring_allreduce_fused(T* const* buffers, T* const* scratch, int gpus, std::size_t count) {
    if (!ring_has_peer_access(gpus)) {
        readable::ring_allreduce(buffers, scratch, gpus, count);
        return;
    }
    int caller_device = 0;
    CUDA_CHECK(cudaGetDevice(&caller_device));
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        CUDA_CHECK(cudaEventRecord(readable::step_done(g), 0));
    }
    for (int s = 0; s < gpus - 1; ++s) reduce_step_from_peer(buffers, gpus, count, s);
    for (int s = 0; s < gpus - 1; ++s)
        readable::ring_step(
            buffers, scratch, gpus, count, [=](int g) { return ((g - s) % gpus + gpus) % gpus; },
            false);
    CUDA_CHECK(cudaSetDevice(caller_device));
}

}  // namespace

void ring_allreduce(float* const* buffers, float* const* scratch, int gpus, std::size_t count) {
    ring_allreduce_fused(buffers, scratch, gpus, count);
}

void ring_allreduce(int* const* buffers, int* const* scratch, int gpus, std::size_t count) {
    ring_allreduce_fused(buffers, scratch, gpus, count);
}
