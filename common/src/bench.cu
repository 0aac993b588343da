#include "course/bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <utility>

#include "course/check.h"
#include "course/gpu.h"
#include "course/random.h"

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

constexpr unsigned long long kNone = ~0ull;

// result[0] += the elements of `got` that `tol` does not accept against `want`, result[1] =
// min(the first such index).
template <class F>
__global__ void count_outside_tolerance_kernel(const F* got, const F* want, std::size_t count,
                                               Tolerance tol, unsigned long long* result) {
    unsigned long long wrong = 0, first = kNone;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        if (!tol.accepts(got[i], want[i])) {
            ++wrong;
            if (first == kNone) first = i;
        }
    }
    if (wrong > 0) {
        atomicAdd(&result[0], wrong);
        atomicMin(&result[1], first);
    }
}

// The same for elements compared bit for bit, `Word` being an unsigned type of their size.
template <class Word>
__global__ void count_differing_kernel(const Word* got, const Word* want, std::size_t count,
                                       unsigned long long* result) {
    unsigned long long wrong = 0, first = kNone;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
         i += stride) {
        if (got[i] != want[i]) {
            ++wrong;
            if (first == kNone) first = i;
        }
    }
    if (wrong > 0) {
        atomicAdd(&result[0], wrong);
        atomicMin(&result[1], first);
    }
}

// One TimedOutput during a time_against: the copies of what the warm-up calls left, one per
// input set (TimedInput), and the check of every timed call against the one of its set.
class OutputCheck {
  public:
    explicit OutputCheck(const TimedOutput& output) : output_(output) {
        const DeviceAllocation& a = output.allocation();
        for (void*& reference : references_)
            CUDA_CHECK(cudaMalloc(&reference, a.bytes() == 0 ? 1 : a.bytes()));
        CUDA_CHECK(cudaMalloc(&result_, 2 * sizeof(unsigned long long)));
    }
    ~OutputCheck() {
        for (void* reference : references_) cudaFree(reference);
        cudaFree(result_);
    }
    OutputCheck(const OutputCheck&) = delete;
    OutputCheck& operator=(const OutputCheck&) = delete;

    void poison() { output_.allocation().poison(); }
    void keep_reference(int set) {
        const DeviceAllocation& a = output_.allocation();
        CUDA_CHECK(cudaMemcpy(references_[set], a.data(), a.bytes(), cudaMemcpyDeviceToDevice));
    }
    // The output as the warm-up left it from the first input set (and every timed call of that
    // set reproduced it), in place of the poison a baseline's call leaves there.
    void restore_reference() {
        DeviceAllocation& a = output_.allocation();
        CUDA_CHECK(cudaMemcpy(a.data(), references_[0], a.bytes(), cudaMemcpyDeviceToDevice));
    }
    // "" when the output matches the reference of input set `set`, else what is wrong (for
    // timed call #call).
    std::string check(int call, int set) {
        const DeviceAllocation& a = output_.allocation();
        const std::size_t count = a.bytes() / a.element_bytes();
        const Tolerance& tol = output_.tolerance();
        const void* reference = references_[set];
        switch (output_.kind()) {
            case TimedOutput::Kind::float32:
                count_outside_tolerance_kernel<float><<<blocks(count), kThreads>>>(
                    static_cast<const float*>(a.data()), static_cast<const float*>(reference),
                    count, tol, start_count());
                break;
            case TimedOutput::Kind::float64:
                count_outside_tolerance_kernel<double><<<blocks(count), kThreads>>>(
                    static_cast<const double*>(a.data()), static_cast<const double*>(reference),
                    count, tol, start_count());
                break;
            case TimedOutput::Kind::bits:
                count_differing(a.data(), reference);
                break;
        }
        CUDA_CHECK_LAUNCH();
        const auto [wrong, first] = counted();
        return wrong == 0 ? "" : describe(call, set, wrong, count, first);
    }
    // How many elements of the two input sets' references differ (bit for bit).
    unsigned long long references_differing() {
        count_differing(references_[0], references_[1]);
        CUDA_CHECK_LAUNCH();
        return counted().first;
    }
    const std::string& name() const { return output_.allocation().name(); }

