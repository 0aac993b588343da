// 11_multi_gpu/ring_allreduce: the sum of one buffer per GPU, left on every GPU, by a ring.
//
// Teaches: the ring all-reduce, the collective behind data-parallel training. Cut the buffers
// into one chunk per GPU. Reduce-scatter: in gpus - 1 steps each GPU pulls a chunk from its left
// neighbour (a peer-to-peer copy) and adds it into its own copy with your kernel, so that each
// GPU ends with the full sum of one chunk. All-gather: in gpus - 1 more steps the finished chunks
// travel around the ring. Each GPU works on a stream of its own; order the steps across GPUs with
// CUDA events, not with host synchronization. Timed against ncclAllReduce as bus bandwidth
// (notes/11_multi_gpu.md).
//
// Run:  grader run 11/ring_allreduce      Stuck:  grader hint 11/ring_allreduce
// Contract: ring_allreduce.h              Notes:  notes/11_multi_gpu.md
// Needs 2 GPUs of one machine; with fewer the grader reports skipped, with the reason.
#include <algorithm>

#include "course/exercise.h"
#include "ring_allreduce.h"

namespace {

constexpr int kMaxGpus = 64;      // one event per GPU, kept between calls

// dst[i] += src[i] for i < n: the reduction of one step, on the receiving GPU.
template <typename T>
__global__ void add_into_kernel(T* dst, const T* src, std::size_t n) {
    // TODO: a grid-stride loop over i < n (std::size_t indices: n can be large).
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
    // TODO: first, for every GPU g (cudaSetDevice(g)): its stream, streams[g], waits
    //       (cudaStreamWaitEvent) for step_done of its left neighbour, (g + gpus - 1) % gpus:
    //       the chunk it pulls now was finished there in the previous step. Enqueue all the
    //       waits before any record of this step (a wait takes the event's latest record).
    for (int g = 0; g < gpus; ++g) {
        const Chunk chunk = Chunk::of(chunk_for(g), gpus, count);
        CUDA_CHECK(cudaSetDevice(g));
        // TODO: the chunk's copy from the left neighbour's buffer, buffers[(g + gpus - 1) % gpus]
        //       (cudaMemcpyPeerAsync, on streams[g]): into scratch[g], then add_into its own
        //       copy, when reduce; else straight into its own copy. Skip an empty chunk. Last,
        //       record step_done(g) on streams[g], empty chunk or not.
    }
}

template <typename T>
void ring_allreduce_typed(T* const* buffers, T* const* scratch, const cudaStream_t* streams,
                          int gpus, std::size_t count) {
    // TODO: remember the current device (cudaGetDevice), and give it back at the end.
    // Step "-1": what the caller enqueued on each GPU (the inputs) is done before a neighbour
    // pulls from it.
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        CUDA_CHECK(cudaEventRecord(step_done(g), streams[g]));
    }
    // Reduce-scatter, gpus - 1 ring steps.
    for (int s = 0; s < gpus - 1; ++s)
        ring_step(
            buffers, scratch, streams, gpus, count,
            [=](int g) {
                // TODO: the chunk GPU g receives at step s: (g - 1 - s) mod gpus, the remainder
                //       kept non-negative. Which chunk holds the full sum on GPU g at the end?
                return g;
            },
            true);
    // All-gather, gpus - 1 ring steps without the add.
    for (int s = 0; s < gpus - 1; ++s)
        ring_step(
            buffers, scratch, streams, gpus, count,
            [=](int g) {
                // TODO: the chunk GPU g receives at step s: (g - s) mod gpus.
                return g;
            },
            false);
    COURSE_TODO("ring_allreduce: write the kernel, the ring step and the two phases' chunks, then "
                "delete this line");
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
