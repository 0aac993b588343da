#include "course/buffer.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <utility>

#include "course/check.h"
#if !defined(COURSE_EMULATOR)
#include "end_guard.h"
#endif

namespace course {

namespace {

// Which byte of an 8-byte pattern the byte at `offset` (from an element boundary) holds: elements
// of 1, 2, 4 or 8 bytes take their first bytes, larger ones repeat the 8 bytes, and elements of
// a size that is not a power of two (none in the course) get the first byte throughout.
std::size_t pattern_mask(std::size_t element_bytes) {
    const bool power_of_two = (element_bytes & (element_bytes - 1)) == 0;
    return power_of_two ? std::min<std::size_t>(element_bytes, 8) - 1 : 0;
}

// Fills `count` bytes, which start on an element boundary, with the element pattern.
__global__ void fill_pattern_kernel(unsigned char* bytes, std::size_t count, std::size_t mask,
                                    std::uint64_t pattern) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        bytes[i] = static_cast<unsigned char>(pattern >> (8 * (i & mask)));
    }
}

void fill_pattern(void* bytes, std::size_t count, std::size_t element_bytes,
                  std::uint64_t pattern) {
    if (count == 0) return;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<std::size_t>(ceil_div(count, threads), 4096));
    fill_pattern_kernel<<<blocks, threads>>>(static_cast<unsigned char*>(bytes), count,
                                             pattern_mask(element_bytes), pattern);
    CUDA_CHECK_LAUNCH();
}

// Describes the damaged bytes of one redzone, or returns "" when it is intact.
std::string damage(const std::vector<unsigned char>& zone, std::size_t element_bytes,
                   std::uint64_t pattern, bool after) {
    const std::size_t mask = pattern_mask(element_bytes);
    std::size_t changed = 0, nearest = zone.size();
    for (std::size_t i = 0; i < zone.size(); ++i) {
        if (zone[i] == static_cast<unsigned char>(pattern >> (8 * (i & mask)))) continue;
        ++changed;
        // distance from the payload: after it, byte 0 is adjacent; before it, the last byte is.
        const std::size_t distance = after ? i : zone.size() - 1 - i;
        nearest = std::min(nearest, distance);
    }
    if (changed == 0) return "";
    return std::to_string(changed) + " bytes changed, the nearest " + std::to_string(nearest) +
           " bytes " + (after ? "after the last element" : "before the first element");
}

// The redzones of each allocation get a pattern of their own: the type's (redzone_pattern) with
// its low bits changed by a counter. A kernel that copies past the end of an input into the space
// past the end of an output (a transpose, a copy without their guards) then changes the output's
// redzone, which a pattern shared by every buffer would not show. The low 16 bits of a float's
// NaN pattern are part of its payload: it stays a quiet NaN.
std::uint64_t own_redzone_pattern(std::uint64_t pattern, std::size_t element_bytes) {
    static std::uint64_t allocations = 0;
    const std::uint64_t salt = ++allocations;
    return pattern ^ (element_bytes == 1 ? salt % 7 + 1 : (salt * 0x9E37) % 0xFFFF + 1);
}

}  // namespace

bool exact_allocations() {
    static const bool exact = [] {
        const char* value = std::getenv("COURSE_EXACT_ALLOCATIONS");
        return value && std::string(value) == "1";
    }();
    return exact;
}

