// trainer/ops_check: the op check of module 08's exercise tables.
//
// Teaches: how to find which kernel of a model is wrong. Loss curves that part say that something
// is wrong, and from which step; they cannot say what. Here each op that runs an exercise's kernel
// is also run by the reference on the same inputs, on the trainer's own shapes and values, and the
// two outputs are compared: since both ran on the same inputs, an op whose outputs differ is
// wrong itself, whatever ran before it. The first such op stops the run with its name, the
// exercise, the call and its shapes, and the elements that differ. Checking the first step finds
// a kernel wrong on the trainer's shapes (a tile the exercise's checker never met, a size the
// contract allows and the kernel does not take); checking again every N steps finds one wrong on
// the values training brings (larger activations, smaller gradients).
//
// How a call is checked: the outputs' contents are set aside, the reference's op runs and its
// outputs are copied away, the set-aside contents are put back, then the tested op runs; its
// outputs stay, so a checked run trains exactly as an unchecked one. The comparison runs on the
// GPU (an output can be gigabytes: the logits) and brings back a count, the worst element and a
// sum. An output the op updates in place (a gradient that accumulates, AdamW's weights) is
// compared on its change, so that a small error in a small update is not lost in the weight.
//
// Tolerance, per element: |tested - reference| <= relative * |scale| + absolute * rms(scale) +
// rounding * |reference|, where scale is the reference's output, or for an output updated in place
// its change, and rms its root mean square over the output. In an fp32 run two correct
// implementations differ by their order of summation: for a sum of K terms of mixed signs, some
// sqrt(K) 2^-24 of the sum of the terms' magnitudes, itself about sqrt(K) times the output's rms,
// so K 2^-24 of the rms: 2e-4 for K = 3072, and an output that cancels to nearly 0 keeps that
// error (seen: a GELU'-scaled dinp at 3% of the rms, off by 1.7e-4 of the rms, built for sm_75).
// Relative 1e-3 and absolute 1e-3 leave a margin and still see one wrong tile (off by the rms). In a
// bf16 run every stored activation keeps 8 significant bits (neighbouring values are up to 2^-7
// apart), and flash attention rounds its probabilities too: 3e-2 (some 4 steps of bf16) and 1e-2.
// The last term is the storage's own rounding, two units in the last place of the stored value: an
// update in place (a weight, a gradient that accumulates) rounds old + change once, and two correct
// changes that differ in their last bits can round the sum to neighbouring values.
//
// Run:  train_gpt --kernels learner --check-ops 50       (grader run 08/train_gpt does)
// Interface: ops_check.h
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "course/check.h"
#include "ops_check.h"

