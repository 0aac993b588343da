// 11_multi_gpu/data_parallel_step: one rank's gradients summed over the ranks in buckets, while
// its backward pass goes on.
//
// Teaches: overlapping communication with computation. The backward finishes the last layers'
// gradients first; each time enough of them are finished to fill a bucket, their all-reduce goes
// on a stream of its own, behind an event that marks the backward's work so far, and runs while
// the backward computes the layers below. The optimizer, on the backward's stream, waits for the
// last bucket through a second event. Timed against the same all-reduce after the backward.
//
// Run:  grader run 11/data_parallel_step      Stuck:  grader hint 11/data_parallel_step
// Contract: data_parallel_step.h              Notes:  notes/11_multi_gpu.md
// Needs 2 GPUs of one machine, and NCCL; with fewer the grader reports skipped, with the reason.
#include "course/exercise.h"
#include "course/nccl.h"
#include "data_parallel_step.h"

namespace {

// Hands the pending spans to NCCL: their all-reduces on the communication stream, after
// everything the backward has enqueued so far (which includes their last writes).
void flush(GradientReducer& reducer) {
    // TODO: nothing pending, nothing to do.
    // TODO: record reducer.ready on the compute stream and make the communication stream wait
    //       for it (cudaEventRecord, cudaStreamWaitEvent): the all-reduces must not read a
    //       gradient before the backward has written it.
    // TODO: one ncclAllReduce per pending span (in place, float32, ncclSum, reducer.comm, on the
    //       communication stream), between ncclGroupStart() and ncclGroupEnd(), each in
    //       NCCL_CHECK. Then nothing is pending any more.
}

}  // namespace

void gradients_ready(GradientReducer& reducer, const GradientSpan* spans, int n) {
    COURSE_TODO("data_parallel_step: write flush, gradients_ready and gradients_finish, then "
                "delete this line");
    // TODO: add the spans to reducer.pending and their bytes to reducer.pending_bytes.
    if (reducer.pending_bytes >= reducer.bucket_bytes) flush(reducer);  // a bucket is full
}

void gradients_finish(GradientReducer& reducer) {
    // TODO: flush what is left, then make the compute stream wait for the communication
    //       stream's last all-reduce (record reducer.reduced there, wait for it on compute).
}
