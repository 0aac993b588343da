// trainer/data_parallel: the processes of a data-parallel run and their one collective, NCCL's
// all-reduce of the gradients (data_parallel.h). Built with NCCL where CMake found it
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

#if COURSE_HAVE_NCCL
void nccl_check(ncclResult_t result, const char* what) {
    if (result != ncclSuccess)
        throw std::runtime_error(std::string("NCCL: ") + what + ": " + ncclGetErrorString(result));
}
#endif

}  // namespace

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
      scalar_(other.scalar_) {
    other.comm_ = nullptr;
    other.scalar_ = nullptr;
}

DataParallel::~DataParallel() {
    if (scalar_) cudaFree(scalar_);
#if COURSE_HAVE_NCCL
    if (comm_) ncclCommDestroy(static_cast<ncclComm_t>(comm_));
#endif
}

void DataParallel::join() {
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
        nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
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
    nccl_check(ncclCommInitRank(&comm, world_, id, rank_), "ncclCommInitRank");
    comm_ = comm;
    CUDA_CHECK(cudaMalloc(&scalar_, sizeof(float)));
#endif
}

void DataParallel::sum(float* data, std::size_t n) {
    if (!comm_) return;
#if COURSE_HAVE_NCCL
    nccl_check(
        ncclAllReduce(data, data, n, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm_), 0),
        "ncclAllReduce");
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
