// Honest timing: CUDA events around each sample, L2 flushed before each sample, warm-up first,
// enough samples for a stable median, and the baseline's samples interleaved with the learner's
// so that both see the same clocks and the same thermal state. Every timed call must do its work:
// the outputs named to time_against are poisoned before each timed call and checked after it,
// the inputs named to it change between timed calls (so a result saved from an earlier call is
// wrong), and a rate above what the GPU can physically deliver fails the case.
//
//   auto timing = course::time_against([&] { vector_add(a, b, c, n); },
//                                      [&] { course::baseline::device_copy(dst, src, 4 * n); },
//                                      {course::TimedOutput(d_c, tolerance)},
//                                      {course::TimedInput(d_a)});
//   // the napkin math beside the numbers: vector_add reads a and b and writes c (3 x 4n bytes),
//   // the copy reads and writes 4n bytes
//   course::record_bandwidth("n=2^25", timing, 3.0 * 4 * n, "copy", 2.0 * 4 * n);
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "course/buffer.h"
#include "course/compare.h"
#include "course/tensor_element.h"

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
    int checked_calls = 0;  // timed calls whose outputs were checked (TimedOutput)
    int varied_calls = 0;   // timed calls that computed from the second input set (TimedInput)
    double checking_s = 0;  // host wall time the poisoning, flips and checking took, untimed
};

// An output that the code under test must compute again on every timed call. time_against()
// poisons it before each of the learner's timed calls (outside the timed region) and compares it
// after the call, on the device, with what the warm-up calls left there: a launcher that skips
// work on repeated calls, or returns before its kernel has written, leaves the poison and fails
// the case ("the timed call #i did not compute ..."). The checker verifies the final output
// against its CPU reference afterwards, as before: every timed call then computed (within
// `tolerance`) that verified output. Floats compare with `tolerance` (the one the checker
// verifies the output with: a summation order that changes between calls, atomics), everything
// else bit for bit. Not for outputs the code also reads (updated in place).
class TimedOutput {
  public:
    enum class Kind { bits, float32, float64 };

    template <class T>
    TimedOutput(DeviceBuffer<T>& buffer, Tolerance tolerance = Tolerance::exact())
        : allocation_(&buffer.allocation()), kind_(kind_of<T>()), tolerance_(tolerance) {}

    DeviceAllocation& allocation() const { return *allocation_; }
    Kind kind() const { return kind_; }
    const Tolerance& tolerance() const { return tolerance_; }

  private:
    template <class T>
    static constexpr Kind kind_of() {
        if constexpr (std::is_same_v<T, float>) return Kind::float32;
        if constexpr (std::is_same_v<T, double>) return Kind::float64;
        return Kind::bits;
    }
    DeviceAllocation* allocation_;
    Kind kind_;
    Tolerance tolerance_;
};

// An input that time_against changes between the learner's timed calls: each call computes from
// one of two input sets, drawn at random, and its outputs are compared with what the warm-up
// computed from that set. A launcher that returns a result saved from an earlier call (and spins,
// so that its rate looks plausible) is then wrong on about half the calls. The second set is the
// first with every element XORed with a mask: a float's or a double's sign bit by default (every
// value negated: still a valid input of a GEMM, a softmax, a norm, attention), any mask for other
// elements (bf16 or fp16 bits: 0x8000, their sign, as course::sign_flipped names it; bytes or
// bins: a mask that keeps every value valid).
// The flip runs on the device, in place, outside the timed region (its cost is counted with the
// checking's). The baseline always sees the first set, so that its output can be checked too.
// Name at least one input on which every output depends (a GEMM's A, attention's Q, the
// backward's dO): the warm-up on the second set must change an output, or the case fails.
class TimedInput {
  public:
    template <class T>
    explicit TimedInput(DeviceBuffer<T>& buffer) : allocation_(&buffer.allocation()) {
        static_assert(std::is_floating_point_v<T>,
                      "TimedInput(buffer) flips the sign of floats or doubles; for other elements "
                      "(bf16 bits, integers, bytes) name the mask: TimedInput(buffer, mask)");
        mask_ = std::uint64_t{1} << (8 * sizeof(T) - 1);
    }
    template <class T>
    TimedInput(DeviceBuffer<T>& buffer, T mask) : allocation_(&buffer.allocation()) {
        static_assert(std::is_integral_v<T>, "the mask of an integer, byte or bf16-bits input");
        mask_ = static_cast<std::uint64_t>(static_cast<std::make_unsigned_t<T>>(mask));
    }

