#include "course/buffer.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "course/check.h"

namespace course {

namespace {

constexpr unsigned char kCanary = 0xA5;

// Element-wise poison fill: element bytes are the first `element_bytes` bytes of `pattern`.
__global__ void fill_pattern_kernel(unsigned char* bytes, std::size_t count,
                                    std::size_t element_bytes, std::uint64_t pattern) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        bytes[i] = static_cast<unsigned char>(pattern >> (8 * (i % element_bytes)));
    }
}

// Describes the damaged bytes of one redzone, or returns "" when it is intact.
std::string damage(const std::vector<unsigned char>& zone, bool after) {
    std::size_t changed = 0, nearest = zone.size();
    for (std::size_t i = 0; i < zone.size(); ++i) {
        if (zone[i] == kCanary) continue;
        ++changed;
        // distance from the payload: after it, byte 0 is adjacent; before it, the last byte is.
        const std::size_t distance = after ? i : zone.size() - 1 - i;
        nearest = std::min(nearest, distance);
    }
    if (changed == 0) return "";
    return std::to_string(changed) + " bytes changed, the nearest " + std::to_string(nearest) +
           " bytes " + (after ? "after the last element" : "before the first element");
}

}  // namespace

DeviceAllocation::DeviceAllocation(std::string name, std::size_t bytes, std::size_t element_bytes,
                                   std::uint64_t poison_bits)
    : name_(std::move(name)), bytes_(bytes), element_bytes_(element_bytes), poison_(poison_bits) {
    CUDA_CHECK(cudaMalloc(&base_, bytes_ + 2 * kRedzoneBytes));
    CUDA_CHECK(cudaMemset(base_, kCanary, kRedzoneBytes));
    CUDA_CHECK(cudaMemset(static_cast<char*>(data()) + bytes_, kCanary, kRedzoneBytes));
    poison();
}

DeviceAllocation::~DeviceAllocation() {
    if (!base_) return;
    // Every buffer's redzones are checked when it goes, as a failure of the running test. Not
    // while an exception unwinds the test (a todo stub, a CUDA error: the test has failed
    // already, and a poisoned context cannot be read), and nothing thrown from here.
    if (std::uncaught_exceptions() == 0 && testing::UnitTest::GetInstance()->current_test_info()) {
        try {
            EXPECT_TRUE(redzones_intact());
        } catch (const std::exception&) {
            // a sticky CUDA error: the test that caused it reports it
        }
    }
    cudaFree(base_);
}

DeviceAllocation::DeviceAllocation(DeviceAllocation&& other) noexcept
    : name_(std::move(other.name_)),
      bytes_(other.bytes_),
      element_bytes_(other.element_bytes_),
      poison_(other.poison_),
      base_(std::exchange(other.base_, nullptr)) {}

void DeviceAllocation::poison() {
    if (bytes_ == 0) return;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<std::size_t>(ceil_div(bytes_, threads), 4096));
    fill_pattern_kernel<<<blocks, threads>>>(static_cast<unsigned char*>(data()), bytes_,
                                             element_bytes_, poison_);
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceAllocation::upload(const void* host, std::size_t bytes) {
    CUDA_CHECK(cudaMemcpy(data(), host, bytes, cudaMemcpyHostToDevice));
}

void DeviceAllocation::download(void* host, std::size_t bytes) const {
    // Synchronizes with the default stream, so errors of the code under test surface here.
    CUDA_CHECK(cudaMemcpy(host, data(), bytes, cudaMemcpyDeviceToHost));
}

testing::AssertionResult DeviceAllocation::redzones_intact() {
    std::vector<unsigned char> before(kRedzoneBytes), after(kRedzoneBytes);
    char* payload = static_cast<char*>(data());
    CUDA_CHECK(
        cudaMemcpy(before.data(), payload - kRedzoneBytes, kRedzoneBytes, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(after.data(), payload + bytes_, kRedzoneBytes, cudaMemcpyDeviceToHost));
    const std::string past_end = damage(after, true), before_start = damage(before, false);
    if (past_end.empty() && before_start.empty()) return testing::AssertionSuccess();

    CUDA_CHECK(cudaMemset(payload - kRedzoneBytes, kCanary, kRedzoneBytes));
    CUDA_CHECK(cudaMemset(payload + bytes_, kCanary, kRedzoneBytes));
    auto failure = testing::AssertionFailure();
    if (!past_end.empty())
        failure << "wrote past the end of `" << name_ << "` (" << bytes_ / element_bytes_
                << " elements): " << past_end << ". Is there an `if (i < n)` guard on every store?";
    if (!before_start.empty())
        failure << (past_end.empty() ? "" : "; ") << "wrote before the start of `" << name_
                << "`: " << before_start << ". Is an index negative?";
    return failure;
}

}  // namespace course