  private:
    static constexpr int kThreads = 256;
    static int blocks(std::size_t count) {
        return static_cast<int>(
            std::min<std::size_t>(ceil_div(std::max<std::size_t>(count, 1), kThreads),
                                  static_cast<std::size_t>(gpu().multiprocessors) * 8));
    }
    unsigned long long* start_count() {
        const unsigned long long initial[2] = {0, kNone};
        CUDA_CHECK(cudaMemcpy(result_, initial, sizeof initial, cudaMemcpyHostToDevice));
        return result_;
    }
    std::pair<unsigned long long, unsigned long long> counted() const {
        unsigned long long result[2];
        CUDA_CHECK(cudaMemcpy(result, result_, sizeof result, cudaMemcpyDeviceToHost));
        return {result[0], result[1]};
    }
    // Elements of `got` and `want` (this output's size and element type) that differ bit for bit.
    void count_differing(const void* got, const void* want) {
        const DeviceAllocation& a = output_.allocation();
        unsigned long long* result = start_count();
        switch (a.element_bytes()) {
            case 2:
                count_differing_kernel<std::uint16_t><<<blocks(a.bytes() / 2), kThreads>>>(
                    static_cast<const std::uint16_t*>(got), static_cast<const std::uint16_t*>(want),
                    a.bytes() / 2, result);
                return;
            case 4:
                count_differing_kernel<std::uint32_t><<<blocks(a.bytes() / 4), kThreads>>>(
                    static_cast<const std::uint32_t*>(got), static_cast<const std::uint32_t*>(want),
                    a.bytes() / 4, result);
                return;
            case 8:
                count_differing_kernel<std::uint64_t><<<blocks(a.bytes() / 8), kThreads>>>(
                    static_cast<const std::uint64_t*>(got), static_cast<const std::uint64_t*>(want),
                    a.bytes() / 8, result);
                return;
            default:  // bytes, and the element of a byte index is byte / element_bytes (below)
                count_differing_kernel<std::uint8_t><<<blocks(a.bytes()), kThreads>>>(
                    static_cast<const std::uint8_t*>(got), static_cast<const std::uint8_t*>(want),
                    a.bytes(), result);
        }
    }

    std::string describe(int call, int set, unsigned long long wrong, std::size_t count,
                         unsigned long long first) const {
        const DeviceAllocation& a = output_.allocation();
        const std::size_t size = a.element_bytes();
        // Elements of an unusual size were compared byte by byte: `first` is a byte then.
        const bool per_byte = output_.kind() == TimedOutput::Kind::bits && size != 1 && size != 2 &&
                              size != 4 && size != 8;
        const std::size_t element = per_byte ? first / size : first;
        // The first differing element, as the call left it.
        std::vector<unsigned char> bytes(size);
        a.download(bytes.data(), size, element * size);
        const std::uint64_t poison = poison_bytes(size);
        const bool poisoned =
            std::memcmp(bytes.data(), &poison, std::min<std::size_t>(size, 8)) == 0;
        std::string text = "the timed call #" + std::to_string(call) + " did not compute `" +
                           a.name() + "`: " + std::to_string(wrong) + " of its " +
                           std::to_string(per_byte ? a.bytes() : count) +
                           (per_byte ? " bytes" : " elements") +
                           " are unlike those the warm-up call wrote from the same inputs (" +
                           (set == 0 ? "the first" : "the second") +
                           " of the two input sets the timed calls alternate between at random)"
                           ", the first at [" +
                           std::to_string(element) + "]";
        text +=
            poisoned ? ", which still holds the poison the harness put there before the call" : "";
        // Under 1% of the output off, and not left poisoned: computed, but not the same way every
        // call, which is what a race looks like.
        const bool few = !poisoned && wrong * 100 < count;
        return text + ". Every timed call must compute its output: " +
               (few ? "a few elements that change from call to call are a race (shared memory "
                      "read before its copy has landed, or overwritten while it is read); else "
                    : "") +
               "does the launcher skip work, return before its kernels have written, or copy a "
               "result it kept from an earlier call?";
    }
    // The poison's bytes for this output's element type (course/poison.h).
    std::uint64_t poison_bytes(std::size_t size) const {
        switch (output_.kind()) {
            case TimedOutput::Kind::float32:
                return poison_pattern<float>();
            case TimedOutput::Kind::float64:
                return poison_pattern<double>();
            case TimedOutput::Kind::bits:
                break;
        }
        return size == 1 ? poison_pattern<unsigned char>() : poison_pattern<int>();
    }