DeviceAllocation::DeviceAllocation(std::string name, std::size_t bytes, std::size_t element_bytes,
                                   std::uint64_t poison_bits, std::uint64_t redzone_bits,
                                   Placement placement)
    : name_(std::move(name)),
      bytes_(bytes),
      element_bytes_(element_bytes),
      poison_(poison_bits),
      redzone_(own_redzone_pattern(redzone_bits, element_bytes)) {
#if defined(COURSE_EMULATOR)
    const std::size_t redzone = exact_allocations() ? 0 : kRedzoneBytes;
    (void)placement;
#else
    const std::size_t redzone = exact_allocations() ? 0 : end_guard::redzone_bytes();
    if (placement == Placement::end_guarded && bytes_ > 0 && end_guard::wanted(name_) &&
        end_guard::map(bytes_, redzone, mapping_)) {
        payload_ = mapping_.payload;
        before_bytes_ = redzone;
        // The rest of the last 16 bytes: the mapping ends there.
        after_bytes_ = ceil_div(bytes_, std::size_t{16}) * 16 - bytes_;
        end_guard::track(payload_, name_);
    }
#endif
    if (!payload_) {
        CUDA_CHECK(cudaMalloc(&base_, bytes_ + 2 * redzone));
        payload_ = static_cast<char*>(base_) + redzone;
        before_bytes_ = after_bytes_ = redzone;
    }
    fill_redzones();
    poison();
}

DeviceAllocation::~DeviceAllocation() {
    if (!payload_) return;
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
#if !defined(COURSE_EMULATOR)
    if (end_guarded()) {
        end_guard::untrack(payload_);
        end_guard::unmap(mapping_);
        return;
    }
#endif
    cudaFree(base_);
}

DeviceAllocation::DeviceAllocation(DeviceAllocation&& other) noexcept
    : name_(std::move(other.name_)),
      bytes_(other.bytes_),
      element_bytes_(other.element_bytes_),
      poison_(other.poison_),
      redzone_(other.redzone_),
      before_bytes_(other.before_bytes_),
      after_bytes_(other.after_bytes_),
      base_(std::exchange(other.base_, nullptr)),
      payload_(std::exchange(other.payload_, nullptr)),
      mapping_(std::exchange(other.mapping_, {})) {}

void DeviceAllocation::fill_redzones() const {
    fill_pattern(before(), before_bytes_, element_bytes_, redzone_);
    fill_pattern(after(), after_bytes_, element_bytes_, redzone_);
}

void DeviceAllocation::poison() {
    fill_pattern(data(), bytes_, element_bytes_, poison_);
    CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceAllocation::upload(const void* host, std::size_t bytes) {
    CUDA_CHECK(cudaMemcpy(data(), host, bytes, cudaMemcpyHostToDevice));
}

void DeviceAllocation::download(void* host, std::size_t bytes, std::size_t offset) const {
    // Synchronizes with the default stream, so errors of the code under test surface here.
    CUDA_CHECK(
        cudaMemcpy(host, static_cast<const char*>(data()) + offset, bytes, cudaMemcpyDeviceToHost));
}

testing::AssertionResult DeviceAllocation::redzones_intact() const {
    if (before_bytes_ == 0 && after_bytes_ == 0) return testing::AssertionSuccess();  // exact
    std::vector<unsigned char> zone_before(before_bytes_), zone_after(after_bytes_);
    CUDA_CHECK(cudaMemcpy(zone_before.data(), before(), before_bytes_, cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaMemcpy(zone_after.data(), after(), after_bytes_, cudaMemcpyDeviceToHost));
    const std::string past_end = damage(zone_after, element_bytes_, redzone_, true),
                      before_start = damage(zone_before, element_bytes_, redzone_, false);
    if (past_end.empty() && before_start.empty()) return testing::AssertionSuccess();

    fill_redzones();
    CUDA_CHECK(cudaDeviceSynchronize());
    const std::string wrote_past = "wrote past the end of `" + name_ + "`",
                      wrote_before = "wrote before the start of `" + name_ + "`";
#if !defined(COURSE_EMULATOR)
    end_guard::note_store_outside(past_end.empty() ? wrote_before : wrote_past);
#endif
    auto failure = testing::AssertionFailure();
    if (!past_end.empty())
        failure << wrote_past << " (" << bytes_ / element_bytes_ << " elements): " << past_end
                << ". Is there an `if (i < n)` guard on every store?";
    if (!before_start.empty())
        failure << (past_end.empty() ? "" : "; ") << wrote_before << ": " << before_start
                << ". Is an index negative?";
    return failure;
}

}  // namespace course
