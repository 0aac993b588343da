// Data parallelism for train_gpt: one process per GPU of this machine, each training on its own
// share of every step's batch, the gradients summed across the processes by NCCL before the
// optimizer step, so that every process takes the same step and keeps the same weights.
//
// The processes find each other through the environment that trainer/launch.sh sets: RANK (0 to
// WORLD_SIZE - 1: this process, and the GPU it takes), WORLD_SIZE, and RENDEZVOUS, a fresh folder
// where rank 0 writes NCCL's unique id for the others to read (a rendezvous without MPI). Without
// RENDEZVOUS, train_gpt is one process on GPU 0 and NCCL is not called.
//
// How the gradients are summed (GradientSum): by default in buckets while the backward goes on
// (module 11's data_parallel_step, its reference solution); or in one all-reduce after the
// backward; or, with the optimizer sharded (ZeRO-1), reduce-scattered after the backward so that
// each process gets the sum of the slice it updates, the new weights all-gathered after.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "gpt.h"

namespace trainer {

enum class GradientSum {
    overlapped,      // buckets all-reduced during the backward (data_parallel_step)
    after_backward,  // one all-reduce of everything after the backward
    sharded,         // ZeRO-1: one reduce-scatter after the backward, the optimizer sharded
};

class DataParallel : public Collectives {
  public:
    // Reads RANK, WORLD_SIZE and RENDEZVOUS. Touches no GPU; throws std::invalid_argument with
    // one line for values that do not fit together, or for several processes in a build without
    // NCCL.
    static DataParallel from_environment();
    DataParallel(DataParallel&& other) noexcept;
    DataParallel& operator=(DataParallel&&) = delete;
    ~DataParallel() override;

    int rank() const override { return rank_; }
    int processes() const override { return world_; }
    // Rank 0 prints, validates, samples and saves; the others only train.
    bool main() const { return rank_ == 0; }

    // Makes this rank's GPU current and, with a rendezvous, joins the other ranks (rank 0
    // writes the id; the others wait for it, for two minutes at most), then sets up the way the
    // gradients are summed (overlapped: buckets of bucket_bytes). Call before any other CUDA call.
    void join(GradientSum how, std::size_t bucket_bytes);
    GradientSum gradient_sum() const { return how_; }

    // For the backward of a step's last micro-batch: hears of its finished gradients and hands
    // them to NCCL in buckets. Empty (nothing to call) unless the sum is overlapped.
    GradientsFinished gradients_finished();
    // After the step's backward: the gradients (the model's device_grads(), its
    // gradient_slice() floats per shard) summed across the processes; sharded, each rank's slice
    // of them only. With one process, nothing to do.
    void sum_gradients(float* grads, std::size_t slice);

    // Collectives (gpt.h), on the default stream; with one process, nothing to do.
    void sum(float* data, std::size_t n) override;
    void all_gather(void* data, std::size_t slice_bytes) override;
    // The mean of one value over the ranks (a step's loss); the value itself with one process.
    float mean(float value);

  private:
    DataParallel() = default;
    int rank_ = 0, world_ = 1;
    std::string rendezvous_;   // empty: one process, no NCCL
    void* comm_ = nullptr;     // ncclComm_t, where this build has NCCL
    float* scalar_ = nullptr;  // one float on the GPU, for mean()
    GradientSum how_ = GradientSum::after_backward;
    struct Overlap;            // the reducer of data_parallel_step and its streams (overlapped)
    std::unique_ptr<Overlap> overlap_;
};

}  // namespace trainer
