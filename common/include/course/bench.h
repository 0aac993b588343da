// Honest timing: CUDA events around each sample, L2 flushed before each sample, warm-up first,
// enough samples for a stable median, and the baseline's samples interleaved with the learner's
// so that both see the same clocks and the same thermal state.
//
//   auto timing = course::time_against([&] { vector_add(a, b, c, n); },
//                                      [&] { course::baseline::device_copy(dst, src, 4 * n); });
//   // the napkin math beside the numbers: vector_add reads a and b and writes c (3 x 4n bytes),
//   // the copy reads and writes 4n bytes
//   course::record_bandwidth("n=2^25", timing, 3.0 * 4 * n, "copy", 2.0 * 4 * n);
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace course {

struct BenchOptions {
    int warmup = 3;            // untimed calls first: module load, cuBLAS handles, clocks ramp up
    int min_samples = 25;      // at least this many timed samples of each side
    double min_time_ms = 200;  // ... and at least this much timed work on the learner's side
    int max_samples = 400;     // bound on both (for very short kernels)
};

struct TimingStats {
    double median_ms = 0;
    double min_ms = 0;
    double spread_pct = 0;  // (90th - 10th percentile) / median
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

// Rates from a median time (what the record_ functions below report).
inline double gb_per_s(double bytes, double ms) { return bytes / (ms * 1e6); }
inline double tflop_per_s(double flops, double ms) { return flops / (ms * 1e9); }

// Record a timed case: the rate of the code under test and of the baseline, each from its median
// time, as GoogleTest properties (read by the grader), and one printed line. `label` names the
// size ("n=2^25", "4096x4096x4096"), `baseline` what it ran against ("copy", "cublas_sgemm").
// Write the napkin math (which reads and writes make the bytes, where the FLOPs come from) beside
// the call.
void record_bandwidth(const std::string& label, const PairTiming& timing, double bytes,
                      const std::string& baseline, double baseline_bytes);  // GB/s
void record_flops(const std::string& label, const PairTiming& timing, double flops,
                  const std::string& baseline, double baseline_flops);  // TFLOP/s

}  // namespace course
