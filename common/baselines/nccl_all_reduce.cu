// NCCL's all-reduce, the library baseline of module 11's ring_allreduce: what every training
// stack calls to sum gradients across GPUs. One process drives every GPU (ncclCommInitAll), as the
// exercise does; the communicators are made once per GPU count, so that warm-up pays for them
// and timed samples measure only the collective.
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "course/check.h"
#include "library.h"

#if COURSE_HAVE_NCCL
#include <nccl.h>
#endif

namespace course::baseline::library {

#if COURSE_HAVE_NCCL

namespace {

void nccl_check(ncclResult_t status, const char* expression) {
    if (status != ncclSuccess)
        throw std::runtime_error(std::string("NCCL error ") + ncclGetErrorString(status) + " in `" +
                                 expression + "`");
}

// One communicator per GPU 0 .. gpus-1, in one clique; kept for the life of the process.
const std::vector<ncclComm_t>& communicators(int gpus) {
    static std::map<int, std::vector<ncclComm_t>> cliques;
    auto found = cliques.find(gpus);
    if (found != cliques.end()) return found->second;
    std::vector<ncclComm_t> comms(gpus);
    nccl_check(ncclCommInitAll(comms.data(), gpus, nullptr), "ncclCommInitAll");
    return cliques.emplace(gpus, std::move(comms)).first->second;
}

}  // namespace

bool nccl_available() { return true; }

void nccl_all_reduce_sum(void* const* buffers, int gpus, std::size_t count, Element element) {
    const auto& comms = communicators(gpus);
    const ncclDataType_t type = element == Element::float32 ? ncclFloat32 : ncclInt32;
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    // One call per GPU inside a group: NCCL launches them together (a single thread calling
    // them one by one outside a group would wait forever on the first).
    nccl_check(ncclGroupStart(), "ncclGroupStart");
    for (int g = 0; g < gpus; ++g) {
        CUDA_CHECK(cudaSetDevice(g));
        nccl_check(
            ncclAllReduce(buffers[g], buffers[g], count, type, ncclSum, comms[g], cudaStreamLegacy),
            "ncclAllReduce");
    }
    nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    CUDA_CHECK(cudaSetDevice(current));
}

#else

bool nccl_available() { return false; }

void nccl_all_reduce_sum(void* const*, int, std::size_t, Element) {
    throw std::runtime_error(
        "nccl_all_reduce_sum: the course was built without NCCL (set COURSE_NCCL_ROOT)");
}

#endif

}  // namespace course::baseline::library
