// Device buffers for checkers: RAII, poisoned before use, fenced by redzones.
//
//   course::DeviceBuffer<float> out("out", n);      // every element holds the NaN poison
//   run_learner(out.data(), n);
//   EXPECT_TRUE(course::expect_close(out.download(), want, tol, {"out"}));
//   // when `out` goes out of scope its redzones are checked: "wrote past the end of `out` ..."
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "course/poison.h"

namespace course {

// COURSE_EXACT_ALLOCATIONS=1 in the environment: every buffer is allocated at its exact size,
// without redzones, so that an access past its end leaves the allocation and compute-sanitizer's
// memcheck reports it (grader sanitize and grader check set it). Read once per process.
bool exact_allocations();

namespace detail {
// The mapping under an end-guarded payload (common/src/end_guard.h): a reserved range, the part
// of it mapped, the physical memory's handle, and the payload, which ends the mapping.
struct GuardedMapping {
    void* reservation = nullptr;
    std::size_t reserved = 0;
    std::size_t mapped = 0;
    unsigned long long handle = 0;
    void* payload = nullptr;
};
}  // namespace detail

// Where a buffer lies in device memory.
//  - fenced: a redzone of kRedzoneBytes on each side, inside one allocation (outputs: a store
//    past the end is reported with the buffer's name, "wrote past the end of `out`").
//  - end_guarded: the payload ends where unmapped memory begins (inputs: a load past the end
//    faults instead of reading a redzone, and the harness names the input, "a load read past the
//    end of the input `a`"); the redzone before it and the up to 15 bytes after it that a 16-byte
//    aligned start leaves are checked as the fenced ones are. Where the GPU lacks the CUDA
//    virtual memory management API, on the CPU emulator and under exact_allocations(), such a
//    buffer is fenced (or exact) instead.
enum class Placement { fenced, end_guarded };

// Raw bytes with redzones (Placement). The redzones hold a pattern (redzone_pattern: NaN for
// floats, so that a stray read whose value is used shows in the output; its low bits differ from
// one allocation to the next, so that a value copied from one buffer's redzone into another's
// changes it too); any change to them is an out-of-bounds write by the code under test, reported
// with the buffer's name as a failure of the current test when the buffer is destroyed (so every
// buffer of every checker is checked without a line of its own), or earlier by
// redzones_intact(). Under exact_allocations() there are no redzones (and nothing to check).
class DeviceAllocation {
  public:
    static constexpr std::size_t kRedzoneBytes = 64 * 1024;

    DeviceAllocation(std::string name, std::size_t bytes, std::size_t element_bytes,
                     std::uint64_t poison_bits,
                     std::uint64_t redzone_bits = redzone_pattern<unsigned char>(),
                     Placement placement = Placement::fenced);
    ~DeviceAllocation();
    DeviceAllocation(DeviceAllocation&& other) noexcept;
    DeviceAllocation(const DeviceAllocation&) = delete;
    DeviceAllocation& operator=(const DeviceAllocation&) = delete;
    DeviceAllocation& operator=(DeviceAllocation&&) = delete;

    void* data() const { return payload_; }
    std::size_t bytes() const { return bytes_; }
    std::size_t element_bytes() const { return element_bytes_; }
    const std::string& name() const { return name_; }
    // Whether the payload ends where unmapped memory begins (Placement::end_guarded, honoured).
    bool end_guarded() const { return mapping_.reservation != nullptr; }

    void poison();  // fill the payload with the poison pattern again
    void upload(const void* host, std::size_t bytes);
    // `bytes` bytes from byte `offset` of the payload.
    void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
    // Checks both redzones, then re-arms them so that a later check reports only new damage.
    // The destructor calls it too, and DeviceBuffer::download() before it reads; call it yourself
    // only to check at another time.
    testing::AssertionResult redzones_intact() const;

  private:
    void fill_redzones() const;
    void* before() const { return static_cast<char*>(payload_) - before_bytes_; }
    void* after() const { return static_cast<char*>(payload_) + bytes_; }

    std::string name_;
    std::size_t bytes_;
    std::size_t element_bytes_;
    std::uint64_t poison_;
    std::uint64_t redzone_;
    std::size_t before_bytes_ = 0, after_bytes_ = 0;  // the redzones' sizes
    void* base_ = nullptr;                            // cudaMalloc's, for a fenced payload
    void* payload_ = nullptr;
    detail::GuardedMapping mapping_;  // for an end-guarded payload
};

// A buffer made from host data is an input: end-guarded (Placement). One made from a count is
// fenced (an output), unless told otherwise (an input filled on the device).
template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer(std::string name, std::size_t count, Placement placement = Placement::fenced)
        : alloc_(std::move(name), count * sizeof(T), sizeof(T), poison_pattern<T>(),
                 redzone_pattern<T>(), placement),
          count_(count) {}
    DeviceBuffer(std::string name, const std::vector<T>& host)
        : DeviceBuffer(std::move(name), host.size(), Placement::end_guarded) {
        upload(host);
    }

    T* data() { return static_cast<T*>(alloc_.data()); }
    const T* data() const { return static_cast<const T*>(alloc_.data()); }
    std::size_t size() const { return count_; }
    std::size_t bytes() const { return count_ * sizeof(T); }
    const std::string& name() const { return alloc_.name(); }
    DeviceAllocation& allocation() { return alloc_; }

    void upload(const std::vector<T>& host) {
        if (host.size() != count_)
            throw std::invalid_argument("upload to `" + alloc_.name() + "`: size mismatch");
        alloc_.upload(host.data(), bytes());
    }
    // The elements, after a check of the redzones inside a test: a write past the end is then
    // the test's first failure, before the comparison of the values it may have spoiled.
    std::vector<T> download() const { return download(0, count_); }
    // Elements [first, first + count): a window of a buffer too large to download whole.
    std::vector<T> download(std::size_t first, std::size_t count) const {
        if (first > count_ || count > count_ - first)
            throw std::invalid_argument("download from `" + alloc_.name() + "`: out of range");
        if (testing::UnitTest::GetInstance()->current_test_info())
            EXPECT_TRUE(alloc_.redzones_intact());
        std::vector<T> host(count);
        alloc_.download(host.data(), count * sizeof(T), first * sizeof(T));
        return host;
    }
    void poison() { alloc_.poison(); }
    testing::AssertionResult redzones_intact() const { return alloc_.redzones_intact(); }

  private:
    DeviceAllocation alloc_;
    std::size_t count_;
};

}  // namespace course