namespace trainer {

const char* trainer_op_name(TrainerOp op) {
    static const char* const names[] = {
        "embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward",
        "linear_forward",    "linear_backward",    "attention_forward", "attention_backward",
        "residual_forward",  "cross_entropy",      "sum_of_squares",    "adamw",
        "decode_embedding",  "kv_cache_write",     "decode_attention",  "sample"};
    return names[static_cast<int>(op)];
}

namespace {

struct Tolerance {
    double relative, absolute;
};
constexpr Tolerance kFp32Tolerance{1e-3, 1e-3};
constexpr Tolerance kBf16Tolerance{3e-2, 1e-2};
// Two units in the last place, relative, of a stored float and of a stored bf16.
constexpr float kFloatRounding = 2.0f * 1.1920929e-7f;  // 2 FLT_EPSILON
constexpr float kBf16Rounding = 2.0f * 0.0078125f;      // 2 x 2^-7

// One output of an op, as the check compares it.
struct Output {
    const char* name;
    void* data;
    long long count;
    bool bf16;       // else float
    bool change;     // updated in place: compared on the change the op makes
    long long cols;  // row length, for the message's [row, column]; 0: a vector
};

template <typename T>
Output output(const char* name, T* data, long long count, long long cols = 0, bool change = false) {
    static_assert(std::is_same_v<std::remove_const_t<T>, float> ||
                  std::is_same_v<std::remove_const_t<T>, bf16>);
    return {name,
            const_cast<void*>(static_cast<const void*>(data)),
            data ? count : 0,
            std::is_same_v<std::remove_const_t<T>, bf16>,
            change,
            cols};
}

// ---- The comparison on the GPU ----

struct Verdict {
    double scale_squares;           // sum of the reference's (changes') squares
    unsigned long long bad;         // elements beyond the tolerance
    unsigned long long first_bad;   // the lowest index among them
    unsigned int worst_ratio_bits;  // the largest |difference| / allowed, as float bits
};

constexpr int kBlock = 256;

__device__ float element(const void* data, bool bf16_data, long long i) {
    return bf16_data ? __bfloat162float(static_cast<const bf16*>(data)[i])
                     : static_cast<const float*>(data)[i];
}

__device__ bool same_bits(const void* a, const void* b, bool bf16_data, long long i) {
    return bf16_data ? reinterpret_cast<const unsigned short*>(a)[i] ==
                           reinterpret_cast<const unsigned short*>(b)[i]
                     : reinterpret_cast<const unsigned int*>(a)[i] ==
                           reinterpret_cast<const unsigned int*>(b)[i];
}

// What an element is compared against: the reference's value, or its change of it.
__device__ float scale_of(const void* reference, const void* before, bool bf16_data, long long i) {
    const float value = element(reference, bf16_data, i);
    return before ? value - element(before, bf16_data, i) : value;
}

__device__ double block_sum(double x) {
    __shared__ double warps[kBlock / 32];
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = x;
    __syncthreads();
    double total = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < kBlock / 32; ++w) total += warps[w];
    return total;
}

__global__ void scale_squares_kernel(Verdict* verdict, const void* reference, const void* before,
                                     bool bf16_data, long long n) {
    double sum = 0.0;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float s = scale_of(reference, before, bf16_data, i);
        if (isfinite(s)) sum += static_cast<double>(s) * s;
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) atomicAdd(&verdict->scale_squares, sum);
}

__global__ void judge_kernel(Verdict* verdict, const void* tested, const void* reference,
                             const void* before, bool bf16_data, long long n, float relative,
                             float absolute) {
    const float rounding = bf16_data ? kBf16Rounding : kFloatRounding;
    unsigned long long bad = 0, first_bad = ~0ull;
    float worst = 0.0f;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        if (same_bits(tested, reference, bf16_data, i)) continue;  // NaN garbage both left alone
        const float want = element(reference, bf16_data, i);
        const float difference = fabsf(element(tested, bf16_data, i) - want);
        const float allowed = relative * fabsf(scale_of(reference, before, bf16_data, i)) +
                              absolute + rounding * fabsf(want);
        const float ratio = difference <= allowed ? difference / allowed : INFINITY;
        if (!(difference <= allowed)) {  // NaN differences are bad too
            ++bad;
            first_bad = min(first_bad, static_cast<unsigned long long>(i));
        }
        worst = fmaxf(worst, ratio);
    }
    if (bad) {
        atomicAdd(&verdict->bad, bad);
        atomicMin(&verdict->first_bad, first_bad);
    }
    atomicMax(&verdict->worst_ratio_bits, __float_as_uint(worst));  // >= 0: bits order as floats
}

unsigned blocks_for(long long n) {
    return static_cast<unsigned>(
        std::max<long long>(1, std::min<long long>((n + kBlock - 1) / kBlock, 4096)));
}

// Device buffers that grow to their largest request, by slot: 2k and 2k + 1 hold output k's
// contents before the op and the reference's result; kVerdictSlot the comparison's verdict.
constexpr int kVerdictSlot = 16;
void* buffer(int slot, std::size_t bytes) {
    static std::vector<std::pair<void*, std::size_t>> buffers;
    if (slot >= static_cast<int>(buffers.size())) buffers.resize(slot + 1, {nullptr, 0});
    auto& [data, size] = buffers[slot];
    if (bytes > size) {
        if (data) CUDA_CHECK(cudaFree(data));
        CUDA_CHECK(cudaMalloc(&data, bytes));
        size = bytes;
    }
    return data;
}

