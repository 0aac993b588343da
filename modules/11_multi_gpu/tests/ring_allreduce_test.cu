// Checker of 11_multi_gpu/ring_allreduce: integer sums checked exactly on every GPU (a chunk
// skipped, added twice or gathered too early shows), at sizes around the chunking (1, fewer
// elements than GPUs, primes), on 2 GPUs and on all of them, GPU 1 slow to produce its input (a
// step that does not wait for its neighbour shows every time); float sums within a tolerance
// derived from the number of GPUs; then the bus bandwidth at 256 MB against ncclAllReduce on the
// same buffers, every timed call of both checked on the device, the learner's calls on two input
// sets drawn at random (a sum kept from an earlier call is wrong). Needs 2 GPUs (min_gpus).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "course/baselines.h"
#include "course/testing.h"
#include "ring_allreduce.h"

namespace {

class RingAllreduce : public course::GpuTest {};

int device_count() {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    return count;
}

// GPU g is the current device for the life of the scope; the device that was current comes back.
class OnGpu {
  public:
    explicit OnGpu(int g) {
        CUDA_CHECK(cudaGetDevice(&previous_));
        CUDA_CHECK(cudaSetDevice(g));
    }
    ~OnGpu() { cudaSetDevice(previous_); }
    OnGpu(const OnGpu&) = delete;
    OnGpu& operator=(const OnGpu&) = delete;

  private:
    int previous_ = 0;
};

void synchronize_all(int gpus) {
    for (int g = 0; g < gpus; ++g) {
        OnGpu on(g);
        CUDA_CHECK(cudaDeviceSynchronize());
    }
}

// What the contract promises: peer access between every pair of GPUs that supports it, enabled
// once per process (enabling it twice is an error the runtime reports).
void enable_peer_access(int gpus) {
    static int enabled_up_to = 1;
    for (int a = 0; a < gpus; ++a) {
        OnGpu on(a);
        for (int b = 0; b < gpus; ++b) {
            if (a == b || (a < enabled_up_to && b < enabled_up_to)) continue;
            int possible = 0;
            CUDA_CHECK(cudaDeviceCanAccessPeer(&possible, a, b));
            if (!possible) continue;
            const cudaError_t status = cudaDeviceEnablePeerAccess(b, 0);
            if (status == cudaErrorPeerAccessAlreadyEnabled)
                cudaGetLastError();  // enabled before (by the code under test): as good
            else
                CUDA_CHECK(status);
        }
    }
    enabled_up_to = std::max(enabled_up_to, gpus);
}

// What the contract promises: one non-blocking stream per GPU, made once per process.
const std::vector<cudaStream_t>& ring_streams(int gpus) {
    static std::vector<cudaStream_t> streams;
    while (static_cast<int>(streams.size()) < gpus) {
        OnGpu on(static_cast<int>(streams.size()));
        cudaStream_t stream = nullptr;
        CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
        streams.push_back(stream);
    }
    return streams;
}

// One buffer and one scratch per GPU, each allocated (and poisoned) on its own GPU.
template <typename T>
struct RingBuffers {
    std::vector<std::unique_ptr<course::DeviceBuffer<T>>> buffers, scratch;
    std::vector<T*> buffer_pointers, scratch_pointers;