    const TimedOutput& output_;
    void* references_[2] = {nullptr, nullptr};  // per input set
    unsigned long long* result_ = nullptr;
};

// out[i] ^= pattern, the pattern's byte i % 8 for byte i: 16 bytes per thread and step over the
// whole 16-byte words of the payload (it starts on a 16-byte boundary), bytes for the rest.
__global__ void xor_kernel(unsigned char* bytes, std::size_t count, std::uint64_t pattern) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t words = count / 16;
    const uint4 mask{static_cast<unsigned>(pattern), static_cast<unsigned>(pattern >> 32),
                     static_cast<unsigned>(pattern), static_cast<unsigned>(pattern >> 32)};
    uint4* vectors = reinterpret_cast<uint4*>(bytes);
    for (std::size_t i = first; i < words; i += stride) {
        uint4 v = vectors[i];
        v.x ^= mask.x;
        v.y ^= mask.y;
        v.z ^= mask.z;
        v.w ^= mask.w;
        vectors[i] = v;
    }
    for (std::size_t i = 16 * words + first; i < count; i += stride)
        bytes[i] ^= static_cast<unsigned char>(pattern >> (8 * (i % 8)));
}

// The TimedInputs of a time_against, in one of their two sets.
class InputSets {
  public:
    explicit InputSets(const std::vector<TimedInput>& inputs) : inputs_(inputs) {}
    bool any() const { return !inputs_.empty(); }
    // Puts every input in input set `set` (0: as the checker made it; 1: its elements XORed).
    void choose(int set) {
        if (set == current_) return;
        for (const TimedInput& input : inputs_) flip(input);
        current_ = set;
    }
    // "`a` and `b`", for messages.
    std::string names() const {
        std::string text;
        for (std::size_t i = 0; i < inputs_.size(); ++i)
            text += (i == 0                    ? ""
                     : i + 1 == inputs_.size() ? " and "
                                               : ", ") +
                    ("`" + inputs_[i].allocation().name() + "`");
        return text;
    }

  private:
    static void flip(const TimedInput& input) {
        DeviceAllocation& a = input.allocation();
        // The element's mask repeated over 8 bytes (elements of 1, 2, 4 or 8 bytes).
        std::uint64_t pattern = 0;
        for (std::size_t byte = 0; byte < 8; ++byte)
            pattern |= ((input.mask() >> (8 * (byte % a.element_bytes()))) & 0xFF) << (8 * byte);
        const int threads = 256;
        const int blocks = static_cast<int>(std::min<std::size_t>(
            std::max<std::size_t>(ceil_div(a.bytes(), std::size_t{16} * threads), 1),
            static_cast<std::size_t>(gpu().multiprocessors) * 8));
        xor_kernel<<<blocks, threads>>>(static_cast<unsigned char*>(a.data()), a.bytes(), pattern);
        CUDA_CHECK_LAUNCH();
    }

    const std::vector<TimedInput>& inputs_;
    int current_ = 0;
};

}  // namespace

