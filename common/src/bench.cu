#include "course/bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "course/check.h"
#include "course/gpu.h"

namespace course {

namespace {

// Reading a buffer twice the size of L2 evicts whatever the previous sample left there, so every
// sample reads its inputs from device memory, as a real workload would. Reading, not writing: a
// memset would leave L2 full of dirty lines whose write-back the next timed sample would pay for.
__global__ void read_through_kernel(const float4* buffer, std::size_t count, float* sink) {
    float sum = 0.0f;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
        const float4 v = buffer[i];
        sum += v.x + v.y + v.z + v.w;
    }
    if (sum == 12345.678f)
        *sink = sum;  // never true (the buffer is zeros), but the reads must stay
}

class L2Flusher {
  public:
    L2Flusher() : bytes_(std::max<std::size_t>(2 * gpu().l2_bytes, 32u << 20)) {
        CUDA_CHECK(cudaMalloc(&buffer_, bytes_ + sizeof(float)));
        CUDA_CHECK(cudaMemset(buffer_, 0, bytes_ + sizeof(float)));
    }
    ~L2Flusher() { cudaFree(buffer_); }
    void flush() {
        const std::size_t count = bytes_ / sizeof(float4);
        const int threads = 512;
        read_through_kernel<<<gpu().multiprocessors * 4, threads>>>(
            static_cast<const float4*>(buffer_), count,
            reinterpret_cast<float*>(static_cast<char*>(buffer_) + bytes_));
        CUDA_CHECK_LAUNCH();
    }

  private:
    std::size_t bytes_;
    void* buffer_ = nullptr;
};

L2Flusher& flusher() {
    static L2Flusher instance;
    return instance;
}

class EventPair {
  public:
    EventPair() {
        CUDA_CHECK(cudaEventCreate(&start_));
        CUDA_CHECK(cudaEventCreate(&stop_));
    }
    ~EventPair() {
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }
    // Flushes L2, then times one call of `run` on the default stream.
    double time_ms(const std::function<void()>& run) {
        flusher().flush();
        CUDA_CHECK(cudaEventRecord(start_));
        run();
        CUDA_CHECK(cudaEventRecord(stop_));
        CUDA_CHECK(cudaEventSynchronize(stop_));
        float ms = 0;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
        return ms;
    }

  private:
    cudaEvent_t start_{}, stop_{};
};

void warm_up(const std::function<void()>& run, int calls) {
    for (int i = 0; i < calls; ++i) run();
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace

PairTiming time_against(const std::function<void()>& learner, const std::function<void()>& baseline,
                        const BenchOptions& options) {
    warm_up(learner, options.warmup);
    warm_up(baseline, options.warmup);
    EventPair events;
    std::vector<double> learner_ms, baseline_ms;
    double learner_total = 0;
    for (int i = 0; i < options.max_samples; ++i) {
        if (i >= options.min_samples && learner_total >= options.min_time_ms) break;
        // Alternate who goes first, so neither side always follows the other's tail.
        if (i % 2 == 0) {
            learner_ms.push_back(events.time_ms(learner));
            baseline_ms.push_back(events.time_ms(baseline));
        } else {
            baseline_ms.push_back(events.time_ms(baseline));
            learner_ms.push_back(events.time_ms(learner));
        }
        learner_total += learner_ms.back();
    }
    CUDA_CHECK(cudaGetLastError());
    return {summarize(learner_ms), summarize(baseline_ms)};
}

namespace {

// One timed case, in the names of its properties (perf_label, perf_metric, ...: CONTRIBUTING.md).
struct PerfCase {
    std::string label;          // which size
    std::string metric;         // "GB/s", "TFLOP/s"
    double value = 0;           // the code under test, from its median time
    std::string baseline;       // what it ran against
    double baseline_value = 0;  // the baseline, same metric, same run
    PairTiming timing;
};

void record(const PerfCase& perf) {
    auto text = [](double value) {
        char buffer[32];
        std::snprintf(buffer, sizeof buffer, "%.6g", value);
        return std::string(buffer);
    };
    const double ratio = perf.baseline_value > 0 ? perf.value / perf.baseline_value : 0.0;
    const TimingStats& t = perf.timing.learner;
    using testing::Test;
    Test::RecordProperty("perf_label", perf.label);
    Test::RecordProperty("perf_metric", perf.metric);
    Test::RecordProperty("perf_value", text(perf.value));
    Test::RecordProperty("perf_baseline", perf.baseline);
    Test::RecordProperty("perf_baseline_value", text(perf.baseline_value));
    Test::RecordProperty("perf_ratio", text(ratio));
    Test::RecordProperty("perf_median_ms", text(t.median_ms));
    Test::RecordProperty("perf_min_ms", text(t.min_ms));
    Test::RecordProperty("perf_spread_pct", text(t.spread_pct));
    Test::RecordProperty("perf_samples", t.samples);
    Test::RecordProperty("perf_baseline_median_ms", text(perf.timing.baseline.median_ms));
    std::printf(
        "[perf] %s: %.1f %s (median %.4f ms, min %.4f, spread %.1f%%, %d samples) | %s "
        "%.1f %s (median %.4f ms) | %.1f%%\n",
        perf.label.c_str(), perf.value, perf.metric.c_str(), t.median_ms, t.min_ms, t.spread_pct,
        t.samples, perf.baseline.c_str(), perf.baseline_value, perf.metric.c_str(),
        perf.timing.baseline.median_ms, 100.0 * ratio);
}

}  // namespace

void record_bandwidth(const std::string& label, const PairTiming& timing, double bytes,
                      const std::string& baseline, double baseline_bytes) {
    record({label, "GB/s", gb_per_s(bytes, timing.learner.median_ms), baseline,
            gb_per_s(baseline_bytes, timing.baseline.median_ms), timing});
}

void record_flops(const std::string& label, const PairTiming& timing, double flops,
                  const std::string& baseline, double baseline_flops) {
    record({label, "TFLOP/s", tflop_per_s(flops, timing.learner.median_ms), baseline,
            tflop_per_s(baseline_flops, timing.baseline.median_ms), timing});
}

}  // namespace course