std::size_t bytes_of(const Output& o) { return o.count * (o.bf16 ? sizeof(bf16) : sizeof(float)); }

float host_element(const void* data, bool bf16_data, long long i) {
    if (bf16_data) {
        bf16 value;
        CUDA_CHECK(cudaMemcpy(&value, static_cast<const bf16*>(data) + i, sizeof value,
                              cudaMemcpyDeviceToHost));
        return __bfloat162float(value);
    }
    float value;
    CUDA_CHECK(cudaMemcpy(&value, static_cast<const float*>(data) + i, sizeof value,
                          cudaMemcpyDeviceToHost));
    return value;
}

std::string number(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.4g", x);
    return text;
}

std::string where_in(const Output& o, long long i) {
    if (o.cols <= 0) return "[" + std::to_string(i) + "]";
    return "[" + std::to_string(i / o.cols) + ", " + std::to_string(i % o.cols) + "]";
}

// ---- The checked table ----

template <typename Act>
struct Check {
    const Ops<Act>* tested = nullptr;
    const Ops<Act>* reference = nullptr;
    ExercisesIn exercises_in = nullptr;
    int every = 0, steps = 0;
    std::string name;
    Tolerance tolerance = std::is_same_v<Act, bf16> ? kBf16Tolerance : kFp32Tolerance;

    // Where training stands: AdamW's calls end a step, the next op after them starts the next.
    int step = 0;
    bool after_update = false;
    int calls[static_cast<int>(TrainerOp::kCount)] = {};
    // This step's closest approach to the tolerance, per op: the ratio and which output.
    double worst[static_cast<int>(TrainerOp::kCount)] = {};
    std::string worst_output[static_cast<int>(TrainerOp::kCount)];
    long compared = 0;

    bool checking() const { return step % every == 0 && (steps <= 0 || step < steps); }

    // A new run: step `first` (0, or a resumed run's), nothing seen yet.
    void start(const Ops<Act>& tested_table, const Ops<Act>& reference_table, ExercisesIn named,
               int every_n, int last, int first) {
        tested = &tested_table;
        reference = &reference_table;
        exercises_in = named;
        every = every_n;
        steps = last;
        step = first;
        after_update = false;
        finish_step();
    }

    void next_call(TrainerOp op) {
        if (op == TrainerOp::kAdamW) {
            after_update = true;
        } else if (after_update) {
            finish_step();
            ++step;
            after_update = false;
        }
        ++calls[static_cast<int>(op)];
    }

    // One line on what the step's check saw, then a clean slate.
    void finish_step() {
        if (compared > 0) {
            std::string closest;
            for (int op = 0; op < static_cast<int>(TrainerOp::kCount); ++op)
                if (!worst_output[op].empty())
                    closest += std::string(closest.empty() ? "" : ", ") +
                               trainer_op_name(static_cast<TrainerOp>(op)) + " " +
                               number(worst[op]) + " (" + worst_output[op] + ")";
            std::printf(
                "op check, step %d: %ld calls as the reference's, within the tolerance; "
                "the closest each op came to it: %s\n",
                step, compared, closest.c_str());
            std::fflush(stdout);
        }
        std::fill(std::begin(calls), std::end(calls), 0);
        std::fill(std::begin(worst), std::end(worst), 0.0);
        for (auto& text : worst_output) text.clear();
        compared = 0;
    }

    ~Check() {
        if (tested) finish_step();
    }

