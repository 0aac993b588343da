// Data parallelism for train_gpt: one process per GPU of this machine, each training on its own
// share of every step's batch, the gradients summed across the processes by NCCL before the
// optimizer step, so that every process takes the same step and keeps the same weights.
//
// The processes find each other through the environment that trainer/launch.sh sets: RANK (0 to
// WORLD_SIZE - 1: this process, and the GPU it takes), WORLD_SIZE, and RENDEZVOUS, a fresh folder
// where rank 0 writes NCCL's unique id for the others to read (a rendezvous without MPI). Without
// RENDEZVOUS, train_gpt is one process on GPU 0 and NCCL is not called.
#pragma once

#include <cstddef>
#include <string>

namespace trainer {

class DataParallel {
  public:
    // Reads RANK, WORLD_SIZE and RENDEZVOUS. Touches no GPU; throws std::invalid_argument with
    // one line for values that do not fit together, or for several processes in a build without
    // NCCL.
    static DataParallel from_environment();
    DataParallel(DataParallel&& other) noexcept;
    DataParallel& operator=(DataParallel&&) = delete;
    ~DataParallel();

    int rank() const { return rank_; }
    int world() const { return world_; }
    // Rank 0 prints, validates, samples and saves; the others only train.
    bool main() const { return rank_ == 0; }

    // Makes this rank's GPU current and, with a rendezvous, joins the other ranks (rank 0
    // writes the id; the others wait for it, for two minutes at most). Call before any other
    // CUDA call.
    void join();
    // n floats summed across the ranks, in place, on the default stream; with one process,
    // nothing to do.
    void sum(float* data, std::size_t n);
    // The mean of one value over the ranks (a step's loss); the value itself with one process.
    float mean(float value);

  private:
    DataParallel() = default;
    int rank_ = 0, world_ = 1;
    std::string rendezvous_;   // empty: one process, no NCCL
    void* comm_ = nullptr;     // ncclComm_t, where this build has NCCL
    float* scalar_ = nullptr;  // one float on the GPU, for mean()
};

}  // namespace trainer