    explicit RingBuffers(const std::vector<std::vector<T>>& inputs) {
        const int gpus = static_cast<int>(inputs.size());
        const std::size_t chunk = course::ceil_div(inputs[0].size(), std::size_t(gpus));
        for (int g = 0; g < gpus; ++g) {
            OnGpu on(g);
            const std::string where =
                "[" + std::to_string(g) + "] (on GPU " + std::to_string(g) + ")";
            buffers.push_back(
                std::make_unique<course::DeviceBuffer<T>>("buffers" + where, inputs[g]));
            scratch.push_back(std::make_unique<course::DeviceBuffer<T>>("scratch" + where, chunk));
            buffer_pointers.push_back(buffers.back()->data());
            scratch_pointers.push_back(scratch.back()->data());
        }
    }
};

__global__ void spin_kernel(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// GPU 1 is slow to produce its input: its buffer holds the poison, and its stream gets a few
// milliseconds of work and then the copy of its input, all still running when ring_allreduce is
// called. What the caller enqueued must be done before a neighbour pulls from
// it, and so must each step before the next: a ring whose steps do not wait for the left
// neighbour's (GPU 2 pulls from GPU 1, then the others in turn) reads the poison, every time.
template <typename T>
std::unique_ptr<course::DeviceBuffer<T>> make_gpu1_slow(RingBuffers<T>& ring,
                                                        const std::vector<T>& input) {
    OnGpu on(1);
    auto pristine = std::make_unique<course::DeviceBuffer<T>>("pristine", input);
    ring.buffers[1]->poison();
    CUDA_CHECK(cudaDeviceSynchronize());
    const cudaStream_t stream = ring_streams(2)[1];
    spin_kernel<<<1, 1, 0, stream>>>(5000000);  // a few milliseconds
    CUDA_CHECK_LAUNCH();
    CUDA_CHECK(cudaMemcpyAsync(ring.buffer_pointers[1], pristine->data(),
                               input.size() * sizeof(T), cudaMemcpyDeviceToDevice, stream));
    return pristine;  // kept until the GPU has used it
}

// The elementwise sum of the inputs, in double (exact for the integers used here).
template <typename T>
std::vector<double> sum_of(const std::vector<std::vector<T>>& inputs) {
    std::vector<double> sum(inputs[0].size(), 0.0);
    for (const auto& input : inputs)
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += input[i];
    return sum;
}

bool within(double got, double want, const course::Tolerance& tolerance) {
    return std::abs(got - want) <= tolerance.atol + tolerance.rtol * std::abs(want);
}

// What a wrong element of GPU g says about the ring: which chunk it is in and which GPUs' inputs
// it holds the sum of (its own only: nothing was added into it; some: a partial sum, a step
// missing or a chunk gathered before its reduction was done; none: added twice, or read
// mid-step).
template <typename T>
std::string diagnose(const std::vector<T>& got, const std::vector<std::vector<T>>& inputs,
                     const std::vector<double>& want, int g, const course::Tolerance& tolerance) {
    const int gpus = static_cast<int>(inputs.size());
    std::size_t i = 0;
    while (i < got.size() && within(got[i], want[i], tolerance)) ++i;
    if (i == got.size()) return "";
    const std::size_t per_chunk = course::ceil_div(got.size(), std::size_t(gpus));
    const std::size_t chunk = i / per_chunk;
    std::string where = "GPU " + std::to_string(g) + ", element " + std::to_string(i) + " (chunk " +
                        std::to_string(chunk) + " of " + std::to_string(gpus) + ", elements [" +
                        std::to_string(chunk * per_chunk) + ", " +
                        std::to_string(std::min(got.size(), (chunk + 1) * per_chunk)) + ")): ";
    if (gpus > 12) return where + "not the sum of all GPUs";
    for (unsigned subset = 1; subset < (1u << gpus) - 1; ++subset) {
        double partial = 0;
        std::string members;
        for (int k = 0; k < gpus; ++k) {
            if (!(subset & (1u << k))) continue;
            partial += inputs[k][i];
            members += (members.empty() ? "" : ", ") + std::to_string(k);
        }
        if (!within(got[i], partial, tolerance)) continue;
        if (subset == (1u << g))
            return where + "holds GPU " + std::to_string(g) +
                   "'s own input only: nothing of the other GPUs was added into it, or what came "
                   "back to it was never reduced";
        return where + "holds a partial sum, of GPUs " + members +
               " only: a step missing, or "
               "a chunk gathered before its reduction was done";
    }
    return where +
           "neither the sum of all GPUs nor a partial sum: a chunk added twice, or "
           "pulled while its neighbour was still writing it (the events between steps)";
}

// Runs ring_allreduce on `inputs` (one vector per GPU) and checks every GPU's buffer against the
// sum, the scratch redzones and the current device.
template <typename T>
void check_ring(const std::vector<std::vector<T>>& inputs, const course::Tolerance& tolerance) {
    const int gpus = static_cast<int>(inputs.size());
    const std::size_t count = inputs[0].size();
    enable_peer_access(gpus);
    RingBuffers<T> ring(inputs);
    const auto gpu1_input = make_gpu1_slow(ring, inputs[1]);
    CUDA_CHECK(cudaSetDevice(0));
    ring_allreduce(ring.buffer_pointers.data(), ring.scratch_pointers.data(),
                   ring_streams(gpus).data(), gpus, count);
    int current = 0;
    CUDA_CHECK(cudaGetDevice(&current));
    synchronize_all(gpus);
    CUDA_CHECK(cudaSetDevice(0));
    EXPECT_EQ(current, 0) << "ring_allreduce left GPU " << current
                          << " current: give back the caller's device (cudaGetDevice at the "
                             "start, cudaSetDevice at the end)";
    const std::vector<double> want = sum_of(inputs);
    for (int g = 0; g < gpus; ++g) {
        OnGpu on(g);  // a damaged redzone is repaired by a kernel on the buffer's own GPU
        const std::vector<T> got = ring.buffers[g]->download();
        course::CompareOptions options{ring.buffers[g]->name()};
        options.diagnose = [&] { return diagnose(got, inputs, want, g, tolerance); };
        EXPECT_TRUE(course::expect_close(got, want, tolerance, options));
        EXPECT_TRUE(ring.scratch[g]->redzones_intact());
    }
}

// 1 and 3: fewer elements than GPUs or a chunk of one; 31, 33: odd tails; 1000003: prime (no
// chunking divides it); 2^22 + 5: chunks of millions, many blocks per add.
const std::size_t kCounts[] = {1, 2, 3, 31, 33, 1000003, (std::size_t{1} << 22) + 5};

// 2 GPUs, and every GPU of the machine where it has more.
std::vector<int> gpu_counts() {
    const int all = device_count();
    return all > 2 ? std::vector<int>{2, all} : std::vector<int>{2};
}

TEST_F(RingAllreduce, ExactIntegerSums) {
    auto rng = test_rng();
    for (int gpus : gpu_counts()) {
        for (std::size_t count : kCounts) {
            SCOPED_TRACE(std::to_string(gpus) + " GPUs, count = " + std::to_string(count) +
                         ", integers in [-1000, 1000]");
            std::vector<std::vector<int>> inputs;
            for (int g = 0; g < gpus; ++g)
                inputs.push_back(course::random_ints(count, -1000, 1000, rng));
            check_ring(inputs, course::Tolerance::exact());
        }
    }
}

TEST_F(RingAllreduce, FloatSumsWithinTolerance) {
    auto rng = test_rng();
    for (int gpus : gpu_counts()) {
        for (std::size_t count : {std::size_t{1}, std::size_t{33}, (std::size_t{1} << 20) + 3}) {
            SCOPED_TRACE(std::to_string(gpus) + " GPUs, count = " + std::to_string(count) +
                         ", floats in [-1, 1]");
            std::vector<std::vector<float>> inputs;
            for (int g = 0; g < gpus; ++g)
                inputs.push_back(course::random_floats(count, -1.0f, 1.0f, rng));
            check_ring(inputs, course::Tolerance::float32(gpus, 1.0));
        }
    }
}

// --- Timing across GPUs -----------------------------------------------------------------------

// Times one call across `gpus` GPUs with GPU 0's events: every GPU's stream that the call uses
// (streams[g]; the default stream where it is null) starts after the start event and joins GPU 0's
// default stream before the stop event, so the time is the slowest GPU's.
class MultiGpuTimer {
  public:
    explicit MultiGpuTimer(int gpus) : gpus_(gpus), joined_(gpus) {
        for (int g = 0; g < gpus; ++g) {
            OnGpu on(g);
            CUDA_CHECK(cudaEventCreateWithFlags(&joined_[g], cudaEventDisableTiming));
        }
        OnGpu on(0);
        CUDA_CHECK(cudaEventCreate(&start_));
        CUDA_CHECK(cudaEventCreate(&stop_));
    }
    ~MultiGpuTimer() {
        for (cudaEvent_t event : joined_) cudaEventDestroy(event);
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    MultiGpuTimer(const MultiGpuTimer&) = delete;
    MultiGpuTimer& operator=(const MultiGpuTimer&) = delete;

    double time_ms(const std::function<void()>& call, const cudaStream_t* streams) {
        OnGpu on(0);
        CUDA_CHECK(cudaEventRecord(start_, 0));
        for (int g = 0; g < gpus_; ++g) {
            OnGpu other(g);
            CUDA_CHECK(cudaStreamWaitEvent(streams ? streams[g] : 0, start_, 0));
        }
        call();
        CUDA_CHECK(cudaSetDevice(0));  // whatever the call left current (the correctness cases say)
        for (int g = 0; g < gpus_; ++g) {
            {
                OnGpu other(g);
                CUDA_CHECK(cudaEventRecord(joined_[g], streams ? streams[g] : 0));
            }
            CUDA_CHECK(cudaStreamWaitEvent(0, joined_[g], 0));
        }
        CUDA_CHECK(cudaEventRecord(stop_, 0));
        CUDA_CHECK(cudaEventSynchronize(stop_));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
        return ms;
    }

  private:
    int gpus_;
    std::vector<cudaEvent_t> joined_;
    cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

__global__ void count_differences_kernel(const int* got, const int* want, std::size_t n,
                                         unsigned long long* differences) {
    unsigned long long mine = 0;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        mine += got[i] != want[i];
    if (mine) atomicAdd(differences, mine);
}

// How many elements of `got` differ from `want`, both on the current GPU.
unsigned long long count_differences(const int* got, const int* want, std::size_t n,
                                     course::DeviceBuffer<unsigned long long>& counter) {
    CUDA_CHECK(cudaMemset(counter.data(), 0, sizeof(unsigned long long)));
    count_differences_kernel<<<1024, 256>>>(got, want, n, counter.data());
    CUDA_CHECK_LAUNCH();
    return counter.download()[0];
}

// values[i] = -values[i]: the second input set of the timed case, and its sums.
__global__ void negate_kernel(int* values, std::size_t n) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        values[i] = -values[i];
}

void negate(int* values, std::size_t n) {
    negate_kernel<<<1024, 256>>>(values, n);
    CUDA_CHECK_LAUNCH();
}

constexpr int kWarmup = 2;
constexpr int kSamples = 25;

TEST_F(RingAllreduce, BusBandwidth256MB) {
    if (!course::baseline::nccl_available()) {
        const std::string reason =
            "the course was built without NCCL (set COURSE_NCCL_ROOT: common/CMakeLists.txt), "
            "so there is nothing to time against";
        RecordProperty("skip_reason", reason);
        GTEST_SKIP() << reason;
    }
    const int gpus = device_count();
    const std::size_t count = (std::size_t{256} << 20) / sizeof(int);  // 256 MB per GPU
    const std::size_t bytes = count * sizeof(int);
    // Per GPU: the buffer, its pristine input and the expected sum, the scratch chunk, and the
    // harness's redzones.
    COURSE_REQUIRE_MEMORY(3 * bytes + bytes / gpus + (std::size_t{64} << 20));
    enable_peer_access(gpus);
    auto rng = test_rng();
    std::vector<std::vector<int>> inputs;
    for (int g = 0; g < gpus; ++g) inputs.push_back(course::random_ints(count, -1000, 1000, rng));
    const std::vector<double> sum = sum_of(inputs);
    const std::vector<int> want(sum.begin(), sum.end());

    RingBuffers<int> ring(inputs);
    std::vector<std::unique_ptr<course::DeviceBuffer<int>>> pristine, expected;
    std::vector<std::unique_ptr<course::DeviceBuffer<unsigned long long>>> counters;
    for (int g = 0; g < gpus; ++g) {
        OnGpu on(g);
        pristine.push_back(std::make_unique<course::DeviceBuffer<int>>("pristine", inputs[g]));
        expected.push_back(std::make_unique<course::DeviceBuffer<int>>("expected", want));
        counters.push_back(std::make_unique<course::DeviceBuffer<unsigned long long>>("count", 1));
    }
    // The input sets the learner's calls alternate between, at random, as course::TimedInput's do
    // on one GPU: the inputs as made (set 0, also NCCL's), and every one negated with its sum
    // (set 1). A launcher that returns a sum it kept from an earlier call is then wrong on about
    // half the calls. `choose` switches both, outside the timed region.
    int current_set = 0;
    const auto choose = [&](int set) {
        if (set == current_set) return;
        for (int g = 0; g < gpus; ++g) {
            OnGpu on(g);
            negate(pristine[g]->data(), count);
            negate(expected[g]->data(), count);
        }
        current_set = set;
    };
    auto set_choice = course::rng_for("ring_allreduce input sets");
    // Outside the timed region: the inputs back in every buffer (an in-place all-reduce consumes
    // them), and after the call every buffer compared with the sum on its own GPU.
    const auto reset = [&] {
        for (int g = 0; g < gpus; ++g) {
            OnGpu on(g);
            CUDA_CHECK(cudaMemcpyAsync(ring.buffer_pointers[g], pristine[g]->data(), bytes,
                                       cudaMemcpyDeviceToDevice, 0));
        }
        synchronize_all(gpus);
    };
    const auto verify = [&](const std::string& who, int call) {
        for (int g = 0; g < gpus; ++g) {
            OnGpu on(g);
            const auto wrong = count_differences(ring.buffer_pointers[g], expected[g]->data(),
                                                 count, *counters[g]);
            if (wrong)
                throw std::runtime_error(
                    "the timed call #" + std::to_string(call) + " of " + who + " left " +
                    std::to_string(wrong) + " wrong elements in buffers[" + std::to_string(g) +
                    "], on " +
                    (current_set == 0 ? "the first" : "the second (every input negated)") +
                    " of the two input sets the timed calls alternate between at random. Does "
                    "the launcher skip work, or return a sum it kept from an earlier call?");
        }
    };
    std::vector<void*> untyped(ring.buffer_pointers.begin(), ring.buffer_pointers.end());
    const cudaStream_t* streams = ring_streams(gpus).data();
    const auto learner = [&] {
        ring_allreduce(ring.buffer_pointers.data(), ring.scratch_pointers.data(), streams, gpus,
                       count);
    };
    const auto nccl = [&] {
        course::baseline::nccl_all_reduce_sum(untyped.data(), gpus, count,
                                              course::baseline::Element::int32);
    };
    MultiGpuTimer timer(gpus);
    std::vector<double> learner_ms, nccl_ms;
    int varied_calls = 0;
    // Interleaved, so that both see the same clocks; the first calls (events, NCCL's
    // communicators, peer mappings) are warm-up, the second of them on the second input set.
    for (int call = 0; call < kWarmup + kSamples; ++call) {
        const int set = call < kWarmup ? call % 2 : static_cast<int>(set_choice.next_u64() >> 63);
        varied_calls += set;
        choose(set);
        reset();
        const double learner_time = timer.time_ms(learner, streams);
        verify("ring_allreduce", call);
        choose(0);
        reset();
        const double nccl_time = timer.time_ms(nccl, nullptr);
        verify("ncclAllReduce", call);
        if (call < kWarmup) continue;
        learner_ms.push_back(learner_time);
        nccl_ms.push_back(nccl_time);
    }
    course::PairTiming timing;
    timing.learner = course::summarize(learner_ms);
    timing.baseline = course::summarize(nccl_ms);
    timing.checked_calls = kWarmup + kSamples;
    timing.varied_calls = varied_calls;
    // Bus bandwidth, as NCCL's tests define it: the buffer's bytes over the time, times
    // 2 (gpus - 1) / gpus, the share of the buffer each GPU must send (and receive) in any
    // all-reduce. It reads as a link's speed whatever the number of GPUs.
    const double bus_bytes = 2.0 * (gpus - 1) / gpus * bytes;
    course::record_bandwidth("256 MB x " + std::to_string(gpus) + " GPUs", timing, bus_bytes,
                             "nccl_allreduce", bus_bytes);
}

}  // namespace