    DeviceAllocation& allocation() const { return *allocation_; }
    std::uint64_t mask() const { return mask_; }  // XORed into every element (its low bytes)

  private:
    DeviceAllocation* allocation_;
    std::uint64_t mask_ = 0;
};

// Both callables must only enqueue work on the default stream. With `outputs`, every timed call
// of `learner` is checked as TimedOutput says, on the input set TimedInput chose for it; a call
// that did not compute them throws (the test fails with the reason, and no rate is recorded).
// `inputs` may be empty only where no input can change (say why beside the call).
PairTiming time_against(const std::function<void()>& learner, const std::function<void()>& baseline,
                        const std::vector<TimedOutput>& outputs,
                        const std::vector<TimedInput>& inputs, const BenchOptions& options = {});
// Without outputs (the output is also an input, or several calls accumulate into it): the
// checker must prove otherwise that every call did its work, as saxpy_vec4's does.
PairTiming time_against(const std::function<void()>& learner, const std::function<void()>& baseline,
                        const BenchOptions& options = {});

// Rates from a median time (what the record_ functions below report).
inline double gb_per_s(double bytes, double ms) { return bytes / (ms * 1e6); }
inline double tflop_per_s(double flops, double ms) { return flops / (ms * 1e9); }

// A measured rate may exceed what the GPU can physically deliver by this much before the case
// fails: the DRAM and FP32 peaks on paper (course::gpu()) are upper bounds that no honest kernel
// reaches, and this margin keeps rounding and clock reporting out of the verdict, while a
// launcher that skips its work is off by far more (10x, 1000x).
inline constexpr double kPhysicalCeilingMargin = 1.10;

// Where a case's FLOPs are computed, which sets its physical ceiling: the CUDA cores in float32,
// or the tensor cores with bf16 (fp16) inputs and float32 accumulation.
enum class FlopUnits { fp32_cuda_cores, bf16_tensor_cores, fp16_tensor_cores };
// The tensor-core exercises' units: those of course::TensorElement (course/tensor_element.h).
constexpr FlopUnits kTensorFlopUnits =
    kFp16TensorCores ? FlopUnits::fp16_tensor_cores : FlopUnits::bf16_tensor_cores;

// Record a timed case: the rate of the code under test and of the baseline, each from its median
// time, as GoogleTest properties (read by the grader), and one printed line. `label` names the
// size ("n=2^25", "4096x4096x4096"), `baseline` what it ran against ("copy", "cublas_sgemm").
// Write the napkin math (which reads and writes make the bytes, where the FLOPs come from) beside
// the call. A rate above the physical ceiling (the GPU's DRAM bandwidth on paper, or the copy
// timed in the same run, whichever is higher, for GB/s; for TFLOP/s the peak of `units`, FP32 or
// bf16 or fp16 tensor core; times kPhysicalCeilingMargin) throws instead: the timed calls cannot
// have done the work counted.
void record_bandwidth(const std::string& label, const PairTiming& timing, double bytes,
                      const std::string& baseline, double baseline_bytes);  // GB/s
void record_flops(const std::string& label, const PairTiming& timing, double flops,
                  const std::string& baseline, double baseline_flops,
                  FlopUnits units = FlopUnits::fp32_cuda_cores);  // TFLOP/s
// A step of work that is not one rate of one unit (module 11's backward overlapped with its
// all-reduces): steps per second of each side, from its median time, without a physical ceiling
// (the checker proves the work by checking every timed step).
void record_steps(const std::string& label, const PairTiming& timing,
                  const std::string& baseline);  // steps/s

}  // namespace course
