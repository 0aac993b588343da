// 11_multi_gpu/ring_allreduce_fast: the ring all-reduce with every step done by the SMs.
// Fast reference: the readable solution (ring_allreduce.cu, included below) plus two kernels.
//
// Teaches: with peer access, a kernel on GPU g can load the left neighbour's memory through its
// plain pointer, over NVLink or PCIe. So each reduce-scatter step is one kernel that reads the
// neighbour's chunk and adds it into its own copy in the same pass (no scratch written and read
// back, the link never idle while an add runs), and each all-gather step one kernel that copies
// it: each thread has several 16-byte loads in flight, and many thousands of threads cover the
// link's latency. Where a pair of GPUs has no peer access, the readable solution runs. The
// module README compares them.
//
// Run:  grader run 11/ring_allreduce --solutions    (the "ring_allreduce (fast)" row)
// Contract: ring_allreduce.h           Notes:  notes/11_multi_gpu.md
#include <algorithm>
#include <cstdint>

#include "course/exercise.h"
#include "ring_allreduce.h"

// The readable solution, whole: its chunking and events serve here too, and
// readable::ring_allreduce runs where peer access is missing. (Every header it includes is
// included above, so that none of them lands inside the namespace.)
namespace readable {
#include "ring_allreduce.cu"
}  // namespace readable

namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 2;   // 2 x 512 threads: 1024 of an SM's 2048, the rest for others
constexpr int kVecsInFlight = 4;  // 16-byte loads a thread issues before it uses any

// own[i] = left[i] (+ own[i] where kAdd) for i < n, `left` on the left neighbour: each of its
// loads crosses the link. The same chunk of two buffers allocated alike is misaligned alike: a
// scalar head up to the first 16-byte boundary, 16-byte vectors, a scalar tail. (Pointers
// misaligned differently take the scalar loop throughout.)
template <bool kAdd, typename T>
__global__ void __launch_bounds__(kThreads)
    pull_from_left_kernel(T* own, const T* left, std::size_t n) {
    constexpr int kPerVec = 16 / sizeof(T);
    using Vec = int4;  // 16 bytes of T; the adds below are element by element
    const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(own) % 16 / sizeof(T);
    const bool alike = reinterpret_cast<std::uintptr_t>(left) % 16 / sizeof(T) == misalignment;
    const std::size_t to_boundary = misalignment ? kPerVec - misalignment : 0;
    const std::size_t head = alike && to_boundary < n ? to_boundary : n;
    const std::size_t vecs = (n - head) / kPerVec;
    const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t threads = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    // The scalar ends: the head, and the tail past the last whole vector.
    for (std::size_t i = thread; i < n - vecs * kPerVec; i += threads) {
        const std::size_t k = i < head ? i : head + vecs * kPerVec + (i - head);
        own[k] = kAdd ? own[k] + left[k] : left[k];
    }
    Vec* own_vecs = reinterpret_cast<Vec*>(own + head);
    const Vec* left_vecs = reinterpret_cast<const Vec*>(left + head);
    for (std::size_t base = thread; base < vecs; base += kVecsInFlight * threads) {
        Vec incoming[kVecsInFlight];
#pragma unroll
        for (int j = 0; j < kVecsInFlight; ++j)
            if (base + j * threads < vecs) incoming[j] = left_vecs[base + j * threads];
#pragma unroll
        for (int j = 0; j < kVecsInFlight; ++j) {
            const std::size_t v = base + j * threads;
            if (v >= vecs) break;
            if constexpr (kAdd) {
                Vec mine = own_vecs[v];
                T* m = reinterpret_cast<T*>(&mine);
                const T* in = reinterpret_cast<const T*>(&incoming[j]);
#pragma unroll
                for (int e = 0; e < kPerVec; ++e) m[e] += in[e];
                own_vecs[v] = mine;
            } else {
                own_vecs[v] = incoming[j];
            }
        }
    }
}

template <bool kAdd, typename T>
void pull_from_left(T* own, const T* left, std::size_t n, cudaStream_t stream) {
    const int sms = course::multiprocessor_count();
    const std::size_t needed = course::ceil_div(n, std::size_t(kThreads) * 16 / sizeof(T));
    const int blocks = static_cast<int>(std::min<std::size_t>(needed, kBlocksPerSm * sms));
    pull_from_left_kernel<kAdd><<<blocks, kThreads, 0, stream>>>(own, left, n);
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

// One step of the ring, as readable::ring_step orders it (all the waits, then the work and the
// records), with GPU g's pull done by its own SMs: chunk chunk_for(g) of its left neighbour added
// into its own (kAdd), or copied over it.
template <bool kAdd, typename T, typename ChunkFor>
void pull_step(T* const* buffers, const cudaStream_t* streams, int gpus, std::size_t count,
               ChunkFor chunk_for) {
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        CUDA_CHECK(cudaStreamWaitEvent(streams[g], readable::step_done((g + gpus - 1) % gpus), 0));
    }
    for (int g = 0; g < gpus; ++g) {
        const int left = (g + gpus - 1) % gpus;
        const readable::Chunk chunk = readable::Chunk::of(chunk_for(g), gpus, count);
        CUDA_CHECK(cudaSetDevice(g));
        if (chunk.size > 0)
            pull_from_left<kAdd>(buffers[g] + chunk.begin, buffers[left] + chunk.begin,
                                 chunk.size, streams[g]);
        CUDA_CHECK(cudaEventRecord(readable::step_done(g), streams[g]));
    }
}

template <typename T>
void ring_allreduce_on_sms(T* const* buffers, T* const* scratch, const cudaStream_t* streams,
                           int gpus, std::size_t count) {
    if (!ring_has_peer_access(gpus)) {
        readable::ring_allreduce(buffers, scratch, streams, gpus, count);
        return;
    }
    int caller_device = 0;
    CUDA_CHECK(cudaGetDevice(&caller_device));
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        CUDA_CHECK(cudaEventRecord(readable::step_done(g), streams[g]));
    }
    // The readable solution's chunks: reduce-scatter, then all-gather.
    for (int s = 0; s < gpus - 1; ++s)
        pull_step<true>(buffers, streams, gpus, count,
                        [=](int g) { return ((g - 1 - s) % gpus + gpus) % gpus; });
    for (int s = 0; s < gpus - 1; ++s)
        pull_step<false>(buffers, streams, gpus, count,
                         [=](int g) { return ((g - s) % gpus + gpus) % gpus; });
    CUDA_CHECK(cudaSetDevice(caller_device));
}

}  // namespace

void ring_allreduce(float* const* buffers, float* const* scratch, const cudaStream_t* streams,
                    int gpus, std::size_t count) {
    ring_allreduce_on_sms(buffers, scratch, streams, gpus, count);
}

void ring_allreduce(int* const* buffers, int* const* scratch, const cudaStream_t* streams, int gpus,
                    std::size_t count) {
    ring_allreduce_on_sms(buffers, scratch, streams, gpus, count);
}
