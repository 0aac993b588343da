// 11_multi_gpu/ring_allreduce: the sum of one buffer per GPU, left on every GPU, by a ring.
// Reference solution.
//
// Teaches: the ring all-reduce, the collective behind data-parallel training. The buffers are cut
// into one chunk per GPU. Reduce-scatter: in gpus - 1 steps each GPU pulls a chunk from its left
// neighbour and adds it into its own copy, so that each GPU ends with the full sum of one chunk.
// All-gather: in gpus - 1 more steps the finished chunks travel around the ring. Each GPU sends
// and receives 2 (gpus - 1) / gpus of the buffer, whatever the number of GPUs: that is why the
// ring is bandwidth-optimal. The steps are ordered across GPUs with CUDA events, never with a
// host synchronization. Timed against ncclAllReduce as bus bandwidth (notes/11_multi_gpu.md).
//
// Run:  grader run 11/ring_allreduce --solutions     (needs 2 GPUs of one machine)
// Contract: ring_allreduce.h              Notes:  notes/11_multi_gpu.md
#include <algorithm>

#include "course/exercise.h"
#include "ring_allreduce.h"

namespace {

constexpr int kMaxGpus = 64;      // one event per GPU, kept between calls

// dst[i] += src[i] for i < n: the reduction of one step, on the receiving GPU.
template <typename T>
__global__ void add_into_kernel(T* dst, const T* src, std::size_t n) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        dst[i] += src[i];
}

template <typename T>
void add_into(T* dst, const T* src, std::size_t n, cudaStream_t stream) {
    constexpr int kThreads = 256;
    constexpr int kMaxBlocks = 4096;  // enough to fill any GPU; a grid-stride loop does the rest
    const int blocks =
        static_cast<int>(std::min<std::size_t>(course::ceil_div(n, kThreads), kMaxBlocks));
    add_into_kernel<<<blocks, kThreads, 0, stream>>>(dst, src, n);
    CUDA_CHECK_LAUNCH();
}

// Chunk c of the buffer: elements [begin, begin + size). The last chunks may be shorter, or
// empty when count < gpus.
struct Chunk {
    std::size_t begin;
    std::size_t size;

    static Chunk of(int c, int gpus, std::size_t count) {
        const std::size_t per_chunk = course::ceil_div(count, static_cast<std::size_t>(gpus));
        const std::size_t begin = std::min(count, c * per_chunk);
        return {begin, std::min(count, begin + per_chunk) - begin};
    }
};

// The event GPU g records when its part of a step is done. Created on the first call, with GPU g
// current (an event belongs to the device that creates it: record step_done(g) on every GPU
// before any GPU waits on its neighbour's); no timing, so recording is cheap.
cudaEvent_t step_done(int g) {
    static cudaEvent_t events[kMaxGpus] = {};
    if (!events[g]) CUDA_CHECK(cudaEventCreateWithFlags(&events[g], cudaEventDisableTiming));
    return events[g];
}

// One step of the ring: GPU g pulls chunk chunk_for(g) from its left neighbour, into scratch[g]
// when reduce (then adds it into its own copy), else straight into its own copy.
template <typename T, typename ChunkFor>
void ring_step(T* const* buffers, T* const* scratch, const cudaStream_t* streams, int gpus,
               std::size_t count, ChunkFor chunk_for, bool reduce) {
    // First every GPU waits for its left neighbour's previous step, whose result it pulls now.
    // All the waits go in before any record of this step: a wait takes the event's latest record.
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        CUDA_CHECK(cudaStreamWaitEvent(streams[g], step_done((g + gpus - 1) % gpus), 0));
    }
    for (int g = 0; g < gpus; ++g) {
        const int left = (g + gpus - 1) % gpus;
        const Chunk chunk = Chunk::of(chunk_for(g), gpus, count);
        CUDA_CHECK(cudaSetDevice(g));
        if (chunk.size > 0) {
            T* own = buffers[g] + chunk.begin;
            T* landing = reduce ? scratch[g] : own;
            // The receiver pulls, on its own stream: the copy, then the add, in order.
            CUDA_CHECK(cudaMemcpyPeerAsync(landing, g, buffers[left] + chunk.begin, left,
                                           chunk.size * sizeof(T), streams[g]));
            if (reduce) add_into(own, landing, chunk.size, streams[g]);
        }
        CUDA_CHECK(cudaEventRecord(step_done(g), streams[g]));
    }
}

template <typename T>
void ring_allreduce_typed(T* const* buffers, T* const* scratch, const cudaStream_t* streams,
                          int gpus, std::size_t count) {
    int caller_device = 0;
    CUDA_CHECK(cudaGetDevice(&caller_device));
    // Step "-1": what the caller enqueued on each GPU (the inputs) is done before a neighbour
    // pulls from it.
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        CUDA_CHECK(cudaEventRecord(step_done(g), streams[g]));
    }
    // Reduce-scatter. At step s GPU g receives chunk (g - 1 - s) mod gpus, which its left
    // neighbour added into at step s - 1: after gpus - 1 steps GPU g holds the full sum of chunk
    // (g + 1) mod gpus. (+ gpus keeps the remainder of a negative number non-negative.)
    for (int s = 0; s < gpus - 1; ++s)
        ring_step(
            buffers, scratch, streams, gpus, count,
            [=](int g) { return ((g - 1 - s) % gpus + gpus) % gpus; }, true);
    // All-gather. At step s GPU g receives chunk (g - s) mod gpus, finished on its left
    // neighbour (its own full sum at s = 0, received at step s - 1 after that).
    for (int s = 0; s < gpus - 1; ++s)
        ring_step(
            buffers, scratch, streams, gpus, count,
            [=](int g) { return ((g - s) % gpus + gpus) % gpus; }, false);
    CUDA_CHECK(cudaSetDevice(caller_device));
}

}  // namespace

void ring_allreduce(float* const* buffers, float* const* scratch, const cudaStream_t* streams,
                    int gpus, std::size_t count) {
    ring_allreduce_typed(buffers, scratch, streams, gpus, count);
}

void ring_allreduce(int* const* buffers, int* const* scratch, const cudaStream_t* streams, int gpus,
                    std::size_t count) {
    ring_allreduce_typed(buffers, scratch, streams, gpus, count);
}
