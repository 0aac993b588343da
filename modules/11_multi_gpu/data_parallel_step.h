// Contract of 11_multi_gpu/data_parallel_step. Read-only: the checker and the trainer
// (train_gpt on several GPUs, trainer/data_parallel.cu) call exactly this.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <vector>

// A stretch of one rank's gradients: `count` floats (count >= 1) from the device pointer `data`.
struct GradientSpan {
    float* data;
    std::size_t count;
};

// One rank of a data-parallel run (one process or thread per GPU, each with its own
// communicator): its gradients summed over all the ranks while its backward pass goes on.
struct GradientReducer {
    // Set by the caller, read-only for you.
    ncclComm_t comm;             // this rank's communicator
    cudaStream_t compute;        // the stream the backward runs on, and later the optimizer
    cudaStream_t communication;  // for your all-reduces: made by the caller, non-blocking (no
                                 // implicit synchronization with the legacy default stream)
                                 // and of the highest priority
    cudaEvent_t ready;           // two events of this rank's GPU, made by the caller without
    cudaEvent_t reduced;         // timing, for you to record and wait on
    std::size_t bucket_bytes;    // hand the pending spans to NCCL once they add up to this many
                                 // bytes (or more)

    // Yours: the spans handed to gradients_ready and not yet to NCCL. The caller makes the
    // reducer with both empty and never touches them.
    std::vector<GradientSpan> pending;
    std::size_t pending_bytes = 0;
};

// The backward calls this each time it has enqueued on `compute` the LAST writes of some
// gradients (the last layers' first): once that work has run, `spans` hold this rank's final
// gradients, and they will not be written again in this backward pass. Hand them to NCCL in
// buckets: every span, once, summed in place over the ranks (ncclAllReduce, ncclSum, float32),
// on the communication stream, never before the backward's writes to it; when this call returns,
// fewer than bucket_bytes must be pending. Return without waiting for the GPU.
// Every rank calls it with the same spans in the same order (the same model).
void gradients_ready(GradientReducer& reducer, const GradientSpan* spans, int n);

// Called once after the backward, when every span has been handed to gradients_ready: the rest
// of the spans to NCCL, and `compute` made to wait for every all-reduce, so that what the caller
// enqueues on it next (the optimizer) reads the sums. Return without waiting for the GPU; leave
// nothing pending (the next step reuses the reducer).
void gradients_finish(GradientReducer& reducer);
