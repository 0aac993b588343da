// Checker of 11_multi_gpu/data_parallel_step: one thread per GPU, each a rank with its own NCCL
// communicator, runs a synthetic backward that writes integer gradients (every sum over the
// ranks is exact in float) stage by stage, the last layers first, calling gradients_ready after
// each stage and gradients_finish at the end, as train_gpt's backward does. Two ways of making a
// missing wait show every time: a slow backward (each stage computes for a while before it
// writes) catches an all-reduce that does not wait for the backward's writes; a slow
// communication stream (the checker puts work on it first) catches an optimizer's read that does
// not wait for the all-reduces. Bucket sizes from 1 byte (every call a bucket) to 1 GB (one
// bucket at the end); two steps in a row (the reducer is reused); after every call of
// gradients_ready, less than a bucket pending. Then the overlap timed against the same backward
// followed by one all-reduce of everything, with GPT-2 124M's gradients. Needs 2 GPUs and NCCL.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "course/nccl.h"
#include "course/testing.h"
#include "data_parallel_step.h"

namespace {

class DataParallelStep : public course::GpuTest {};

int device_count() {
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    return count;
}

// ---- The model: where its gradients sit and in which order the backward finishes them ----

struct Span {
    std::size_t begin, count;
};

// One call of gradients_ready: the spans a stage of the backward finishes, and its name.
struct Stage {
    std::string name;
    std::vector<Span> spans;
};

// A model's gradients in one buffer, tensor-major as train_gpt's (tensor t of layer l at
// offset[t] + l * size[t]), finished as train_gpt's backward finishes them: the head (the final
// LayerNorm), the layers from the last to the first, then the embeddings.
struct Model {
    std::string name;
    std::vector<Stage> stages;  // in the order of the backward
    std::size_t total = 0;      // floats
};

Model make_model(const std::string& name, const std::vector<std::size_t>& head,
                 const std::vector<std::size_t>& layer, int layers,
                 const std::vector<std::size_t>& tail) {
    Model model{name, {}, 0};
    Stage head_stage{"the head", {}}, tail_stage{"the embeddings", {}};
    for (std::size_t size : head) head_stage.spans.push_back({model.total, size}), model.total += size;
    std::vector<std::size_t> layer_offsets;
    for (std::size_t size : layer) layer_offsets.push_back(model.total), model.total += size * layers;
    for (std::size_t size : tail) tail_stage.spans.push_back({model.total, size}), model.total += size;
    model.stages.push_back(head_stage);
    for (int l = layers - 1; l >= 0; --l) {
        Stage stage{"layer " + std::to_string(l), {}};
        for (std::size_t t = 0; t < layer.size(); ++t)
            stage.spans.push_back({layer_offsets[t] + l * layer[t], layer[t]});
        model.stages.push_back(stage);
    }
    model.stages.push_back(tail_stage);
    return model;
}

// Odd sizes (one float, primes, a span of a million) over 3 layers.
Model odd_model() {
    return make_model("odd sizes, 3 layers", {1, 3}, {31, 33, 1000003, 7}, 3, {5, 262147});
}

// GPT-2 124M (C = 768, 12 layers, the vocabulary padded to 50304, a context of 1024).
Model gpt2_124m() {
    const std::size_t C = 768;
    return make_model("GPT-2 124M", {C, C},
                      {C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C}, 12,
                      {50304 * C, 1024 * C});
}

// Which stage and span element i of the buffer belongs to.
std::string where_is(const Model& model, std::size_t i) {
    for (const Stage& stage : model.stages)
        for (std::size_t s = 0; s < stage.spans.size(); ++s) {
            const Span span = stage.spans[s];
            if (i >= span.begin && i < span.begin + span.count)
                return "span " + std::to_string(s) + " of " + stage.name + " (" +
                       std::to_string(span.count) + " floats), its element " +
                       std::to_string(i - span.begin);
        }
    return "no span";
}

// ---- The gradients: integers in [-1000, 1000], different per rank, step and run ----

std::uint64_t gradient_seed(int rank, int step) {
    return course::run_seed() * 0x9E3779B97F4A7C15ull + (static_cast<std::uint64_t>(rank) << 32) +
           static_cast<std::uint64_t>(step);
}

COURSE_HOST_DEVICE float gradient_value(std::size_t i, std::uint64_t seed) {
    return static_cast<float>(course::hashed::uniform_int(i, seed, -1000, 1000));
}

// The sum over the ranks of element i at a step, in float (exact: at most 2^10 * ranks).
COURSE_HOST_DEVICE float gradient_sum(std::size_t i, const std::uint64_t* seeds, int ranks) {
    float sum = 0;
    for (int r = 0; r < ranks; ++r) sum += gradient_value(i, seeds[r]);
    return sum;
}

constexpr int kMaxRanks = 16;

struct StepSeeds {
    std::uint64_t seed[kMaxRanks];  // by rank, for the sums; kernels take it by value
};

__device__ void spin(long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

// The compute of a stage: every thread busy for `cycles`. With 4 blocks of 256 threads per SM it
// leaves room on each SM for NCCL's kernels, as the backward's kernels do between two launches.
__global__ void busy_kernel(long long cycles) { spin(cycles); }

// A stage's gradients written, as its last kernel would: grads[begin + i] for i < count.
__global__ void write_gradients_kernel(float* grads, std::size_t begin, std::size_t count,
                                       std::uint64_t seed) {
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < count; i += stride)
        grads[begin + i] = gradient_value(begin + i, seed);
}

// How many of grads[0, n) differ from the step's sums (every timed call is checked with it).
__global__ void count_wrong_kernel(const float* grads, std::size_t n, StepSeeds seeds, int ranks,
                                   unsigned long long* wrong) {
    unsigned long long mine = 0;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        mine += grads[i] != gradient_sum(i, seeds.seed, ranks);
    if (mine) atomicAdd(wrong, mine);
}

// ---- The ranks: one GPU, communicator, pair of streams and gradient buffer each ----

// A barrier for the rank threads (C++17 has none). Broken when a rank fails: every wait, now
// and later, then throws, so that no rank waits for one that will never come.
class Barrier {
  public:
    explicit Barrier(int parties) : parties_(parties) {}
    void wait() {
        std::unique_lock<std::mutex> lock(mutex_);
        const long generation = generation_;
        if (++arrived_ == parties_) {
            arrived_ = 0;
            ++generation_;
            changed_.notify_all();
        } else {
            changed_.wait(lock, [&] { return broken_ || generation != generation_; });
        }
        if (broken_) throw std::runtime_error("another rank failed");
    }
    void break_all() {
        std::lock_guard<std::mutex> lock(mutex_);
        broken_ = true;
        changed_.notify_all();
    }

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    int parties_, arrived_ = 0;
    long generation_ = 0;
    bool broken_ = false;
};

struct Rank {
    int rank = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t compute = nullptr, communication = nullptr;
    cudaEvent_t ready = nullptr, reduced = nullptr, start = nullptr, stop = nullptr;
    std::unique_ptr<course::DeviceBuffer<float>> grads, snapshot;
    std::unique_ptr<course::DeviceBuffer<unsigned long long>> wrong;