    // Runs the tested op, checked where this step is checked and the op runs an exercise.
    void run(TrainerOp op, const std::string& shapes, std::initializer_list<Output> outputs,
             const std::function<void(const Ops<Act>&)>& call) {
        next_call(op);
        const std::string exercises = checking() ? exercises_in(op) : "";
        if (exercises.empty()) {
            call(*tested);
            return;
        }
        const std::string where = "step " + std::to_string(step) + ", " + trainer_op_name(op) +
                                  " call " + std::to_string(calls[static_cast<int>(op)]) + " (" +
                                  shapes + "; " + exercises + ")";
        std::vector<Output> kept(outputs);
        kept.erase(
            std::remove_if(kept.begin(), kept.end(), [](const Output& o) { return o.count == 0; }),
            kept.end());
        // Set aside, the reference's outputs, put back.
        for (std::size_t k = 0; k < kept.size(); ++k)
            CUDA_CHECK(cudaMemcpyAsync(buffer(2 * k, bytes_of(kept[k])), kept[k].data,
                                       bytes_of(kept[k]), cudaMemcpyDeviceToDevice));
        call(*reference);
        for (std::size_t k = 0; k < kept.size(); ++k) {
            CUDA_CHECK(cudaMemcpyAsync(buffer(2 * k + 1, bytes_of(kept[k])), kept[k].data,
                                       bytes_of(kept[k]), cudaMemcpyDeviceToDevice));
            CUDA_CHECK(cudaMemcpyAsync(kept[k].data, buffer(2 * k, 0), bytes_of(kept[k]),
                                       cudaMemcpyDeviceToDevice));
        }
        try {
            call(*tested);
            CUDA_CHECK(cudaDeviceSynchronize());
        } catch (const course::CudaError& e) {
            throw course::CudaError(e.code(), "op check: " + where + " crashed: " + e.what());
        }
        for (std::size_t k = 0; k < kept.size(); ++k)
            judge(where, kept[k], buffer(2 * k + 1, 0), kept[k].change ? buffer(2 * k, 0) : nullptr,
                  op);
        ++compared;
    }

    void judge(const std::string& where, const Output& o, const void* reference_data,
               const void* before, TrainerOp op) {
        static auto* verdict = static_cast<Verdict*>(buffer(kVerdictSlot, sizeof(Verdict)));
        const Verdict start{0.0, 0, ~0ull, 0};
        CUDA_CHECK(cudaMemcpy(verdict, &start, sizeof start, cudaMemcpyHostToDevice));
        scale_squares_kernel<<<blocks_for(o.count), kBlock>>>(verdict, reference_data, before,
                                                              o.bf16, o.count);
        CUDA_CHECK_LAUNCH();
        Verdict got{};
        CUDA_CHECK(cudaMemcpy(&got, verdict, sizeof got, cudaMemcpyDeviceToHost));
        const double rms = std::sqrt(got.scale_squares / o.count);
        // An output whose reference is all zeros (a gradient nothing reached) allows what float
        // rounding of zero allows: nothing but tiny values.
        const float absolute = static_cast<float>(tolerance.absolute * (rms > 0 ? rms : 1e-30));
        judge_kernel<<<blocks_for(o.count), kBlock>>>(
            verdict, o.data, reference_data, before, o.bf16, o.count,
            static_cast<float>(tolerance.relative), absolute);
        CUDA_CHECK_LAUNCH();
        CUDA_CHECK(cudaMemcpy(&got, verdict, sizeof got, cudaMemcpyDeviceToHost));
        float ratio;
        std::memcpy(&ratio, &got.worst_ratio_bits, sizeof ratio);
        const int index = static_cast<int>(op);
        if (got.bad == 0) {
            if (ratio >= worst[index]) {
                worst[index] = ratio;
                worst_output[index] = o.name;
            }
            return;
        }
        const long long i = static_cast<long long>(got.first_bad);
        const float mine = host_element(o.data, o.bf16, i);
        const float theirs = host_element(reference_data, o.bf16, i);
        std::ostringstream message;
        message << "op check: " << where << ": " << o.name << ": " << got.bad << " of " << o.count
                << " values differ from the reference's beyond the tolerance (|difference| <= "
                << number(tolerance.relative) << " |"
                << (before ? "reference's change" : "reference") << "| + "
                << number(tolerance.absolute) << " x its rms " << number(rms)
                << " + the storage's rounding); the first at " << where_in(o, i) << ": "
                << number(mine) << " where the reference has " << number(theirs);
        if (before) {
            const float was = host_element(before, o.bf16, i);
            message << " (both from " << number(was) << ")";
        }
        throw std::runtime_error(message.str());
    }
};

