// trainer/data_parallel: the processes of a data-parallel run and their collectives: the
// gradients' sum (overlapped with the backward through module 11's data_parallel_step, or after
// it), and a sharded optimizer's (data_parallel.h). Built with NCCL where CMake found it
// (COURSE_HAVE_NCCL); without it, a single process only.
#include "data_parallel.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "course/exercise.h"  // CUDA_CHECK

#if COURSE_HAVE_NCCL
#include <nccl.h>

#include "course/nccl.h"
#include "data_parallel_step.h"  // modules/11_multi_gpu: its reference solution is linked
#endif

namespace trainer {
namespace {

// An environment variable as a whole number, or `fallback` where it is unset.
int environment_int(const char* name, int fallback) {
    const char* text = std::getenv(name);
    if (!text || !*text) return fallback;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value < 0 || value > 1 << 20)
        throw std::invalid_argument(std::string(name) + "=" + text + ": a whole number, please");
    return static_cast<int>(value);
}

}  // namespace

#if COURSE_HAVE_NCCL
// The gradients' sum overlapped with the backward: module 11's reducer, with the streams and
// events its contract asks of the caller. The backward runs on the legacy default stream.
struct DataParallel::Overlap {
    GradientReducer reducer{};

    Overlap(ncclComm_t comm, std::size_t bucket_bytes) {
        int least = 0, greatest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        reducer.comm = comm;
        reducer.compute = cudaStreamLegacy;
        CUDA_CHECK(cudaStreamCreateWithPriority(&reducer.communication, cudaStreamNonBlocking,
                                                greatest));
        CUDA_CHECK(cudaEventCreateWithFlags(&reducer.ready, cudaEventDisableTiming));
        CUDA_CHECK(cudaEventCreateWithFlags(&reducer.reduced, cudaEventDisableTiming));
        reducer.bucket_bytes = bucket_bytes;
    }
    ~Overlap() {
        cudaEventDestroy(reducer.ready);
        cudaEventDestroy(reducer.reduced);
        cudaStreamDestroy(reducer.communication);
    }
    Overlap(const Overlap&) = delete;
    Overlap& operator=(const Overlap&) = delete;
};
#else
struct DataParallel::Overlap {};
#endif

DataParallel DataParallel::from_environment() {
    DataParallel ranks;
    const char* rendezvous = std::getenv("RENDEZVOUS");
    ranks.rendezvous_ = rendezvous ? rendezvous : "";
    ranks.world_ = environment_int("WORLD_SIZE", 1);
    ranks.rank_ = environment_int("RANK", 0);
    if (ranks.world_ < 1) throw std::invalid_argument("WORLD_SIZE=0: at least one process");
    if (ranks.rank_ >= ranks.world_)
        throw std::invalid_argument("RANK=" + std::to_string(ranks.rank_) +
                                    " with WORLD_SIZE=" + std::to_string(ranks.world_) +
                                    ": ranks go from 0 to " + std::to_string(ranks.world_ - 1));
    if (ranks.world_ > 1 && ranks.rendezvous_.empty())
        throw std::invalid_argument("WORLD_SIZE=" + std::to_string(ranks.world_) +
                                    " without RENDEZVOUS: start the processes with "
                                    "trainer/launch.sh");
#if !COURSE_HAVE_NCCL
    if (!ranks.rendezvous_.empty())
        throw std::invalid_argument(
            "this train_gpt was built without NCCL, so it runs as one process: pip install "
            "nvidia-nccl-cu13, set COURSE_NCCL_ROOT to its nvidia/nccl folder and rebuild");
#endif
    return ranks;
}

DataParallel::DataParallel(DataParallel&& other) noexcept
    : rank_(other.rank_),
      world_(other.world_),
      rendezvous_(std::move(other.rendezvous_)),
      comm_(other.comm_),
      scalar_(other.scalar_),
      how_(other.how_),
      overlap_(std::move(other.overlap_)) {
    other.comm_ = nullptr;
    other.scalar_ = nullptr;
}

DataParallel::~DataParallel() {
    overlap_.reset();
    if (scalar_) cudaFree(scalar_);
#if COURSE_HAVE_NCCL
    if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
#endif
}

