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

// Raw bytes with a redzone on each side. The redzones hold a canary byte pattern; any change to
// them is an out-of-bounds write by the code under test, reported with the buffer's name as a
// failure of the current test when the buffer is destroyed (so every buffer of every checker is
// checked without a line of its own), or earlier by redzones_intact().
class DeviceAllocation {
  public:
    static constexpr std::size_t kRedzoneBytes = 64 * 1024;

    DeviceAllocation(std::string name, std::size_t bytes, std::size_t element_bytes,
                     std::uint64_t poison_bits);
    ~DeviceAllocation();
    DeviceAllocation(DeviceAllocation&& other) noexcept;
    DeviceAllocation(const DeviceAllocation&) = delete;
    DeviceAllocation& operator=(const DeviceAllocation&) = delete;
    DeviceAllocation& operator=(DeviceAllocation&&) = delete;

    void* data() const { return static_cast<char*>(base_) + kRedzoneBytes; }
    std::size_t bytes() const { return bytes_; }
    const std::string& name() const { return name_; }

    void poison();  // fill the payload with the poison pattern again
    void upload(const void* host, std::size_t bytes);
    void download(void* host, std::size_t bytes) const;
    // Checks both canaries, then re-arms them so that a later check reports only new damage.
    // The destructor calls it too; call it yourself only to check before the buffer goes.
    testing::AssertionResult redzones_intact();

  private:
    std::string name_;
    std::size_t bytes_;
    std::size_t element_bytes_;
    std::uint64_t poison_;
    void* base_ = nullptr;
};

template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer(std::string name, std::size_t count)
        : alloc_(std::move(name), count * sizeof(T), sizeof(T), poison_pattern<T>()),
          count_(count) {}
    DeviceBuffer(std::string name, const std::vector<T>& host)
        : DeviceBuffer(std::move(name), host.size()) {
        upload(host);
    }

    T* data() { return static_cast<T*>(alloc_.data()); }
    const T* data() const { return static_cast<const T*>(alloc_.data()); }
    std::size_t size() const { return count_; }
    std::size_t bytes() const { return count_ * sizeof(T); }

    void upload(const std::vector<T>& host) {
        if (host.size() != count_)
            throw std::invalid_argument("upload to `" + alloc_.name() + "`: size mismatch");
        alloc_.upload(host.data(), bytes());
    }
    std::vector<T> download() const {
        std::vector<T> host(count_);
        alloc_.download(host.data(), bytes());
        return host;
    }
    void poison() { alloc_.poison(); }
    testing::AssertionResult redzones_intact() { return alloc_.redzones_intact(); }

  private:
    DeviceAllocation alloc_;
    std::size_t count_;
};

}  // namespace course
