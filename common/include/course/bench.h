// Honest timing: CUDA events around each sample, L2 flushed before each sample, warm-up first,
// enough samples for a stable median, and the baseline's samples interleaved with the learner's
// so that both see the same clocks and the same thermal state.
//
//   auto timing = course::time_against([&] { vector_add(a, b, c, n); },
//                                      [&] { course::baseline::device_copy(dst, src, bytes); });
//   // napkin math beside the formula: 2 reads + 1 write of n floats
//   course::record_perf({"n=2^25", "GB/s", course::gb_per_s(3.0 * 4 * n, timing.learner.median_ms),
//                        "copy", course::gb_per_s(2.0 * bytes, timing.baseline.median_ms), timing});
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace course {

struct BenchOptions {
    int warmup = 3;             // untimed calls first: module load, cuBLAS handles, clocks ramp up
    int min_samples = 25;       // at least this many timed samples of each side
    double min_time_ms = 200;   // ... and at least this much timed work on the learner's side
    int max_samples = 400;      // bound on both (for very short kernels)
};

struct TimingStats {
    double median_ms = 0;
    double min_ms = 0;
    double spread_pct = 0;      // (90th - 10th percentile) / median
    int samples = 0;
};

// Median, min and spread of a set of samples (host-only; tested on its own).
TimingStats summarize(std::vector<double> samples_ms);

struct PairTiming {
    TimingStats learner;
    TimingStats baseline;
};

// Both callables must only enqueue work on the default stream.
PairTiming time_against(const std::function<void()>& learner, const std::function<void()>& baseline,
                        const BenchOptions& options = {});

// Rates from a median time. Write the napkin math (bytes moved, FLOPs) beside every call.
inline double gb_per_s(double bytes, double ms) { return bytes / (ms * 1e6); }
inline double tflop_per_s(double flops, double ms) { return flops / (ms * 1e9); }

struct PerfCase {
    std::string label;           // which size: "n=2^25", "4096x4096x4096"
    std::string unit;            // "GB/s", "TFLOP/s"
    double value = 0;            // the code under test, from its median time
    std::string baseline;        // "copy", "cublas_sgemm", ...
    double baseline_value = 0;   // the baseline, same unit, same run
    PairTiming timing;
};

// Records the case as GoogleTest properties (read by the grader) and prints one line.
void record_perf(const PerfCase& perf);

}  // namespace course