template <typename Act>
Check<Act> check;

std::string sizes(std::initializer_list<std::pair<const char*, long long>> named) {
    std::string text;
    for (const auto& [name, value] : named)
        text += (text.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(value);
    return text;
}

template <typename Act>
void embedding_forward(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T,
                       int C) {
    check<Act>.run(TrainerOp::kEmbeddingForward, sizes({{"B", B}, {"T", T}, {"C", C}}),
                   {output("out", out, 1LL * B * T * C, C)},
                   [&](const Ops<Act>& t) { t.embedding_forward(out, tokens, wte, wpe, B, T, C); });
}

template <typename Act>
void embedding_backward(float* dwte, float* dwpe, const Act* dout, const TokenBuckets& buckets,
                        int B, int T, int C) {
    // The rows of dwte the op may touch: up to the largest token (the buckets are sorted).
    int largest = 0;
    if (buckets.count > 0)
        CUDA_CHECK(cudaMemcpy(&largest, buckets.token + buckets.count - 1, sizeof largest,
                              cudaMemcpyDeviceToHost));
    check<Act>.run(
        TrainerOp::kEmbeddingBackward, sizes({{"B", B}, {"T", T}, {"C", C}}),
        {output("dwte", dwte, (largest + 1LL) * C, C, true),
         output("dwpe", dwpe, 1LL * T * C, C, true)},
        [&](const Ops<Act>& t) { t.embedding_backward(dwte, dwpe, dout, buckets, B, T, C); });
}

template <typename Act>
void layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                       const Act* bias, int rows, int C) {
    check<Act>.run(TrainerOp::kLayerNormForward, sizes({{"rows", rows}, {"C", C}}),
                   {output("out", out, 1LL * rows * C, C), output("mean", mean, rows),
                    output("rstd", rstd, rows)},
                   [&](const Ops<Act>& t) {
                       t.layernorm_forward(out, mean, rstd, inp, weight, bias, rows, C);
                   });
}

template <typename Act>
void layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                        const Act* weight, const float* mean, const float* rstd, int rows, int C) {
    check<Act>.run(TrainerOp::kLayerNormBackward, sizes({{"rows", rows}, {"C", C}}),
                   {output("dinp", dinp, 1LL * rows * C, C, true),
                    output("dweight", dweight, C, 0, true), output("dbias", dbias, C, 0, true)},
                   [&](const Ops<Act>& t) {
                       t.layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                            rows, C);
                   });
}

template <typename Act>
void linear_forward(Act* out, Act* gelu_input, const Act* inp, const Act* weight, const Act* bias,
                    int rows, int C, int OC) {
    check<Act>.run(TrainerOp::kLinearForward,
                   sizes({{"rows", rows}, {"C", C}, {"OC", OC}}) + (gelu_input ? ", GELU" : ""),
                   {output("out", out, 1LL * rows * OC, OC),
                    output("gelu_input", gelu_input, 1LL * rows * OC, OC)},
                   [&](const Ops<Act>& t) {
                       t.linear_forward(out, gelu_input, inp, weight, bias, rows, C, OC);
                   });
}

