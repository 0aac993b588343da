// trainer/train_gpt: the course's GPT trainer. Trains a GPT-2-style model on token shards, with
// validation, checkpoints, a loss curve and samples, and generates text from a checkpoint (with a
// KV cache, or without it: --generate-bench times both); --quantize measures a checkpoint's
// validation loss with its linear layers' weights in module 09's INT8 and INT4 formats.
//
// Teaches: the loop around a model. Gradient accumulation over micro-batches, the learning-rate
// schedule (linear warmup, then cosine decay), clipping by the global gradient norm, AdamW, fp16's
// dynamic loss scaling (a step whose gradients overflowed is skipped), checkpoints that resume
// exactly where they stopped, and how throughput is reported (tokens per second, and MFU: the
// model's FLOPs per second as a share of what the GPU can do).
//
// Read it top to bottom: options, the learning rate, the loss curve of a resumed run, sampling,
// then main(). Checkpoints: checkpoint.h; generation: generate.h; quantized weights: quantize.h.
//
// Run:  python3 trainer/prepare_data.py                      (once: data/shakespeare/)
//       build/trainer/bin/train_gpt -m tiny --steps 200       (seconds)
//       build/trainer/bin/train_gpt --help
// More: trainer/README.md
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "checkpoint.h"
#include "course/check.h"
#include "data.h"
#include "data_parallel.h"
#include "generate.h"
#include "gpt.h"
#include "loss_scaler.h"
#include "quantize.h"
#include "sampling.h"