    GradientReducer reducer(std::size_t bucket_bytes) const {
        GradientReducer r{comm, compute, communication, ready, reduced, bucket_bytes, {}, 0};
        return r;
    }
};

class Ranks {
  public:
    Ranks(int gpus, std::size_t floats) : ranks_(gpus), barrier_(gpus) {
        std::vector<int> devices(gpus);
        for (int g = 0; g < gpus; ++g) devices[g] = g;
        std::vector<ncclComm_t> comms(gpus);
        NCCL_CHECK(ncclCommInitAll(comms.data(), gpus, devices.data()));
        int least = 0, greatest = 0;
        CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        for (int g = 0; g < gpus; ++g) {
            Rank& r = ranks_[g];
            CUDA_CHECK(cudaSetDevice(g));
            r.rank = g;
            r.comm = comms[g];
            CUDA_CHECK(cudaStreamCreateWithFlags(&r.compute, cudaStreamNonBlocking));
            CUDA_CHECK(cudaStreamCreateWithPriority(&r.communication, cudaStreamNonBlocking,
                                                    greatest));
            CUDA_CHECK(cudaEventCreateWithFlags(&r.ready, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreateWithFlags(&r.reduced, cudaEventDisableTiming));
            CUDA_CHECK(cudaEventCreate(&r.start));
            CUDA_CHECK(cudaEventCreate(&r.stop));
            const std::string on = "(rank " + std::to_string(g) + ")";
            r.grads = std::make_unique<course::DeviceBuffer<float>>("gradients " + on, floats);
            r.snapshot = std::make_unique<course::DeviceBuffer<float>>("snapshot " + on, floats);
            r.wrong = std::make_unique<course::DeviceBuffer<unsigned long long>>("count", 1);
        }
        CUDA_CHECK(cudaSetDevice(0));
    }
    ~Ranks() {
        for (Rank& r : ranks_) {
            cudaSetDevice(r.rank);
            cudaDeviceSynchronize();
            if (!aborted_) ncclCommDestroy(r.comm);
            for (cudaEvent_t e : {r.ready, r.reduced, r.start, r.stop}) cudaEventDestroy(e);
            cudaStreamDestroy(r.compute);
            cudaStreamDestroy(r.communication);
            r.grads.reset();  // on its own GPU, where its redzones are checked
            r.snapshot.reset();
            r.wrong.reset();
        }
        cudaSetDevice(0);
    }
    Ranks(const Ranks&) = delete;
    Ranks& operator=(const Ranks&) = delete;

    int size() const { return static_cast<int>(ranks_.size()); }
    void barrier() { barrier_.wait(); }

    // body(rank) on one thread per rank, its GPU current, all at once. A rank that throws aborts
    // every communicator and breaks the barrier (the others would wait for it forever), and its
    // exception comes back here; the ranks are unusable after that.
    void each(const std::function<void(Rank&)>& body) {
        std::vector<std::thread> threads;
        std::once_flag abort_once;
        for (Rank& r : ranks_)
            threads.emplace_back([&, g = r.rank] {
                try {
                    CUDA_CHECK(cudaSetDevice(g));
                    body(ranks_[g]);
                } catch (...) {
                    std::call_once(abort_once, [&] {
                        first_error_ = std::current_exception();
                        aborted_ = true;
                        barrier_.break_all();
                        for (Rank& other : ranks_) ncclCommAbort(other.comm);
                    });
                }
            });
        for (std::thread& t : threads) t.join();
        if (first_error_) std::rethrow_exception(first_error_);
    }

  private:
    std::vector<Rank> ranks_;
    Barrier barrier_;
    std::atomic<bool> aborted_{false};
    std::exception_ptr first_error_;
};

std::size_t pending_bytes(const GradientReducer& reducer) {
    std::size_t bytes = 0;
    for (const GradientSpan& span : reducer.pending) bytes += span.count * sizeof(float);
    return bytes;
}

// The backward of one step on one rank: each stage's compute (`busy` kernels of `cycles` each on
// the compute stream), its gradients written, then, with a reducer, gradients_ready with its
// spans; at the end gradients_finish. What the learner's calls leave pending is checked after
// each; the first broken promise comes back in `problem`.
void backward(Rank& r, const Model& model, GradientReducer* reducer, int step, int busy,
              long long cycles, std::string* problem) {
    const std::uint64_t seed = gradient_seed(r.rank, step);
    float* grads = r.grads->data();
    for (const Stage& stage : model.stages) {
        for (int k = 0; k < busy; ++k) {
            busy_kernel<<<4 * course::gpu().multiprocessors, 256, 0, r.compute>>>(cycles);
            CUDA_CHECK_LAUNCH();
        }
        std::vector<GradientSpan> spans;
        for (const Span& span : stage.spans) {
            const int blocks =
                static_cast<int>(std::min<std::size_t>(course::ceil_div(span.count, 256), 4096));
            write_gradients_kernel<<<blocks, 256, 0, r.compute>>>(grads, span.begin, span.count,
                                                                 seed);
            CUDA_CHECK_LAUNCH();
            spans.push_back({grads + span.begin, span.count});
        }
        if (!reducer) continue;
        gradients_ready(*reducer, spans.data(), static_cast<int>(spans.size()));
        const std::size_t pending = pending_bytes(*reducer);
        if (problem->empty() && pending >= reducer->bucket_bytes)
            *problem = "after gradients_ready(" + stage.name + "), " + std::to_string(pending) +
                       " bytes are still pending, at or above bucket_bytes (" +
                       std::to_string(reducer->bucket_bytes) +
                       "): hand a full bucket to NCCL at once, or its all-reduce cannot overlap "
                       "the rest of the backward";
    }
    if (!reducer) return;
    gradients_finish(*reducer);
    if (problem->empty() && !reducer->pending.empty())
        *problem = "after gradients_finish, " + std::to_string(reducer->pending.size()) +
                   " spans are still pending: gradients_finish hands NCCL what is left (the first "
                   "layers' gradients), and the next step starts with nothing pending";
}

// What a wrong element says: which span, and what it holds instead of the sum over the ranks.
std::string diagnose(const std::vector<float>& got, const Model& model, int rank, int step,
                     int ranks, const std::string& culprit) {
    StepSeeds seeds{};
    for (int r = 0; r < ranks; ++r) seeds.seed[r] = gradient_seed(r, step);
    std::size_t wrong = 0, first = got.size();
    for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != gradient_sum(i, seeds.seed, ranks)) {
            ++wrong;
            if (first == got.size()) first = i;
        }
    if (!wrong) return "";
    const float want = gradient_sum(first, seeds.seed, ranks);
    const float own = gradient_value(first, seeds.seed[rank]);
    const float value = got[first];
    std::string what = "rank " + std::to_string(rank) + ", step " + std::to_string(step) + ": " +
                       std::to_string(wrong) + " of " + std::to_string(got.size()) +
                       " gradients are not the sum over the ranks; the first, in " +
                       where_is(model, first) + ", is " + std::to_string(value) + " for " +
                       std::to_string(want) + ": ";
    if (std::isnan(value))
        return what + "NaN, the poison the gradients hold before the backward writes them. " +
               culprit;
    if (value == own)
        return what + "this rank's own gradient, never summed with the others'. " + culprit;
    if (value == ranks * want || value == 2 * want)
        return what +
               "the sum, summed again: a span handed to NCCL twice (are the pending spans "
               "cleared once they are handed over?)";
    return what + "neither the sum nor this rank's own gradient: an all-reduce that read the span "
                  "while it was being written. " +
           culprit;
}

struct Scenario {
    const char* name;
    // The backward's compute before each stage writes (a slow backward), and work the checker
    // puts on the communication stream before the step (a slow communication stream).
    long long stage_cycles, communication_cycles;
    const char* culprit;  // the missing wait that makes this scenario fail
};

const Scenario kSlowBackward{
    "a slow backward", 400000, 0,
    "Its all-reduce ran before the backward had written it: record `ready` on the compute stream "
    "when a bucket is full and make the communication stream wait for it "
    "(cudaStreamWaitEvent) before the bucket's all-reduces."};
const Scenario kSlowCommunication{
    "a slow communication stream", 0, 20000000,
    "The compute stream read it before its all-reduce had run: gradients_finish must make the "
    "compute stream wait for the communication stream (record `reduced` there after the last "
    "all-reduce, cudaStreamWaitEvent on compute), or the optimizer updates with unsummed "
    "gradients."};

// Two steps of `model` on every rank with buckets of `bucket_bytes`, in `scenario`; each rank's
// gradients checked after each step: in a slow backward after everything has run, in a slow
// communication stream as the compute stream sees them right after gradients_finish (a copy
// enqueued there, as the optimizer would read them).
void check_steps(Ranks& ranks, const Model& model, std::size_t bucket_bytes,
                 const Scenario& scenario) {
    SCOPED_TRACE(std::to_string(ranks.size()) + " ranks, " + model.name + ", bucket_bytes = " +
                 std::to_string(bucket_bytes) + ", " + scenario.name);
    std::vector<std::string> problems(ranks.size()), wrong(ranks.size());
    ranks.each([&](Rank& r) {
        GradientReducer reducer = r.reducer(bucket_bytes);
        for (int step = 0; step < 2; ++step) {
            r.grads->poison();
            CUDA_CHECK(cudaDeviceSynchronize());
            ranks.barrier();
            if (scenario.communication_cycles > 0) {
                busy_kernel<<<1, 32, 0, r.communication>>>(scenario.communication_cycles);
                CUDA_CHECK_LAUNCH();
            }
            backward(r, model, &reducer, step, 1, scenario.stage_cycles, &problems[r.rank]);
            const float* seen = r.grads->data();
            if (scenario.communication_cycles > 0) {
                CUDA_CHECK(cudaMemcpyAsync(r.snapshot->data(), r.grads->data(),
                                           model.total * sizeof(float), cudaMemcpyDeviceToDevice,
                                           r.compute));
                seen = r.snapshot->data();
            }
            CUDA_CHECK(cudaDeviceSynchronize());
            std::vector<float> got(model.total);
            CUDA_CHECK(cudaMemcpy(got.data(), seen, model.total * sizeof(float),
                                  cudaMemcpyDeviceToHost));
            if (wrong[r.rank].empty())
                wrong[r.rank] = diagnose(got, model, r.rank, step, ranks.size(), scenario.culprit);
        }
    });
    for (int g = 0; g < ranks.size(); ++g) {
        EXPECT_TRUE(problems[g].empty()) << "rank " << g << ": " << problems[g];
        EXPECT_TRUE(wrong[g].empty()) << wrong[g];
        if (!problems[g].empty() || !wrong[g].empty()) break;  // the other ranks say the same
    }
}

// 2 ranks, and every GPU of the machine where it has more.
std::vector<int> rank_counts() {
    const int all = std::min(device_count(), kMaxRanks);
    return all > 2 ? std::vector<int>{2, all} : std::vector<int>{2};
}

// 1 byte: every call a bucket; then buckets of several stages; 1 GB: one bucket, at the end.
const std::size_t kBucketBytes[] = {1, 64 << 10, 4 << 20, std::size_t{1} << 30};

TEST_F(DataParallelStep, SumsWhatTheComputeStreamReadsAfterFinish) {
    const Model model = odd_model();
    for (int gpus : rank_counts()) {
        Ranks ranks(gpus, model.total);
        for (std::size_t bucket : kBucketBytes) check_steps(ranks, model, bucket, kSlowCommunication);
    }
}

TEST_F(DataParallelStep, WaitsForTheBackwardsWrites) {
    const Model model = odd_model();
    for (int gpus : rank_counts()) {
        Ranks ranks(gpus, model.total);
        for (std::size_t bucket : kBucketBytes) check_steps(ranks, model, bucket, kSlowBackward);
    }
}

// ---- Timing: the overlap against the same all-reduce after the backward ----

constexpr int kWarmup = 2;
constexpr int kSamples = 15;
// The synthetic backward lasts this many all-reduces of all the gradients: GPT-2 124M at B 16,
// T 1024 on an H100, its backward takes about 22 ms and NCCL's all-reduce of its 498 MB about
// 1.7 ms on two NVLinked GPUs (notes/11_multi_gpu.md).
constexpr double kBackwardInAllReduces = 12;
constexpr int kBusyKernelsPerStage = 8;
// The bucket size the trainer uses (PyTorch DDP's default bucket_cap_mb is 25).
constexpr std::size_t kTimedBucketBytes = std::size_t{25} << 20;

TEST_F(DataParallelStep, OverlapAgainstAllReduceAfterBackward) {
    const Model model = gpt2_124m();
    const int gpus = std::min(device_count(), kMaxRanks);
    // Per GPU: the gradients and their snapshot, the harness's redzones.
    COURSE_REQUIRE_MEMORY(2 * model.total * sizeof(float) + (std::size_t{64} << 20));
    Ranks ranks(gpus, model.total);

    // Calibration: NCCL's all-reduce of everything, and how long a busy kernel's cycles take.
    std::vector<double> all_reduce_ms(gpus);
    double ms_per_million_cycles = 0;
    ranks.each([&](Rank& r) {
        std::vector<double> samples;
        for (int k = 0; k < 5; ++k) {
            ranks.barrier();
            CUDA_CHECK(cudaEventRecord(r.start, r.compute));
            NCCL_CHECK(ncclAllReduce(r.grads->data(), r.grads->data(), model.total, ncclFloat32,
                                     ncclSum, r.comm, r.compute));
            CUDA_CHECK(cudaEventRecord(r.stop, r.compute));
            CUDA_CHECK(cudaEventSynchronize(r.stop));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
            samples.push_back(ms);
        }
        all_reduce_ms[r.rank] = course::summarize(samples).median_ms;
        if (r.rank == 0) {
            CUDA_CHECK(cudaEventRecord(r.start, r.compute));
            busy_kernel<<<4 * course::gpu().multiprocessors, 256, 0, r.compute>>>(1000000);
            CUDA_CHECK_LAUNCH();
            CUDA_CHECK(cudaEventRecord(r.stop, r.compute));
            CUDA_CHECK(cudaEventSynchronize(r.stop));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
            ms_per_million_cycles = ms;
        }
    });
    const double all_reduce = *std::max_element(all_reduce_ms.begin(), all_reduce_ms.end());
    const double stage_ms = kBackwardInAllReduces * all_reduce / model.stages.size();
    const long long cycles =
        static_cast<long long>(1e6 * stage_ms / kBusyKernelsPerStage / ms_per_million_cycles);

    std::vector<double> learner_ms, baseline_ms;
    std::string problem;
    ranks.each([&](Rank& r) {
        GradientReducer reducer = r.reducer(kTimedBucketBytes);
        std::string rank_problem;
        const auto timed = [&](const std::function<void()>& step_body, int step,
                               const char* who) {
            ranks.barrier();
            CUDA_CHECK(cudaEventRecord(r.start, r.compute));
            step_body();
            CUDA_CHECK(cudaEventRecord(r.stop, r.compute));
            CUDA_CHECK(cudaEventSynchronize(r.stop));
            float ms = 0;
            CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
            // Every timed step checked. Its gradients are new at every step (their seeds name
            // the step), so a sum kept from an earlier step is wrong: no second input set needed.
            StepSeeds seeds{};
            for (int k = 0; k < ranks.size(); ++k) seeds.seed[k] = gradient_seed(k, step);
            CUDA_CHECK(cudaMemsetAsync(r.wrong->data(), 0, sizeof(unsigned long long), r.compute));
            count_wrong_kernel<<<1024, 256, 0, r.compute>>>(r.grads->data(), model.total, seeds,
                                                          ranks.size(), r.wrong->data());
            CUDA_CHECK_LAUNCH();
            CUDA_CHECK(cudaStreamSynchronize(r.compute));
            if (const unsigned long long wrong = r.wrong->download()[0])
                throw std::runtime_error(std::string("the timed step #") + std::to_string(step) +
                                         " of " + who + " left " + std::to_string(wrong) +
                                         " gradients of rank " + std::to_string(r.rank) +
                                         " that are not the sum over the ranks");
            return static_cast<double>(ms);
        };
        for (int call = 0; call < kWarmup + kSamples; ++call) {
            const int step = 2 * call;
            const double learner = timed(
                [&] {
                    backward(r, model, &reducer, step, kBusyKernelsPerStage, cycles,
                             &rank_problem);
                },
                step, "gradients_ready / gradients_finish");
            const double baseline = timed(
                [&] {
                    backward(r, model, nullptr, step + 1, kBusyKernelsPerStage, cycles, nullptr);
                    NCCL_CHECK(ncclAllReduce(r.grads->data(), r.grads->data(), model.total,
                                             ncclFloat32, ncclSum, r.comm, r.compute));
                },
                step + 1, "the all-reduce after the backward");
            if (r.rank == 0 && call >= kWarmup) {
                learner_ms.push_back(learner);
                baseline_ms.push_back(baseline);
            }
        }
        if (r.rank == 0) problem = rank_problem;
    });
    ASSERT_TRUE(problem.empty()) << problem;
    course::PairTiming timing;
    timing.learner = course::summarize(learner_ms);
    timing.baseline = course::summarize(baseline_ms);
    timing.checked_calls = kWarmup + kSamples;
    // A step: the backward (12 all-reduces long) and the gradients' sum. The baseline pays the
    // whole all-reduce after the backward; overlapped, only what is left after its last stage
    // (the embeddings' 158 MB, a third of the gradients, finished last) shows: a step of
    // 13 all-reduces becomes one of about 12.3, 1.05 times as many steps per second.
    course::record_steps(std::to_string(gpus) + " GPUs, GPT-2 124M gradients, 25 MB buckets",
                         timing, "allreduce_after_backward");
}

}  // namespace