void DataParallel::join(GradientSum how, std::size_t bucket_bytes) {
    how_ = how;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
        throw std::runtime_error("no CUDA GPU is visible: the trainer needs one");
    if (rank_ >= devices)
        throw std::runtime_error("rank " + std::to_string(rank_) + " needs GPU " +
                                 std::to_string(rank_) + ", this machine shows " +
                                 std::to_string(devices) + " (WORLD_SIZE at most that)");
    CUDA_CHECK(cudaSetDevice(rank_));
    if (rendezvous_.empty()) return;
#if COURSE_HAVE_NCCL
    // Rank 0 writes the id under another name and renames it: a reader never sees half of it.
    const std::filesystem::path id_path = std::filesystem::path(rendezvous_) / "nccl_id";
    ncclUniqueId id{};
    if (rank_ == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        const std::filesystem::path partial = id_path.string() + ".partial";
        std::ofstream(partial, std::ios::binary).write(id.internal, sizeof id.internal);
        std::filesystem::rename(partial, id_path);
    } else {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
        while (!std::filesystem::exists(id_path)) {
            if (std::chrono::steady_clock::now() > deadline)
                throw std::runtime_error(id_path.string() +
                                         ": rank 0 wrote no NCCL id in two minutes (did it fail?)");
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        std::ifstream(id_path, std::ios::binary).read(id.internal, sizeof id.internal);
    }
    ncclComm_t comm = nullptr;
    NCCL_CHECK(ncclCommInitRank(&comm, world_, id, rank_));
    comm_ = comm;
    CUDA_CHECK(cudaMalloc(&scalar_, sizeof(float)));
    if (how_ == GradientSum::overlapped) overlap_ = std::make_unique<Overlap>(comm, bucket_bytes);
#else
    (void)bucket_bytes;
#endif
}

GradientsFinished DataParallel::gradients_finished() {
    if (!overlap_) return nullptr;
#if COURSE_HAVE_NCCL
    return [this](const std::vector<GradientRange>& finished) {
        std::vector<GradientSpan> spans;
        for (const GradientRange& range : finished) spans.push_back({range.data, range.count});
        gradients_ready(overlap_->reducer, spans.data(), static_cast<int>(spans.size()));
    };
#else
    return nullptr;
#endif
}

void DataParallel::sum_gradients(float* grads, std::size_t slice) {
    if (!comm_) return;
#if COURSE_HAVE_NCCL
    const auto comm = static_cast<ncclComm_t>(comm_);
    switch (how_) {
        case GradientSum::overlapped:
            gradients_finish(overlap_->reducer);
            break;
        case GradientSum::after_backward:  // not sharded: one slice is all of them
            NCCL_CHECK(ncclAllReduce(grads, grads, slice, ncclFloat32, ncclSum, comm, 0));
            break;
        case GradientSum::sharded:  // in place: this rank's slice gets that slice's sum
            NCCL_CHECK(ncclReduceScatter(grads, grads + rank_ * slice, slice, ncclFloat32, ncclSum,
                                         comm, 0));
            break;
    }
#else
    (void)grads;
    (void)slice;
#endif
}

void DataParallel::sum(float* data, std::size_t n) {
    if (!comm_) return;
#if COURSE_HAVE_NCCL
    NCCL_CHECK(
        ncclAllReduce(data, data, n, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_), 0));
#endif
}

void DataParallel::all_gather(void* data, std::size_t slice_bytes) {
    if (!comm_) return;
#if COURSE_HAVE_NCCL
    // In place: this rank's slice is already where the others' copies of it go.
    char* bytes = static_cast<char*>(data);
    NCCL_CHECK(ncclAllGather(bytes + rank_ * slice_bytes, bytes, slice_bytes, ncclUint8,
                             static_cast<ncclComm_t>(comm_), 0));
#endif
}

float DataParallel::mean(float value) {
    if (!comm_) return value;
    CUDA_CHECK(cudaMemcpy(scalar_, &value, sizeof value, cudaMemcpyHostToDevice));
    sum(scalar_, 1);
    CUDA_CHECK(cudaMemcpy(&value, scalar_, sizeof value, cudaMemcpyDeviceToHost));
    return value / world_;
}

}  // namespace trainer