template <typename Act>
void linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                     const Act* gelu_input, const Act* weight, int rows, int C, int OC) {
    check<Act>.run(
        TrainerOp::kLinearBackward,
        sizes({{"rows", rows}, {"C", C}, {"OC", OC}}) + (gelu_input ? ", GELU" : ""),
        {output("dinp", dinp, 1LL * rows * C, C), output("dweight", dweight, 1LL * OC * C, C, true),
         output("dbias", dbias, OC, 0, true)},
        [&](const Ops<Act>& t) {
            t.linear_backward(dinp, dweight, dbias, dout, inp, gelu_input, weight, rows, C, OC);
        });
}

template <typename Act>
void attention_forward(Act* out, float* lse, Act* att, Act* scratch, Act* preatt, const Act* qkv,
                       int B, int T, int C, int NH) {
    const bool keeps_scores = check<Act>.tested->attention_keeps_scores(C / NH);
    check<Act>.run(TrainerOp::kAttentionForward,
                   sizes({{"B", B}, {"T", T}, {"C", C}, {"heads", NH}}),
                   {output("out", out, 1LL * B * T * C, C),
                    output("lse", keeps_scores ? nullptr : lse, 1LL * B * NH * T, T),
                    output("att", keeps_scores ? att : nullptr, 1LL * B * NH * T * T, T)},
                   [&](const Ops<Act>& t) {
                       t.attention_forward(out, lse, att, scratch, preatt, qkv, B, T, C, NH);
                   });
}

template <typename Act>
void attention_backward(Act* dqkv, Act* scratch, Act* datt, const Act* dout, const Act* qkv,
                        const Act* out, const float* lse, const Act* att, int B, int T, int C,
                        int NH) {
    check<Act>.run(
        TrainerOp::kAttentionBackward, sizes({{"B", B}, {"T", T}, {"C", C}, {"heads", NH}}),
        {output("dqkv", dqkv, 3LL * B * T * C, 3LL * C)}, [&](const Ops<Act>& t) {
            t.attention_backward(dqkv, scratch, datt, dout, qkv, out, lse, att, B, T, C, NH);
        });
}

template <typename Act>
bool attention_keeps_scores(int head_size) {
    return check<Act>.tested->attention_keeps_scores(head_size);
}

template <typename Act>
void residual_forward(Act* out, const Act* a, const Act* b, long long n) {
    check<Act>.run(TrainerOp::kResidualForward, sizes({{"n", n}}), {output("out", out, n)},
                   [&](const Ops<Act>& t) { t.residual_forward(out, a, b, n); });
}

template <typename Act>
void cross_entropy(Act* logits, float* losses, const int* targets, float dloss, int rows, int V,
                   int Vp) {
    check<Act>.run(
        TrainerOp::kCrossEntropy, sizes({{"rows", rows}, {"V", V}, {"Vp", Vp}}),
        {output(dloss != 0.0f ? "dlogits" : "logits", logits, 1LL * rows * Vp, Vp),
         output("losses", losses, rows)},
        [&](const Ops<Act>& t) { t.cross_entropy(logits, losses, targets, dloss, rows, V, Vp); });
}

template <typename Act>
void sum_of_squares(float* out, const float* values, long long n) {
    check<Act>.run(TrainerOp::kSumOfSquares, sizes({{"n", n}}), {output("out", out, 1)},
                   [&](const Ops<Act>& t) { t.sum_of_squares(out, values, n); });
}

template <typename Act>
void adamw(float* master, Act* working, const float* grads, float* m, float* v, long long n,
           float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
           float eps, float weight_decay, float grad_scale) {
    check<Act>.run(TrainerOp::kAdamW, sizes({{"n", n}}),
                   {output("master", master, n, 0, true), output("working", working, n),
                    output("m", m, n), output("v", v, n)},
                   [&](const Ops<Act>& t) {
                       t.adamw(master, working, grads, m, v, n, lr, beta1, beta2, beta1_correction,
                               beta2_correction, eps, weight_decay, grad_scale);
                   });
}