PairTiming time_against(const std::function<void()>& learner, const std::function<void()>& baseline,
                        const std::vector<TimedOutput>& outputs,
                        const std::vector<TimedInput>& inputs, const BenchOptions& options) {
    std::vector<std::unique_ptr<OutputCheck>> checks;
    for (const TimedOutput& output : outputs)
        checks.push_back(std::make_unique<OutputCheck>(output));
    InputSets sets(inputs);
    // What the warm-up calls leave is what every timed call must reproduce from the same input
    // set (the checker verifies the first set's against its reference afterwards, through the
    // output as the timed calls left it). Not poisoned before the last warm-up: a launcher that
    // computes once and skips every later call then leaves a right reference, and the poison of
    // the first timed call gives it away; one that returns what it saved from the first call
    // leaves the second set's reference equal to the first's, and fails below.
    warm_up(learner, options.warmup);
    for (auto& check : checks) check->keep_reference(0);
    if (sets.any() && !checks.empty()) {
        sets.choose(1);
        warm_up(learner, 1);
        for (auto& check : checks) check->keep_reference(1);
        sets.choose(0);
        unsigned long long changed = 0;
        for (auto& check : checks) changed += check->references_differing();
        if (changed == 0) {
            std::string names;
            for (auto& check : checks) names += (names.empty() ? "`" : ", `") + check->name() + "`";
            throw std::runtime_error(
                "the outputs (" + names + ") did not change when the harness changed the inputs " +
                sets.names() +
                " between two calls (every element's sign flipped, or its bits XORed): does the "
                "launcher return a result it kept from an earlier call?");
        }
    }
    warm_up(baseline, options.warmup);

    PairTiming timing;
    using Clock = std::chrono::steady_clock;
    Clock::duration checking{};
    // Before every timed call, the learner's and the baseline's alike (the baseline's calls then
    // start from the same state of the GPU: module 06's learners at 16384 x 4096 lost 2% against
    // the copy otherwise); the next learner call poisons its outputs again. `set`: the inputs.
    auto prepare = [&](int set) {
        const auto started = Clock::now();
        sets.choose(set);
        for (auto& check : checks) check->poison();
        checking += Clock::now() - started;
    };
    // Which input set each timed call of the learner's computes from: at random, so that no
    // launcher can know which result to return without computing it.
    Rng choice = rng_for("time_against input sets");
    // One timed call of the learner's code, its outputs poisoned before and checked after.
    int calls = 0;
    auto learner_sample = [&](EventPair& events) {
        const int set = sets.any() ? static_cast<int>(choice.next_u64() >> 63) : 0;
        prepare(set);
        const double ms = events.time_ms(learner);
        ++calls;
        timing.varied_calls += set;
        const auto started = Clock::now();
        for (auto& check : checks) {
            const std::string problem = check->check(calls, set);
            if (!problem.empty()) throw std::runtime_error(problem);
        }
        checking += Clock::now() - started;
        return ms;
    };

    // The baseline computes from the first set always: its output is the checker's to verify.
    auto baseline_sample = [&](EventPair& events) {
        prepare(0);
        return events.time_ms(baseline);
    };

    EventPair events;
    std::vector<double> learner_ms, baseline_ms;
    double learner_total = 0;
    for (int i = 0; i < options.max_samples; ++i) {
        if (i >= options.min_samples && learner_total >= options.min_time_ms) break;
        // Alternate who goes first, so neither side always follows the other's tail.
        if (i % 2 == 0) {
            learner_ms.push_back(learner_sample(events));
            baseline_ms.push_back(baseline_sample(events));
        } else {
            baseline_ms.push_back(baseline_sample(events));
            learner_ms.push_back(learner_sample(events));
        }
        learner_total += learner_ms.back();
    }
    // The inputs as the checker made them, and the outputs as every timed call of that set
    // computed them (a baseline's call poisoned them last), for the checker's own comparison.
    sets.choose(0);
    for (auto& check : checks) check->restore_reference();
    CUDA_CHECK(cudaGetLastError());
    timing.learner = summarize(learner_ms);
    timing.baseline = summarize(baseline_ms);
    timing.checked_calls = checks.empty() ? 0 : calls;
    timing.checking_s = std::chrono::duration<double>(checking).count();
    return timing;
}

PairTiming time_against(const std::function<void()>& learner, const std::function<void()>& baseline,
                        const BenchOptions& options) {
    return time_against(learner, baseline, {}, {}, options);
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
    FlopUnits units = FlopUnits::fp32_cuda_cores;  // TFLOP/s: where the FLOPs run
};

