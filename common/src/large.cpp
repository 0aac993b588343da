#include "course/large.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include "course/check.h"
#include "course/gpu.h"

namespace course {

namespace {

// Where 32-bit arithmetic breaks: the byte offset of a 4-byte element in an int (element 2^29) or
// an unsigned int (2^30), the index itself in an int (2^31) or an unsigned int (2^32).
constexpr std::size_t kLimits[] = {std::size_t{1} << 29, std::size_t{1} << 30, std::size_t{1} << 31,
                                   std::size_t{1} << 32};

// Sorted, overlapping or touching windows merged.
std::vector<Window> merged(std::vector<Window> windows) {
    std::sort(windows.begin(), windows.end(),
              [](const Window& a, const Window& b) { return a.first < b.first; });
    std::vector<Window> out;
    for (const Window& w : windows) {
        if (!out.empty() && w.first <= out.back().first + out.back().count) {
            const std::size_t end =
                std::max(out.back().first + out.back().count, w.first + w.count);
            out.back().count = end - out.back().first;
        } else {
            out.push_back(w);
        }
    }
    return out;
}

// The CUDA error an earlier large case of this process failed with: sticky, so every later CUDA
// call would fail too, and the learner would read a crash instead of the first case's diagnosis.
std::optional<std::string> earlier_large_case_error;

}  // namespace

std::vector<Window> windows_past_int_range(std::size_t count, Rng& rng, std::size_t width,
                                           int random) {
    width = std::min(width, count);
    // A window of `width` centred on `at`, inside the output.
    const auto around = [&](std::size_t at) {
        const std::size_t first = at < width / 2 ? 0 : std::min(at - width / 2, count - width);
        return Window{first, width};
    };
    std::vector<Window> windows{around(0), around(count - 1)};
    for (const std::size_t limit : kLimits)
        if (limit < count) windows.push_back(around(limit));
    for (int k = 0; k < random; ++k)
        windows.push_back(around(
            static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(count) - 1))));
    return merged(windows);
}

std::vector<Window> rows_past_int_range(std::size_t rows, std::size_t cols, Rng& rng, int random) {
    std::vector<std::size_t> picked{0, rows - 1};
    for (const std::size_t limit : kLimits) {
        if (limit < rows * cols) {
            picked.push_back((limit - 1) / cols);
            picked.push_back(limit / cols);
        }
    }
    for (int k = 0; k < random; ++k)
        picked.push_back(
            static_cast<std::size_t>(rng.uniform_int(0, static_cast<std::int64_t>(rows) - 1)));
    std::vector<Window> windows;
    for (std::size_t row : picked) windows.push_back({row * cols, cols});
    return merged(windows);
}

void run_large_case(const std::function<void()>& call) {
    try {
        call();
        CUDA_CHECK(cudaDeviceSynchronize());
    } catch (const CudaError& error) {
        // Without the harness's tag: the grader then reports a failure with this text.
        std::string text = error.what();
        const std::string tag = "[course:cuda-error] ";
        if (text.compare(0, tag.size(), tag) == 0) text.erase(0, tag.size());
        earlier_large_case_error = text;
        throw std::runtime_error(
            "in a large case: " + text +
            "\n  an index or offset computed in 32-bit int arithmetic overflows (an index at "
            "2^31; a byte offset of 4-byte elements at element 2^29), or in 32-bit unsigned "
            "arithmetic (at 2^32; at 2^30), and points outside the buffers: compute indices and "
            "offsets in std::size_t, and widen before multiplying (std::size_t(row) * cols). "
            "grader sanitize shows the faulting line.");
    }
}

std::optional<std::string> large_case_skip_reason(std::size_t bytes) {
    if (earlier_large_case_error)
        return "an earlier large case left the GPU in an error state (" +
               *earlier_large_case_error + "): its failure comes first";
    if (exact_allocations())
        return std::string(
            "the large cases do not run with exact allocations "
            "(COURSE_EXACT_ALLOCATIONS, for compute-sanitizer): they run in every plain run");
    // A GPU with the memory may have lent it to other processes for a moment (checkers run side
    // by side: dev/accept.sh): wait for it a little, well inside a checker's timeout, rather than
    // skip a case the GPU can run.
    constexpr auto kPoll = std::chrono::milliseconds(500);
    constexpr int kPolls = 60;  // 30 s
    std::size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    for (int poll = 0; poll < kPolls && free_bytes < bytes && bytes <= total_bytes; ++poll) {
        std::this_thread::sleep_for(kPoll);
        CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    }
    return memory_skip_reason(bytes);
}

namespace {
bool running = false;
}  // namespace

bool large_case_running() { return running; }

LargeCaseLock::LargeCaseLock() {
    running = true;
    const auto path = std::filesystem::temp_directory_path() / "course-large-case.lock";
    descriptor_ = ::open(path.c_str(), O_RDWR | O_CREAT, 0666);
    // Without a lock file (a read-only temporary folder) the case runs unlocked.
    if (descriptor_ >= 0) ::flock(descriptor_, LOCK_EX);
}

LargeCaseLock::~LargeCaseLock() {
    running = false;
    if (descriptor_ >= 0) ::close(descriptor_);  // closing releases the lock
}

}  // namespace course
