// 11_multi_gpu/data_parallel_step: one rank's gradients summed over the ranks in buckets, while
// its backward pass goes on. Reference solution.
//
// Teaches: overlapping communication with computation. The backward finishes the last layers'
// gradients first; each time enough of them are finished to fill a bucket, their all-reduce goes
// on a stream of its own, behind an event that marks the backward's work so far, and runs while
// the backward computes the layers below. Buckets, because one all-reduce per tensor pays NCCL's
// launch and latency (tens of microseconds) hundreds of times, and one for everything cannot
// start before the backward ends. The optimizer, on the backward's stream, waits for the last
// bucket through a second event. The trainer runs this on every GPU of a data-parallel run.
//
// Run:  grader run 11/data_parallel_step --solutions     (needs 2 GPUs of one machine)
// Contract: data_parallel_step.h          Notes:  notes/11_multi_gpu.md
#include "course/exercise.h"
#include "course/nccl.h"
#include "data_parallel_step.h"

namespace {

// Hands the pending spans to NCCL: their all-reduces on the communication stream, after
// everything the backward has enqueued so far (which includes their last writes).
void flush(GradientReducer& reducer) {
    if (reducer.pending.empty()) return;
    // A wait takes the event's latest record, at the time of the wait: one event serves every
    // bucket, recorded and waited on right away.
    CUDA_CHECK(cudaEventRecord(reducer.ready, reducer.compute));
    CUDA_CHECK(cudaStreamWaitEvent(reducer.communication, reducer.ready, 0));
    // One group: NCCL launches the bucket's all-reduces together instead of one by one.
    NCCL_CHECK(ncclGroupStart());
    for (const GradientSpan& span : reducer.pending)
        NCCL_CHECK(ncclAllReduce(span.data, span.data, span.count, ncclFloat32, ncclSum,
                                 reducer.comm, reducer.communication));
    NCCL_CHECK(ncclGroupEnd());
    reducer.pending.clear();
    reducer.pending_bytes = 0;
}

}  // namespace

void gradients_ready(GradientReducer& reducer, const GradientSpan* spans, int n) {
    for (int i = 0; i < n; ++i) {
        reducer.pending.push_back(spans[i]);
        reducer.pending_bytes += spans[i].count * sizeof(float);
    }
    if (reducer.pending_bytes >= reducer.bucket_bytes) flush(reducer);
}

void gradients_finish(GradientReducer& reducer) {
    flush(reducer);
    // The optimizer runs on the compute stream: it must not read a gradient before its sum.
    CUDA_CHECK(cudaEventRecord(reducer.reduced, reducer.communication));
    CUDA_CHECK(cudaStreamWaitEvent(reducer.compute, reducer.reduced, 0));
}