std::string text(double value) {
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%.6g", value);
    return buffer;
}

// What the GPU can physically deliver in the case's metric, and how that figure was made;
// 0 where the device does not say.
std::pair<double, std::string> physical_ceiling(const PerfCase& perf) {
    const GpuInfo& g = gpu();
    if (perf.metric == "TFLOP/s" && perf.units == FlopUnits::bf16_tensor_cores)
        return {g.bf16_tensor_peak_tflop_s,
                "its dense bf16 tensor-core peak, " + g.bf16_tensor_peak_formula};
    if (perf.metric == "TFLOP/s" && perf.units == FlopUnits::fp16_tensor_cores)
        return {g.fp16_tensor_peak_tflop_s,
                "its dense fp16 tensor-core peak, " + g.fp16_tensor_peak_formula};
    if (perf.metric == "TFLOP/s")
        return {g.fp32_peak_tflop_s, "its FP32 peak, " + g.fp32_peak_formula};
    if (perf.metric != "GB/s") return {0.0, ""};
    // GB/s: DRAM on paper, or the copy of this run where that was faster (a GPU whose memory
    // clock is reported low).
    if (perf.baseline == "copy" && perf.baseline_value > g.memory_peak_gb_s)
        return {perf.baseline_value, "the device copy timed in this run"};
    return {g.memory_peak_gb_s, "its DRAM bandwidth, " + g.memory_peak_formula};
}

void record(const PerfCase& perf) {
    const auto [ceiling, source] = physical_ceiling(perf);
    if (ceiling > 0 && perf.value > kPhysicalCeilingMargin * ceiling)
        throw std::runtime_error(
            perf.label + ": " + text(perf.value) + " " + perf.metric +
            " is more than this GPU can physically deliver (" + text(ceiling) + " " + perf.metric +
            ": " + source +
            "). The timed calls cannot have done the work this case counts: "
            "does the launcher skip work, return before its kernels have run, or copy a result "
            "it kept from an earlier call?");
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
        "%.1f %s (median %.4f ms) | %.1f%%",
        perf.label.c_str(), perf.value, perf.metric.c_str(), t.median_ms, t.min_ms, t.spread_pct,
        t.samples, perf.baseline.c_str(), perf.baseline_value, perf.metric.c_str(),
        perf.timing.baseline.median_ms, 100.0 * ratio);
    // What checking every timed call cost this case (outside the timed region); dev/accept.sh
    // sums it over a run from the file COURSE_CHECKING_LOG names.
    if (perf.timing.checked_calls > 0) {
        std::printf(" | %d timed calls checked (%d on the second input set), +%.3f s",
                    perf.timing.checked_calls, perf.timing.varied_calls, perf.timing.checking_s);
        if (const char* path = std::getenv("COURSE_CHECKING_LOG")) {
            if (std::FILE* log = std::fopen(path, "a")) {
                std::fprintf(log, "%s: %d timed calls checked, +%.3f s\n", perf.label.c_str(),
                             perf.timing.checked_calls, perf.timing.checking_s);
                std::fclose(log);
            }
        }
    }
    std::printf("\n");
}

}  // namespace

void record_bandwidth(const std::string& label, const PairTiming& timing, double bytes,
                      const std::string& baseline, double baseline_bytes) {
    record({label, "GB/s", gb_per_s(bytes, timing.learner.median_ms), baseline,
            gb_per_s(baseline_bytes, timing.baseline.median_ms), timing});
}

void record_flops(const std::string& label, const PairTiming& timing, double flops,
                  const std::string& baseline, double baseline_flops, FlopUnits units) {
    record({label, "TFLOP/s", tflop_per_s(flops, timing.learner.median_ms), baseline,
            tflop_per_s(baseline_flops, timing.baseline.median_ms), timing, units});
}

void record_steps(const std::string& label, const PairTiming& timing, const std::string& baseline) {
    record({label, "steps/s", 1e3 / timing.learner.median_ms, baseline,
            1e3 / timing.baseline.median_ms, timing});
}

}  // namespace course