// Generation's ops. A new token's embedding and the cache's writes are the reference's in every
// table; sampled tokens are not compared (two correct samplers may draw neighbouring tokens where a
// uniform lies within their rounding of a boundary: module 10's checker tests the sampler by its
// distribution), so sample runs the tested table's unchecked (exercises_in names no exercise for
// it).
template <typename Act>
void decode_embedding(Act* out, const int* tokens, const Act* wte, const Act* wpe,
                      const int* lengths, int B, int C) {
    check<Act>.run(
        TrainerOp::kDecodeEmbedding, sizes({{"B", B}, {"C", C}}), {},
        [&](const Ops<Act>& t) { t.decode_embedding(out, tokens, wte, wpe, lengths, B, C); });
}

template <typename Act>
void kv_cache_write(Act* k_cache, Act* v_cache, const Act* qkv, const int* lengths, int B, int T,
                    int C, int NH, int capacity) {
    check<Act>.run(TrainerOp::kKvCacheWrite,
                   sizes({{"B", B}, {"T", T}, {"C", C}, {"heads", NH}, {"capacity", capacity}}), {},
                   [&](const Ops<Act>& t) {
                       t.kv_cache_write(k_cache, v_cache, qkv, lengths, B, T, C, NH, capacity);
                   });
}

template <typename Act>
void decode_attention(Act* out, float* workspace, const Act* qkv, const Act* k_cache,
                      const Act* v_cache, const int* lengths, int B, int C, int NH, int capacity) {
    check<Act>.run(TrainerOp::kDecodeAttention,
                   sizes({{"B", B}, {"C", C}, {"heads", NH}, {"capacity", capacity}}),
                   {output("out", out, 1LL * B * C, C)}, [&](const Ops<Act>& t) {
                       t.decode_attention(out, workspace, qkv, k_cache, v_cache, lengths, B, C, NH,
                                          capacity);
                   });
}

template <typename Act>
void sample(int* tokens, const Act* logits, const float* uniforms, int rows, int V, int Vp,
            float temperature, int top_k, float top_p) {
    check<Act>.run(TrainerOp::kSample, sizes({{"rows", rows}, {"V", V}}), {},
                   [&](const Ops<Act>& t) {
                       t.sample(tokens, logits, uniforms, rows, V, Vp, temperature, top_k, top_p);
                   });
}

// The check runs on the host between the ops (and counts the training's steps by them).
const char* checked_graph_refusal() {
    return "--check-ops compares ops with the reference's on the host";
}

template <typename Act>
Ops<Act> kChecked = {
    "",
    embedding_forward<Act>,
    embedding_backward<Act>,
    layernorm_forward<Act>,
    layernorm_backward<Act>,
    linear_forward<Act>,
    linear_backward<Act>,
    attention_forward<Act>,
    attention_backward<Act>,
    attention_keeps_scores<Act>,
    residual_forward<Act>,
    cross_entropy<Act>,
    sum_of_squares<Act>,
    adamw<Act>,
    decode_embedding<Act>,
    kv_cache_write<Act>,
    decode_attention<Act>,
    sample<Act>,
    checked_graph_refusal,
};

}  // namespace

template <typename Act>
const Ops<Act>* checked_table(const Ops<Act>& tested, const Ops<Act>& reference,
                              ExercisesIn exercises_in, int every, int steps, int first_step) {
    Check<Act>& c = check<Act>;
    c.start(tested, reference, exercises_in, every, steps, first_step);
    c.name = std::string(tested.name) + ", each op checked against the reference on step 0 and " +
             "every " + std::to_string(every) + " steps";
    kChecked<Act>.name = c.name.c_str();
    return &kChecked<Act>;
}
template const Ops<float>* checked_table(const Ops<float>&, const Ops<float>&, ExercisesIn, int,
                                         int, int);
template const Ops<bf16>* checked_table(const Ops<bf16>&, const Ops<bf16>&, ExercisesIn, int, int,
                                        int);

}  // namespace trainer