namespace trainer {
namespace {

// ---- Options ----

struct Options {
    std::string data = "data/shakespeare";  // DIR/train_*.bin, DIR/val_*.bin, DIR/tokenizer.bin
    std::string train, val, tokenizer;      // each overrides its part of --data
    std::string model = "tiny";
    std::string dtype;  // bf16 (default where the GPU has it), fp16 (default elsewhere) or fp32
    std::string kernels = "reference";
    std::string kernel_choices;       // module 08: which exercise runs each op (ops.h)
    int check_ops = 0;                // module 08: compare each exercise's op with the reference
    bool profile = false;             // time each op of the table alone
    std::string attention = "cudnn";  // cudnn (where the build has it) or flash
    int batch = 4, seq_len = 0, grad_accum = 1;  // seq_len 0: the model's context
    int steps = 100, warmup = -1;                // warmup -1: a tenth of the steps
    float lr = 6e-4f, min_lr_fraction = 0.1f, weight_decay = 0.1f, beta1 = 0.9f, beta2 = 0.95f;
    float eps = 1e-8f, clip = 1.0f;
    unsigned long long seed = 1337;
    int val_every = 50, val_batches = 10;
    int checkpoint_every = 0, sample_every = 0, sample_length = 128;
    // A run that can stop and go on (--resume): DIR/latest.ckpt every so many seconds, and
    // stops before a time limit or at a step (0: never).
    double checkpoint_seconds = 0.0, time_limit = 0.0;
    int stop_at = 0;
    float temperature = 1.0f;
    int top_k = 40;
    float top_p = 1.0f;
    std::string out = "out";
    bool save = true;
    std::string resume;
    bool generate = false;
    int generate_batch = 0;  // sequences --generate samples (0: not given, 1)
    bool kv_cache = true;    // generation with the KV cache (--no-kv-cache: a forward per token)
    bool cuda_graph = true;  // with it, each decoding step a CUDA graph (--no-cuda-graph: not)
    int generate_bench = 0;  // new tokens per sequence the bench times (0: no bench)
    std::vector<QuantFormat> quantize;  // --quantize's formats (none: no quantization table)
    std::string dump_step0;
    double peak_tflops = 0.0;  // 0: from the GPU's name
    // Several GPUs: the gradients' all-reduce buckets in MB (0: one all-reduce after the
    // backward). 100 MB: the fastest of 25, 100 and 1000 on two H100s (dev/tuning/11_multi_gpu.md).
    float bucket_mb = 100.0f;
    int zero = 0;              // several GPUs: 1 shards the optimizer (ZeRO-1)
};

const char* kUsage = R"(usage: train_gpt [options]
Trains a GPT-2-style model on token shards (make them with trainer/prepare_data.py), samples
from a checkpoint with --generate, times generation with and without the KV cache with
--generate-bench, or measures a checkpoint with quantized linear weights with --quantize.

data
  --data DIR            DIR/train_*.bin, DIR/val_*.bin, DIR/tokenizer.bin   [data/shakespeare]
  --train GLOB --val GLOB --tokenizer FILE   override one part of --data (llm.c's shards work)
model
  -m, --model NAME      tiny, small, gpt2-124m                              [tiny]
  --dtype NAME          bf16 or fp16: mixed precision, fp32 master weights  [bf16; fp16
                        (fp16 with dynamic loss scaling); fp32: all-fp32    before sm_80]
  --kernels NAME        the table of ops (trainer/ops.h): reference, profile [reference]
                        (the reference, each op timed), learner (your exercises' kernels, module
                        08), solutions (the course's readable solutions in their place),
                        fast (the course's fast references)
  --kernel-choices FILE learner/solutions/fast: which exercise runs each op, lines "op exercise"
                        [written by grader run 08/train_gpt: trainer_kernels/<variant>.txt]
  --check-ops N         learner/solutions/fast: run the reference beside every op that runs an
                        exercise, on step 0 and every N steps, and stop where they differ [0: off]
  --profile             time each op of the table alone (GPU time per op at exit)
  --attention NAME      bf16 attention: cudnn (cuDNN's fused attention,       [cudnn]
                        where the build has cuDNN) or flash (module 07's kernels:
                        flash_wgmma's on Hopper, flash_tc's elsewhere);
                        fp16 and fp32: cuBLAS products and a causal softmax
batch
  -b N                  sequences per micro-batch                           [4]
  -t N                  tokens per sequence                                 [the model's context]
  --grad-accum N        micro-batches per step                              [1]
optimization
  --steps N             optimizer steps                                     [100]
  --lr X                peak learning rate                                  [6e-4]
  --warmup N            steps of linear warmup                              [steps / 10]
  --min-lr-fraction X   the cosine ends at X * lr                           [0.1]
  --weight-decay X      AdamW's decoupled decay, matrices only              [0.1]
  --beta1 X --beta2 X --eps X                                               [0.9 0.95 1e-8]
  --clip X              clip the gradient's global norm (0: never)          [1.0]
  --seed N              initial weights and sampling                        [1337]
evaluation and output
  --val-every N         validation loss every N steps (0: never)            [50]
  --val-batches N       micro-batches of validation                         [10]
  --out DIR             loss.csv and model.ckpt go here                     [out]
  --checkpoint-every N  also save model_step<N>.ckpt every N steps          [0: at the end only]
  --no-checkpoint       save no model.ckpt at the end (timing runs)
  --resume FILE         continue from a checkpoint (same model); loss.csv in --out keeps its
                        rows up to the checkpoint's step and goes on from there
  --sample-every N      print a sample every N steps (0: at the end only)   [0]
  --sample-length N --temperature X --top-k N --top-p X                     [128 1.0 40 1.0]
                        (top-k 0 and top-p 1: off; ties at a threshold are kept)
  --generate            only sample from --resume's model
  --generate-batch N    --generate samples N sequences at once              [1]
  --no-kv-cache         generate with a whole forward pass per new token instead of the KV
                        cache (the same tokens for the same seed, up to rounding: trainer/README.md)
  --no-cuda-graph       with the KV cache, launch each decoding step's kernels one by one instead
                        of replaying the step as a CUDA graph (the same tokens, bit for bit)
  --generate-bench N    time generation of N new tokens per sequence with the KV cache and
                        without, at batch 1 and 16 (--generate-batch B: 1 and B), for --resume's
                        model or an untrained -m
  --quantize LIST       only measure --resume's model with its linear layers' weights quantized
                        (module 09's formats: w8a16, w4a16, or both: w8a16,w4a16): the
                        validation loss and the weights' memory beside the unquantized model's
  --dump-step0 DIR      write step 0's weights, batch, logits, loss and gradients (the PyTorch check)
  --peak-tflops X       the GPU's dense 16-bit peak, for MFU                [from the GPU's name]
stopping and going on (a long run in pieces)
  --checkpoint-seconds S  keep DIR/latest.ckpt (DIR: --out), saved again    [0: never]
                        whenever S seconds have passed since the last save: a run stopped any
                        way (Ctrl-C, a lost session) goes on from it with --resume
                        DIR/latest.ckpt; removed when the run ends
  --time-limit S        stop before S seconds from the start: where the     [0: none]
                        next step (with its validation and a checkpoint) would end later, save
                        DIR/latest.ckpt and exit with status 3 (--resume DIR/latest.ckpt goes on)
  --stop-at N           the same after N steps of the --steps schedule      [0: never]
several GPUs of this machine
  trainer/launch.sh N [options]   one process per GPU, the gradients summed by NCCL every step;
                        -b is per GPU (N GPUs at -b B take the steps of one at -b N*B)
  --bucket-mb X         sum the gradients in buckets of X MB while the backward  [100]
                        goes on (module 11's data_parallel_step); 0: in one
                        all-reduce after the backward
  --zero 1              ZeRO-1: each GPU keeps and updates 1/N of the optimizer  [0]
                        (the gradients reduce-scattered after the backward, the
                        new weights all-gathered)
)";

[[noreturn]] void usage_error(const std::string& message) {
    throw std::invalid_argument(message + " (train_gpt --help lists the options)");
}

Options parse_options(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (flag == "-h" || flag == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        }
        if (flag == "--generate") {
            o.generate = true;
            continue;
        }
        if (flag == "--no-checkpoint") {
            o.save = false;
            continue;
        }
        if (flag == "--profile") {
            o.profile = true;
            continue;
        }
        if (flag == "--no-kv-cache") {
            o.kv_cache = false;
            continue;
        }
        if (flag == "--no-cuda-graph") {
            o.cuda_graph = false;
            continue;
        }
        if (i + 1 >= argc) usage_error(flag + " needs a value");
        const std::string value = argv[++i];
        auto number = [&](auto* target) {
            try {
                std::size_t used = 0;
                const double parsed = std::stod(value, &used);
                if (used != value.size()) throw std::invalid_argument(value);
                using T = std::remove_pointer_t<decltype(target)>;
                if (std::is_integral_v<T> && (parsed != std::floor(parsed) || parsed < 0))
                    throw std::invalid_argument(value);
                *target = static_cast<T>(parsed);
            } catch (const std::logic_error&) {
                usage_error(flag + " takes a number, not '" + value + "'");
            }
        };
        if (flag == "--data")
            o.data = value;
        else if (flag == "--train")
            o.train = value;
        else if (flag == "--val")
            o.val = value;
        else if (flag == "--tokenizer")
            o.tokenizer = value;
        else if (flag == "-m" || flag == "--model")
            o.model = value;
        else if (flag == "--dtype")
            o.dtype = value;
        else if (flag == "--kernels")
            o.kernels = value;
        else if (flag == "--attention")
            o.attention = value;
        else if (flag == "--kernel-choices")
            o.kernel_choices = value;
        else if (flag == "--check-ops")
            number(&o.check_ops);
        else if (flag == "-b")
            number(&o.batch);
        else if (flag == "-t")
            number(&o.seq_len);
        else if (flag == "--grad-accum")
            number(&o.grad_accum);
        else if (flag == "--steps")
            number(&o.steps);
        else if (flag == "--lr")
            number(&o.lr);
        else if (flag == "--warmup")
            number(&o.warmup);
        else if (flag == "--min-lr-fraction")
            number(&o.min_lr_fraction);
        else if (flag == "--weight-decay")
            number(&o.weight_decay);
        else if (flag == "--beta1")
            number(&o.beta1);
        else if (flag == "--beta2")
            number(&o.beta2);
        else if (flag == "--eps")
            number(&o.eps);
        else if (flag == "--clip")
            number(&o.clip);
        else if (flag == "--seed")
            number(&o.seed);
        else if (flag == "--val-every")
            number(&o.val_every);
        else if (flag == "--val-batches")
            number(&o.val_batches);
        else if (flag == "--out")
            o.out = value;
        else if (flag == "--checkpoint-every")
            number(&o.checkpoint_every);
        else if (flag == "--resume")
            o.resume = value;
        else if (flag == "--checkpoint-seconds")
            number(&o.checkpoint_seconds);
        else if (flag == "--time-limit")
            number(&o.time_limit);
        else if (flag == "--stop-at")
            number(&o.stop_at);
        else if (flag == "--sample-every")
            number(&o.sample_every);
        else if (flag == "--sample-length")
            number(&o.sample_length);
        else if (flag == "--temperature")
            number(&o.temperature);
        else if (flag == "--top-k")
            number(&o.top_k);
        else if (flag == "--top-p")
            number(&o.top_p);
        else if (flag == "--generate-batch" || flag == "--generate-bench") {
            int& target = flag == "--generate-batch" ? o.generate_batch : o.generate_bench;
            number(&target);
            if (target < 1) usage_error(flag + " must be at least 1");
        } else if (flag == "--quantize") {
            o.quantize.clear();
            for (std::size_t from = 0; from <= value.size();) {
                const std::size_t comma = std::min(value.find(',', from), value.size());
                const std::string name = value.substr(from, comma - from);
                QuantFormat format;
                if (!parse_quant_format(name, &format))
                    usage_error("--quantize " + value +
                                ": formats w8a16 and w4a16, comma-separated");
                o.quantize.push_back(format);
                from = comma + 1;
            }
        } else if (flag == "--dump-step0")
            o.dump_step0 = value;
        else if (flag == "--peak-tflops")
            number(&o.peak_tflops);
        else if (flag == "--bucket-mb")
            number(&o.bucket_mb);
        else if (flag == "--zero")
            number(&o.zero);
        else
            usage_error("unknown option " + flag);
    }
    if (o.train.empty()) o.train = o.data + "/train_*.bin";
    if (o.val.empty()) o.val = o.data + "/val_*.bin";
    if (o.tokenizer.empty()) o.tokenizer = o.data + "/tokenizer.bin";
    if (o.batch < 1 || o.grad_accum < 1) usage_error("-b and --grad-accum must be at least 1");
    if (o.warmup < 0) o.warmup = o.steps / 10;
    if (o.temperature <= 0.0f) usage_error("--temperature must be above 0");
    if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) usage_error("--top-p must be above 0 and at most 1");
    if (o.generate && o.generate_bench > 0)
        usage_error("--generate and --generate-bench: one or the other");
    if (!o.quantize.empty() && (o.generate || o.generate_bench > 0))
        usage_error("--quantize measures the validation loss: not with --generate or its bench");
    if (o.generate_bench > 0 && !o.kv_cache)
        usage_error("--generate-bench times generation both ways: drop --no-kv-cache");
    if (o.attention != "cudnn" && o.attention != "flash")
        usage_error("--attention " + o.attention + ": cudnn or flash");
    if (o.zero != 0 && o.zero != 1)
        usage_error("--zero " + std::to_string(o.zero) + ": 0 or 1 (ZeRO-1 shards the optimizer)");
    if (o.bucket_mb < 0) usage_error("--bucket-mb must be 0 or more");
    if (!o.dtype.empty() && o.dtype != "bf16" && o.dtype != "fp16" && o.dtype != "fp32")
        usage_error("--dtype " + o.dtype + ": bf16, fp16 or fp32");
    if (o.dtype == "fp16") exercise_table<fp16>(o.kernels);  // throws for module 08's tables
    if (o.checkpoint_seconds < 0 || o.time_limit < 0)
        usage_error("--checkpoint-seconds and --time-limit must be 0 or more");
    if (o.stop_at >= o.steps && o.stop_at > 0)
        usage_error("--stop-at " + std::to_string(o.stop_at) +
                    " is not before the last step (--steps " + std::to_string(o.steps) + ")");
    allow_cudnn_attention(o.attention == "cudnn");
    return o;
}

// ---- The learning rate: linear warmup to lr, then a cosine down to min_lr_fraction * lr ----

float learning_rate(const Options& o, int step) {
    if (step < o.warmup) return o.lr * (step + 1) / o.warmup;
    const float min_lr = o.lr * o.min_lr_fraction;
    const int decay_steps = std::max(1, o.steps - o.warmup);
    const double progress = std::min(1.0, static_cast<double>(step - o.warmup) / decay_steps);
    return static_cast<float>(min_lr + (o.lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

// ---- The loss curve of a resumed run ----

// loss.csv's first line.
constexpr const char* kLossCurveHeader =
    "step,train_loss,val_loss,lr,grad_norm,step_ms,tokens_per_s\n";

// The loss curve of a resumed run: the training rows of the steps up to the checkpoint's are
// kept, then the resumed steps are appended. A run stopped after its checkpoint may have written
// rows beyond it (the last one cut short, where it was killed); they go, so that the curve reads
// as the uninterrupted run's. A validation-only row ends a finished run: it goes too. Written
// beside the file, then renamed over it.
void keep_loss_rows(const std::string& path, int last_step) {
    std::ifstream in(path, std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    std::string kept = kLossCurveHeader;
    // Whole lines only: a line without its newline was cut short.
    for (std::size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
         start = end + 1) {
        const std::string row = text.substr(start, end + 1 - start);
        const std::size_t comma = row.find(',');
        const bool trained = std::isdigit(static_cast<unsigned char>(row[0])) &&
                             comma != std::string::npos && row[comma + 1] != ',';
        if (trained && std::atoi(row.c_str()) <= last_step) kept += row;
    }
    const std::string temporary = path + ".partial";
    {
        std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
        file << kept;
        if (!file) throw std::runtime_error(temporary + ": cannot write the loss curve");
    }
    std::filesystem::rename(temporary, path);
}

// ---- Generation ----

// What --sample-length, --temperature, --top-k, --top-p, --seed, --no-kv-cache and
// --no-cuda-graph ask of a generation of `sequences` sequences in a window of `context` tokens.
GenerationOptions generation_options(const Options& o, int sequences, int context) {
    GenerationOptions g;
    g.sequences = sequences;
    g.tokens = o.sample_length;
    g.context = context;
    g.sampling = {o.temperature, o.top_k, o.top_p};
    g.seed = o.seed;
    g.kv_cache = o.kv_cache;
    g.cuda_graph = o.cuda_graph;
    return g;
}

// Text generated after the end-of-text token (generate.h), each sequence after a line of its own
// where there are several.
template <typename Act>
std::string generate(Gpt<Act>& model, const Tokenizer& tokenizer, const Options& o, int sequences,
                     int context) {
    const std::vector<std::vector<int>> tokens = generate_tokens(
        model, {tokenizer.end_of_text()}, generation_options(o, sequences, context));
    std::string text;
    for (int b = 0; b < sequences; ++b) {
        if (sequences > 1)
            text += std::string(b > 0 ? "\n" : "") + "--- sequence " + std::to_string(b + 1) +
                    " of " + std::to_string(sequences) + " ---\n";
        for (int token : tokens[b]) text += tokenizer.decode(token);
    }
    return text;
}

// --generate-bench N: N new tokens per sequence after the end-of-text token, with the KV cache and
// without, at batch 1 and at batch 16 (or --generate-batch), one line per batch: tokens/s (new
// tokens of every sequence over the wall time of the whole generation, sampling and copies
// included), how the cached way's decoding steps ran (as CUDA graphs, or, with --no-cuda-graph
// or a table that refuses graphs, their kernels one by one), the speed-up, and how many steps
// drew the same tokens both ways. Each way is timed after an untimed run of its own, which makes
// cuBLASLt's and cuDNN's plans for every shape it meets (without the cache, a shape per window
// length) and captures the cached way's graph.
template <typename Act>
void generation_bench(Gpt<Act>& model, const Options& o, const std::vector<int>& batches,
                      int end_of_text) {
    Options timed = o;
    timed.sample_length = o.generate_bench;
    // The tokens of the timed run; its seconds, and its steps run by a CUDA graph.
    const auto run = [&](int B, bool kv_cache, double* seconds, long* graphed) {
        timed.kv_cache = kv_cache;
        const GenerationOptions g = generation_options(timed, B, model.config().max_seq_len);
        generate_tokens(model, {end_of_text}, g);  // untimed: the plans, and the graph
        const long before = model.decode_graph_use().steps;
        const auto start = std::chrono::steady_clock::now();
        std::vector<std::vector<int>> tokens = generate_tokens(model, {end_of_text}, g);
        *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        *graphed = model.decode_graph_use().steps - before;
        return tokens;
    };
    for (int B : batches) {
        double cached_s = 0.0, uncached_s = 0.0;
        long graphed = 0, none = 0;
        const auto cached = run(B, true, &cached_s, &graphed);
        const std::string how = graphed == o.generate_bench ? "each step a CUDA graph"
                                : graphed == 0
                                    ? "kernels launched one by one"
                                    : std::to_string(graphed) + " of " +
                                          std::to_string(o.generate_bench) + " steps a CUDA graph";
        const auto uncached = run(B, false, &uncached_s, &none);
        const auto agree_at = [&](int step) {  // every sequence drew the same token both ways
            for (int b = 0; b < B; ++b)
                if (cached[b][step] != uncached[b][step]) return false;
            return true;
        };
        int same = 0;
        while (same < o.generate_bench && agree_at(same)) ++same;
        const double tokens = static_cast<double>(B) * o.generate_bench;
        std::printf(
            "generation bench: batch %d, %d new tokens per sequence: KV cache %.0f tok/s "
            "(%.3f s, %s), no cache %.0f tok/s (%.3f s): %.1fx; the same tokens both ways for %d "
            "of %d steps\n",
            B, o.generate_bench, tokens / cached_s, cached_s, how.c_str(), tokens / uncached_s,
            uncached_s, uncached_s / cached_s, same, o.generate_bench);
        std::fflush(stdout);
    }
}

// ---- Validation, and the quantized weights' table (--quantize; quantize.h) ----

// The mean loss of the first o.val_batches micro-batches of the validation shards.
template <typename Act>
float validation_loss(Gpt<Act>& model, TokenLoader& val, const Options& o, int T) {
    val.rewind();
    std::vector<int> inputs, targets;
    double sum = 0.0;
    for (int i = 0; i < o.val_batches; ++i) {
        val.next_batch(&inputs, &targets);
        sum += model.loss(inputs.data(), targets.data(), o.batch, T);
    }
    return static_cast<float>(sum / o.val_batches);
}

// The validation loss of the checkpoint's weights, then of the same weights with the linear layers
// fake-quantized in each format (quantize.h: quantized and dequantized on the host, the forward
// unchanged, so the difference is the format's error, up to the activations' type's rounding of
// the dequantized weights: trainer/README.md), and the linear weights' bytes in each.
template <typename Act>
void quantization_table(Gpt<Act>& model, const Options& o, const std::vector<float>& params,
                        TokenLoader& val, int T) {
    const GptConfig& config = model.config();
    const double mib = 1048576.0;
    model.set_params(params);
    const float unquantized = validation_loss(model, val, o, T);
    std::printf("%-8s %9s %9s %14s\n", "weights", "val loss",
                (std::string("vs ") + kDtypeName<Act>).c_str(), "linear weights");
    std::printf("%-8s %9.4f %9s %10.2f MiB  (%s, as trained)\n", kDtypeName<Act>, unquantized, "",
                linear_weight_bytes_16bit(config) / mib, kDtypeName<Act>);
    std::fflush(stdout);
    for (QuantFormat format : o.quantize) {
        model.set_params(fake_quantize_params(config, params, format));
        const float loss = validation_loss(model, val, o, T);
        std::printf("%-8s %9.4f %+9.4f %10.2f MiB  (%s)\n", quant_format_name(format), loss,
                    loss - unquantized, linear_weight_bytes(config, format) / mib,
                    quant_format_layout(format));
        std::fflush(stdout);
    }
}

// ---- Throughput ----

// Dense 16-bit tensor-core peaks (TFLOP/s) by GPU name, for MFU (bf16 and fp16 are the same
// where both exist; the T4's is fp16's); 0 where unknown.
double peak_tflops_of(const std::string& name) {
    struct Peak {
        const char* name;
        double tflops;
    };
    static const Peak peaks[] = {{"H100", 989.4},    {"H200", 989.4}, {"H800", 989.4},
                                 {"A100", 312.0},    {"A800", 312.0}, {"L40S", 362.1},
                                 {"L4", 121.0},      {"A10", 125.0},  {"RTX 4090", 165.2},
                                 {"RTX 3090", 71.0}, {"T4", 65.0}};
    for (const Peak& peak : peaks)
        if (name.find(peak.name) != std::string::npos) return peak.tflops;
    return 0.0;
}

std::string duration(double seconds) {
    const long s = std::lround(seconds);
    char text[32];
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    return text;
}

// ---- Dumping step 0 for the PyTorch check (trainer/torch_check.py reads these files) ----

template <typename T>
void write_array(const std::string& path, const std::vector<T>& values) {
    std::ofstream file(path, std::ios::binary);
    file.write(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    if (!file) throw std::runtime_error(path + ": cannot write");
}

template <typename Act>
void dump_step0(Gpt<Act>& model, TokenLoader& loader, const Options& o, int T) {
    std::filesystem::create_directories(o.dump_step0);
    std::vector<int> inputs, targets;
    loader.next_batch(&inputs, &targets);
    loader.rewind();  // training starts from the same batch
    const std::string dir = o.dump_step0 + "/";
    write_array(dir + "params.bin", model.params());
    write_array(dir + "inputs.bin", inputs);
    write_array(dir + "targets.bin", targets);
    const float loss = model.loss(inputs.data(), targets.data(), o.batch, T);
    write_array(dir + "logits.bin", model.logits(o.batch, T));
    model.zero_grads();
    // fp16: the backward from the loss scaled as the first step scales it, the gradients divided
    // back (exactly: the scale is a power of two), as PyTorch's GradScaler unscales them.
    const float loss_scale = std::is_same_v<Act, fp16> ? LossScaler::kInitialScale : 1.0f;
    model.forward_backward(inputs.data(), targets.data(), o.batch, T, loss_scale / (o.batch * T));
    std::vector<float> grads = model.grads();
    for (float& g : grads) g /= loss_scale;
    write_array(dir + "grads.bin", grads);
    model.zero_grads();
    const GptConfig& c = model.config();
    std::ofstream meta(dir + "meta.txt");
    meta.precision(9);  // the loss is compared to 1e-4 and better
    meta << "layers " << c.layers << "\nchannels " << c.channels << "\nheads " << c.heads
         << "\nmax_seq_len " << c.max_seq_len << "\nvocab_size " << c.vocab_size
         << "\npadded_vocab_size " << c.padded_vocab_size << "\nB " << o.batch << "\nT " << T
         << "\nloss " << loss << "\n";
    std::printf("step 0 dumped to %s (loss %.6f)\n", o.dump_step0.c_str(), loss);
}

// ---- Training ----

// The exit status of a run stopped by --time-limit or --stop-at (its latest.ckpt goes on).
constexpr int kStopped = 3;
// --time-limit counts from here.
const auto program_start = std::chrono::steady_clock::now();

template <typename Act>
int run(const Options& o, const GptConfig& config, const Tokenizer& tokenizer, TokenLoader* train,
        TokenLoader* val, const Checkpoint* resumed, int T, const std::string& gpu_name,
        DataParallel& ranks) {
    const Ops<Act>* ops = ops_table<Act>(o.kernels);
    if (!ops)
        throw std::invalid_argument("--kernels " + o.kernels +
                                    ": no such table of ops (this build has: " + ops_table_names() +
                                    ")");
    if (o.profile) ops = profiled_table(*ops);
    if (o.generate) {
        // With the cache, the activations take one sequence at a time (its prefill); without it,
        // every sequence's window at once.
        const int sequences = std::max(o.generate_batch, 1);
        Gpt<Act> model(config, *ops, o.kv_cache ? 1 : sequences, config.max_seq_len);
        model.set_params(resumed->params);
        std::printf("%s\n", generate(model, tokenizer, o, sequences, config.max_seq_len).c_str());
        return 0;
    }
    if (!o.quantize.empty()) {
        Gpt<Act> model(config, *ops, o.batch, T);
        std::printf(
            "quantized weights: %s (%s), %s activations, kernels: %s; validation loss over %d "
            "batches of %d x %d tokens; quantized: every block's qkv, attention projection and "
            "MLP weights (the embeddings, LM head, LayerNorms and biases stay %s)\n",
            o.resume.c_str(), describe(config).c_str(), kDtypeName<Act>, ops->name, o.val_batches,
            o.batch, T, kDtypeName<Act>);
        quantization_table(model, o, resumed->params, *val, T);
        return 0;
    }
    if (o.generate_bench > 0) {
        std::vector<int> batches = {1};
        if (o.generate_batch != 1) batches.push_back(o.generate_batch > 0 ? o.generate_batch : 16);
        Gpt<Act> model(config, *ops, batches.back(), config.max_seq_len);
        model.set_params(resumed ? resumed->params : initial_params(config, o.seed));
        model.reserve_kv_cache(batches.back());
        std::printf(
            "generation bench: %s (%s), %s, %s weights, kernels: %s; temperature %g, top-k %d, "
            "top-p %g; %.2f GiB allocated, of which the KV cache for %d sequences %.2f GiB\n",
            resumed ? o.resume.c_str() : o.model.c_str(), describe(config).c_str(), kDtypeName<Act>,
            resumed ? "trained" : "untrained", ops->name, o.temperature, o.top_k, o.top_p,
            model.device_bytes() / 1073741824.0, batches.back(),
            model.kv_cache_bytes() / 1073741824.0);
        std::fflush(stdout);
        generation_bench(model, o, batches, tokenizer.end_of_text());
        return 0;
    }
    const bool sharded = ranks.gradient_sum() == GradientSum::sharded && ranks.processes() > 1;
    Gpt<Act> model(config, *ops, o.batch, T, OptimizerShard{sharded ? &ranks : nullptr});
    if (resumed) {
        model.set_params(resumed->params);
        model.set_optimizer_state(resumed->m, resumed->v);
        train->seek(resumed->shard, resumed->offset);
    } else {
        model.set_params(initial_params(config, o.seed));
    }
    if (!o.dump_step0.empty()) dump_step0(model, *train, o, T);

    // Every rank takes o.batch x T tokens per micro-batch: a step is all the ranks' tokens.
    const int gpus = ranks.processes();
    const long long tokens_per_step =
        static_cast<long long>(o.batch) * T * o.grad_accum * gpus;
    const double flops_per_step = flops_per_token(config, T) * tokens_per_step;
    const double peak = o.peak_tflops > 0 ? o.peak_tflops : peak_tflops_of(gpu_name);
    std::string precision = kDtypeName<Act>;
    if (!std::is_same_v<Act, float>) precision += " with fp32 master weights";
    if (std::is_same_v<Act, fp16>) precision += " and dynamic loss scaling";
    std::printf("model %s (%s), %.1fM parameters, %s, kernels: %s\n", o.model.c_str(),
                describe(config).c_str(), param_layout(config).total / 1e6, precision.c_str(),
                ops->name);
    const int head_size = config.channels / config.heads;
    if (!ops->attention_keeps_scores(head_size)) {
        const std::string flash =
            std::string("module 07's flash kernels (fast references): ") +
            (flash_wgmma_runs_here()
                 ? "flash_wgmma, flash_wgmma_backward, on the packed qkv (Hopper)"
                 : "flash_tc, flash_backward");
        if (o.attention == "cudnn")
            std::printf("attention: fused, cuDNN's (where it refuses, %s)\n", flash.c_str());
        else
            std::printf("attention: fused, %s (--attention flash)\n", flash.c_str());
    } else
        std::printf("attention: the T x T way, cuBLAS products and a causal softmax (%s)\n",
                    !std::is_same_v<Act, bf16> ? "the fused kernels here are bf16's"
                    : head_size == 64 || head_size == 128
                        ? "the fused kernels need compute capability 8.0 in the GPU and the build"
                        : "the fused kernels take heads of 64 or 128");
    std::printf(
        "batch %d x %d tokens x %d micro-batches x %d GPUs = %lld tokens per step, %d steps; GPU "
        "%s, %.2f GiB allocated\n",
        o.batch, T, o.grad_accum, gpus, tokens_per_step, o.steps, gpu_name.c_str(),
        model.device_bytes() / 1073741824.0);
    if (gpus > 1) {
        const char* how = ranks.gradient_sum() == GradientSum::overlapped
                              ? "all-reduced in buckets during the backward"
                          : sharded ? "reduce-scattered after the backward (ZeRO-1)"
                                    : "all-reduced after the backward";
        std::printf("%d GPUs: gradients %s; optimizer moments %.2f GiB per GPU\n", gpus, how,
                    model.optimizer_bytes() / 1073741824.0);
    }

    std::filesystem::create_directories(o.out);
    const std::string csv_path = o.out + "/loss.csv";
    const bool append = resumed && std::filesystem::exists(csv_path);
    std::ofstream csv;  // rank 0's: the other ranks' writes go nowhere
    if (ranks.main()) {
        if (append) keep_loss_rows(csv_path, resumed->step);
        csv.open(csv_path, append ? std::ios::app : std::ios::trunc);
        if (!csv) throw std::runtime_error(csv_path + ": cannot write the loss curve");
        if (!append) csv << kLossCurveHeader;
    }

    auto validation_loss = [&]() { return trainer::validation_loss(model, *val, o, T); };
    // fp16's loss scaling (loss_scaler.h): the backward starts from the loss times scaler.scale(),
    // the update divides it out; bf16 and fp32 keep a scale of 1.
    constexpr bool scaled = std::is_same_v<Act, fp16>;
    LossScaler scaler(scaled ? LossScaler::kInitialScale : 1.0f);
    if (scaled && resumed) restore_loss_scaler(*resumed, &scaler);
    // Rank 0 writes; sharded, every rank takes part in gathering the weights and moments.
    auto save = [&](int step, const std::string& name) {
        csv.flush();  // the loss curve's rows up to `step` are on disk before its checkpoint is
        if (!sharded && !ranks.main()) return;
        Checkpoint checkpoint{config, step, train->shard_index(), train->offset(), model.params(),
                              {},     {}};
        model.optimizer_state(&checkpoint.m, &checkpoint.v);
        if (scaled) record_loss_scaler(scaler, &checkpoint);
        if (ranks.main()) save_checkpoint(o.out + "/" + name, checkpoint);
    };

    // Stopping and going on: before each step, save DIR/latest.ckpt where --checkpoint-seconds
    // have passed since the last save, and stop (after saving it) at --stop-at, or where the
    // step, its validation and a save would end past --time-limit. The estimates are this
    // process's last step, validation and save; until a save is timed, 0.5 GB/s.
    const bool resumable = o.checkpoint_seconds > 0 || o.time_limit > 0 || o.stop_at > 0;
    const std::string latest = o.out + "/latest.ckpt";
    auto since = [](std::chrono::steady_clock::time_point then) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - then).count();
    };
    auto last_save = std::chrono::steady_clock::now();
    double step_estimate = 0.0, val_estimate = -1.0;
    double save_estimate = 3.0 * sizeof(float) * param_layout(config).total / 0.5e9;
    // Every rank takes the same decision (a sharded save gathers from all; a stop ends them all).
    auto agreed = [&](bool wanted) {
        return ranks.processes() > 1 ? ranks.mean(wanted ? 1.0f : 0.0f) > 0.0f : wanted;
    };

    std::vector<int> inputs, targets, others_inputs, others_targets;
    double timed_seconds = 0.0;
    int timed_steps = 0;
    std::size_t peak_used = 0;
    const int first = resumed ? resumed->step : 0;
    for (int step = first; step < o.steps; ++step) {
        const bool validates = val && step % o.val_every == 0;
        if (resumable && step > first) {
            // The last step is followed by the final validation.
            const int validations = validates + (val && step == o.steps - 1);
            const double val_seconds = val_estimate >= 0
                                           ? val_estimate
                                           : step_estimate * o.val_batches / (3.0 * o.grad_accum);
            const bool late =
                o.time_limit > 0 &&
                since(program_start) + step_estimate + validations * val_seconds + save_estimate >
                    o.time_limit;
            const bool stop = agreed(step == o.stop_at || late);
            if (stop ||
                agreed(o.checkpoint_seconds > 0 && since(last_save) >= o.checkpoint_seconds)) {
                const auto start = std::chrono::steady_clock::now();
                save(step, "latest.ckpt");
                save_estimate = since(start);
                last_save = std::chrono::steady_clock::now();
            }
            if (stop) {
                std::printf("stopped after step %d of %d (%s): --resume %s goes on\n", step,
                            o.steps, late ? "--time-limit" : "--stop-at", latest.c_str());
                return kStopped;
            }
        }
        float val_loss = NAN;
        if (validates) {
            const auto start = std::chrono::steady_clock::now();
            val_loss = validation_loss();
            val_estimate = since(start);
            std::printf("step %5d | val loss %.4f\n", step, val_loss);
        }
        if (ranks.main() && o.sample_every > 0 && step > 0 && step % o.sample_every == 0)
            std::printf("--- sample at step %d ---\n%s\n---\n", step,
                        generate(model, tokenizer, o, 1, T).c_str());
        if (o.checkpoint_every > 0 && step > 0 && step % o.checkpoint_every == 0)
            save(step, "model_step" + std::to_string(step) + ".ckpt");

        const auto start = std::chrono::steady_clock::now();
        const float scale = scaler.scale();
        model.zero_grads();
        double loss = 0.0;
        for (int micro = 0; micro < o.grad_accum; ++micro) {
            // Every rank reads the same micro-batches in the same order and keeps the rank-th:
            // the loaders stay at one position, the one a checkpoint records.
            for (int r = 0; r < ranks.processes(); ++r)
                train->next_batch(r == ranks.rank() ? &inputs : &others_inputs,
                                  r == ranks.rank() ? &targets : &others_targets);
            // The last micro-batch's backward finishes the step's gradients: their sum across the
            // ranks may start as it goes.
            const bool last = micro == o.grad_accum - 1;
            loss += model.forward_backward(inputs.data(), targets.data(), o.batch, T,
                                           scale / tokens_per_step,
                                           last ? ranks.gradients_finished() : nullptr) /
                    o.grad_accum;
        }
        // Each rank's gradients are its share of the sum over the step's tokens: summed, they are
        // the step's gradient on every rank, and so is the update.
        ranks.sum_gradients(model.device_grads(), model.gradient_slice());
        loss = ranks.mean(static_cast<float>(loss));
        const float lr = learning_rate(o, step);
        // AdamW counts the steps it took (its bias correction): a skipped step is not one.
        const float norm = model.update(lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.clip,
                                        step + 1 - static_cast<int>(scaler.skipped()), scale);
        CUDA_CHECK(cudaDeviceSynchronize());
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (!std::isfinite(loss))
            throw std::runtime_error(
                "the loss is " + std::to_string(loss) + " at step " + std::to_string(step) +
                ": lower the learning rate (--lr)" +
                (scaled ? " (or train in fp32: an fp16 activation may have passed 65504)" : ""));
        // An overflow in the scaled backward: the step was not taken (fp16). Elsewhere the
        // gradient of a finite loss is not inf or NaN unless the run diverges.
        if (!scaled && !std::isfinite(norm))
            throw std::runtime_error("the gradient's norm is " + std::to_string(norm) +
                                     " at step " + std::to_string(step) +
                                     ": lower the learning rate (--lr)");
        const bool taken = !scaled || scaler.update(std::isfinite(norm));
        std::string scaling;  // what the loss scaler did, where it did something
        if (scaled && scaler.scale() != scale)
            scaling = (taken ? " | loss scale up to " : " | overflow: step skipped, loss scale ") +
                      std::to_string(static_cast<long long>(scaler.scale()));
        step_estimate = seconds;
        if (step == first) {
            std::size_t free_bytes = 0, total_bytes = 0;
            CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
            peak_used = total_bytes - free_bytes;
            forget_op_times();  // --kernels profile: the later steps' times only
        } else {                // the first step pays for cuBLAS's plans and allocations
            timed_seconds += seconds;
            ++timed_steps;
        }
        const double tokens_per_s = tokens_per_step / seconds;
        // MFU per GPU: each GPU's share of the step's FLOPs against its own peak.
        const double mfu = peak > 0 && !std::is_same_v<Act, float>
                               ? flops_per_step / gpus / seconds / (peak * 1e12)
                               : NAN;
        const double mean_step = timed_steps ? timed_seconds / timed_steps : seconds;
        char mfu_text[16] = "-";
        if (std::isfinite(mfu)) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100 * mfu);
        std::printf(
            "step %5d/%d | loss %.4f | lr %.2e | norm %.3f | %.1f ms | %.0f tok/s | MFU %s | "
            "left %s%s\n",
            step + 1, o.steps, loss, lr, norm, 1e3 * seconds, tokens_per_s, mfu_text,
            duration(mean_step * (o.steps - step - 1)).c_str(), scaling.c_str());
        std::fflush(stdout);
        csv << step + 1 << ',' << loss << ','
            << (std::isnan(val_loss) ? "" : std::to_string(val_loss)) << ',' << lr << ',' << norm
            << ',' << 1e3 * seconds << ',' << tokens_per_s << '\n';
    }
    if (val) {
        const float val_loss = validation_loss();
        std::printf("step %5d | val loss %.4f\n", o.steps, val_loss);
        csv << o.steps << ",," << val_loss << ",,,,\n";
    }
    if (o.save) save(o.steps, "model.ckpt");
    if (ranks.main()) std::filesystem::remove(latest);  // the run ended: nothing to go on from
    if (timed_steps > 0) {
        const double tokens_per_s = tokens_per_step * timed_steps / timed_seconds;
        std::printf("mean over %d steps: %.1f ms/step, %.0f tok/s", timed_steps,
                    1e3 * timed_seconds / timed_steps, tokens_per_s);
        if (gpus > 1) std::printf(" (%.0f per GPU)", tokens_per_s / gpus);
        if (peak > 0 && !std::is_same_v<Act, float>)
            std::printf(", MFU %.1f%% of %.0f TFLOP/s%s",
                        100 * flops_per_token(config, T) * tokens_per_s / gpus / (peak * 1e12),
                        peak, gpus > 1 ? " per GPU" : "");
        std::printf("; GPU memory in use after the first step: %.2f GiB\n",
                    peak_used / 1073741824.0);
    }
    if (scaled)
        std::printf("fp16 loss scaling: %ld of %d steps skipped (overflow), loss scale %.0f\n",
                    scaler.skipped(), o.steps, scaler.scale());
    if (o.save) std::printf("checkpoint: %s/model.ckpt\n", o.out.c_str());
    std::printf("loss curve: %s\n", csv_path.c_str());
    if (o.sample_length > 0 && ranks.main())
        std::printf("--- sample ---\n%s\n---\n", generate(model, tokenizer, o, 1, T).c_str());
    return 0;
}

// Everything that can be checked without a GPU is checked first: options, tokenizer, shards,
// the checkpoint's shape.
int main_checked(int argc, char** argv) {
    const Options o = parse_options(argc, argv);
    DataParallel ranks = DataParallel::from_environment();
    if (ranks.processes() > 1 && !o.dump_step0.empty())
        usage_error("--dump-step0 writes one process's step (the PyTorch check): run it alone");
    if (ranks.processes() > 1 && !o.quantize.empty())
        usage_error("--quantize measures one model on one GPU: run it alone");
    std::unique_ptr<Checkpoint> resumed;
    if (!o.resume.empty())
        resumed = std::make_unique<Checkpoint>(load_checkpoint(o.resume));
    else if (o.generate)
        usage_error("--generate samples from a checkpoint: give it with --resume");
    else if (!o.quantize.empty())
        usage_error("--quantize measures a trained model: give its checkpoint with --resume");
    const Tokenizer tokenizer(o.tokenizer);

    GptConfig config;
    if (o.generate || (o.generate_bench > 0 && resumed) || !o.quantize.empty()) {
        config = resumed->config;  // the checkpoint says what model it is
    } else {
        if (!gpt_preset(o.model, tokenizer.vocab_size(), &config))
            usage_error("--model " + o.model + ": no such preset (" + gpt_preset_names() + ")");
        if (resumed && std::memcmp(&resumed->config, &config, sizeof config) != 0)
            throw std::runtime_error(o.resume + ": the checkpoint is a model of " +
                                     describe(resumed->config) + ", this run builds " +
                                     describe(config) + " (another --model or tokenizer?)");
    }
    // The op check counts the steps from the checkpoint's: a resumed run checks the steps that
    // an uninterrupted one would.
    configure_exercise_tables(
        {o.kernel_choices, o.check_ops, o.steps, resumed ? resumed->step : 0});
    if (tokenizer.vocab_size() != config.vocab_size)
        throw std::runtime_error(o.tokenizer + ": a vocabulary of " +
                                 std::to_string(tokenizer.vocab_size()) + ", the model has " +
                                 std::to_string(config.vocab_size));
    const int T = o.seq_len > 0 ? o.seq_len : config.max_seq_len;
    if (T > config.max_seq_len)
        usage_error("-t " + std::to_string(T) + " is longer than the model's context (" +
                    std::to_string(config.max_seq_len) + ")");
    for (QuantFormat format : o.quantize) {
        const std::string refusal = quant_format_refusal(config, format);
        if (!refusal.empty()) throw std::runtime_error(o.resume + ": " + refusal);
    }
    std::unique_ptr<TokenLoader> train, val;
    if (!o.quantize.empty()) {
        val = std::make_unique<TokenLoader>(o.val, config.vocab_size, o.batch, T);
    } else if (!o.generate && o.generate_bench == 0) {
        train = std::make_unique<TokenLoader>(o.train, config.vocab_size, o.batch, T);
        if (o.val_every > 0 && ranks.main())  // rank 0 validates for all
            val = std::make_unique<TokenLoader>(o.val, config.vocab_size, o.batch, T);
    }

    // This rank's GPU, the other ranks, and how the gradients are summed across them.
    ranks.join(o.zero ? GradientSum::sharded
               : o.bucket_mb > 0 ? GradientSum::overlapped
                                 : GradientSum::after_backward,
               static_cast<std::size_t>(o.bucket_mb * (1 << 20)));
    if (!ranks.main() && !std::freopen("/dev/null", "w", stdout))  // rank 0 speaks for all
        throw std::runtime_error("rank " + std::to_string(ranks.rank()) + ": cannot quiet stdout");
    cudaDeviceProp properties{};
    CUDA_CHECK(cudaGetDeviceProperties(&properties, ranks.rank()));
    // bf16 has fp32's range (no loss scaling) and tensor cores from compute capability 8.0; before
    // that, fp16's tensor cores (7.0 and newer: the T4 is 7.5) with loss scaling.
    const bool has_bf16 = properties.major >= 8;
    const std::string dtype = o.dtype.empty() ? (has_bf16 ? "bf16" : "fp16") : o.dtype;
    if (o.dtype.empty())
        std::printf("--dtype %s: the default on %s (compute capability %d.%d; bf16 from 8.0)\n",
                    dtype.c_str(), properties.name, properties.major, properties.minor);
    if (dtype == "bf16") {
        if (!has_bf16)
            throw std::runtime_error(std::string(properties.name) +
                                     " has no bf16 tensor cores (compute capability 8.0 or newer): "
                                     "use --dtype fp16 or fp32");
        return run<bf16>(o, config, tokenizer, train.get(), val.get(), resumed.get(), T,
                         properties.name, ranks);
    }
    if (dtype == "fp16")
        return run<fp16>(o, config, tokenizer, train.get(), val.get(), resumed.get(), T,
                         properties.name, ranks);
    return run<float>(o, config, tokenizer, train.get(), val.get(), resumed.get(), T,
                      properties.name, ranks);
}

}  // namespace
}  // namespace trainer

// Every error ends here as one line (and exit status 2 for a bad command line, 1 otherwise).
int main(int argc, char** argv) {
    try {
        return trainer::main_checked(argc, argv);
    } catch (const std::invalid_argument& e) {
        std::fprintf(stderr, "train_gpt: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "train_gpt: error: %s\n", e.what());
        return 1;
    }
}
