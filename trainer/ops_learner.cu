// trainer/ops_learner: module 08's exercise tables, the learner's kernels inside the trainer.
//
// Teaches: how kernels written against small contracts become a model's ops. Each op of the
// trainer (ops.h) that an exercise of the course can run (kernel_ops.toml) calls that exercise's
// contract function, with the trainer's shapes, and converts at the boundary where the contract's
// precision or layout is not the trainer's: an fp32 kernel in a bf16 run reads float copies of its
// bf16 inputs and its outputs are rounded back; attention's [B][H][T][D] heads are cut out of the
// packed qkv [B, T, 3C] and put back; sgemm's K x N B is a transposed weight; outputs that the
// contract writes but the trainer accumulates go to scratch and are added. Every op the learner
// has not plugged in is the reference's (ops_reference.cu), and so is everything around a plugged
// kernel that is not its exercise's (the bias add of a product, the GELU where gelu is not
// plugged). A stub that still calls COURSE_TODO falls back to the reference at its first call,
// and says so. Generation's ops take module 10's decode_attention, topk and sample the same way,
// where the course has the module (exercise_functions.h).
//
// What the conversions cost is the bf16 run's price for fp32 contracts, and the fast references
// avoid it: where the library of an op's exercise also defines the optional entry point with the
// trainer's own precision and layout (course/entry_point.h: vector_add_bf16, gemm_bf16_epilogue,
// layernorm_bf16, layernorm_backward_bf16, cross_entropy_bf16, flash_wgmma_packed), a bf16 run
// calls that instead, with nothing around it; a library without one (a learner's file) runs as
// above. The printout says which path each op took.
//
// Three tables: "learner", the files in modules/ (build/learner), "solutions", the readable
// solutions (build/solutions), and "fast", the fast references where an exercise has one, else
// its readable solution (build/fast). Each exercise file is a shared library of its own
// (trainer/CMakeLists.txt, kernel_entry.cpp), loaded at run time, so that the learner's files, the
// solutions and the reference's own module 06 and 07 kernels, which share their contracts' names,
// never meet at link time. Which exercise runs each op comes from a choices file that the grader
// writes from modules/08_training/kernels.toml (solutions/08_training/kernels.toml for the
// solutions, kernels_fast.toml for the fast references; ops.h: configure_exercise_tables).
//
// Run:  grader run 08/train_gpt     (or: build/learner/bin/train_gpt --kernels learner ...)
//       grader train --fast         (the fast references: build/fast/bin/train_gpt --kernels fast)
// Interface: ops.h; the op check beside it: ops_check.cu; module 08's README, section 5.
#include <cuda_bf16.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "course/check.h"
#include "course/launch.h"
#include "exercise_functions.h"
#include "ops.h"
#include "ops_check.h"
#include "ops_reference.h"

#ifndef TRAINER_BUILD_DIR  // the build tree, whose trainer_kernels/ holds the exercises' libraries
#define TRAINER_BUILD_DIR "."  // (trainer/CMakeLists.txt)
#endif
#define TRAINER_KERNELS_DIR TRAINER_BUILD_DIR "/trainer_kernels"

#if TRAINER_HAS_MODULE10  // module 10's decode_attention gets the trainer's workspace as it is
static_assert(::kDecodeMaxSplits == trainer::kDecodeMaxSplits &&
                  decode_attention_workspace_floats(3, 5, 64) ==
                      trainer::decode_workspace_floats(3, 5, 64),
              "module 10's decode_attention workspace is not the trainer's (ops.h)");
#endif

namespace trainer {
namespace {

// ---- The ops an exercise can run (kernel_ops.toml's op names, kernels.toml's keys) ----

enum ExerciseOp {
    kGemm,               // the products of every linear layer
    kLinearBackward,     // a linear layer's whole backward (08_training/linear_backward)
    kGelu,               // the MLP's activation, forward and backward
    kLayerNorm,          // LayerNorm's forward
    kLayerNormBackward,  // and its backward
    kAttention,          // causal self-attention's forward
    kAttentionBackward,  // and its backward
    kCrossEntropy,       // the loss and its gradient
    kResidual,           // the residual add
    kEmbedding,          // token and position embedding, forward and backward
    kAdamW,              // the optimizer step
    kDecodeAttention,    // generation: one new token's attention over the KV cache (module 10)
    kTopK,               // generation: each row's top_k-th largest logit, before the draw
    kSample,             // generation: the draw of the next token
    kExerciseOps
};
const char* const kExerciseOpNames[kExerciseOps] = {
    "gemm",      "linear_backward",    "gelu",          "layernorm", "layernorm_backward",
    "attention", "attention_backward", "cross_entropy", "residual",  "embedding",
    "adamw",     "decode_attention",   "topk",          "sample"};

// One op's exercise, where the choices name one.
struct Plugged {
    std::string exercise;  // "04_sgemm/sgemm_vectorized"; empty: the reference runs the op
    std::string boundary;  // what the table does around it (the printout)
    void* (*find)(const char* key) = nullptr;  // the library's trainer_exercise_function
    bool todo = false;  // its file still calls COURSE_TODO: the reference runs it since
    bool active() const { return !exercise.empty() && !todo; }
    template <typename F>
    F* function(const char* key) const {
        return find ? reinterpret_cast<F*>(find(key)) : nullptr;
    }
};

struct ExerciseTable {
    const char* name;     // --kernels NAME
    const char* variant;  // the build variant of its libraries (trainer/CMakeLists.txt)
    const char* whose;    // how the printout names its kernels
    std::array<Plugged, kExerciseOps> ops{};
    std::set<std::string> said;  // notes printed once
    bool loaded = false;
};

ExerciseTableOptions table_options;
constexpr int kTables = 3;
constexpr const char* kTableNames[kTables] = {"learner", "solutions", "fast"};  // --kernels NAME
ExerciseTable tables[kTables] = {{kTableNames[0], "learner", "yours"},
                                 {kTableNames[1], "solution", "solution"},
                                 {kTableNames[2], "fast", "fast"}};

// A note of a table, printed the first time only (a shape the contract does not take is met
// again on every step).
void note(ExerciseTable& table, const std::string& text) {
    if (table.said.insert(text).second) {
        std::printf("kernels (%s): %s\n", table.name, text.c_str());
        std::fflush(stdout);
    }
}

// Runs an exercise's kernel; false, having done nothing, where its file still calls COURSE_TODO
// (the exercise is then left out for good, and the caller runs the reference). Any other error
// goes on: a kernel that crashes must be named as a crash.
template <typename Call>
bool ran(ExerciseTable& table, ExerciseOp op, Call&& call) {
    Plugged& plugged = table.ops[op];
    if (!plugged.active()) return false;
    try {
        call();
        return true;
    } catch (const std::exception& e) {
        const std::string what = e.what();
        if (what.rfind("[course:todo]", 0) != 0) throw;
        plugged.todo = true;
        note(table, std::string(kExerciseOpNames[op]) + ": " + plugged.exercise +
                        " still calls COURSE_TODO (" + what.substr(14) +
                        "): the reference runs this op from now on");
        return false;
    }
}

// ---- Loading the exercises' libraries ----

// The library of one exercise's file, loaded once: trainer_kernels/<module>.<id>.<variant>.so.
void* (*load_library(const std::string& exercise, const char* variant))(const char*) {
    std::string file = exercise;
    std::replace(file.begin(), file.end(), '/', '.');
    const std::string path = std::string(TRAINER_KERNELS_DIR) + "/" + file + "." + variant + ".so";
    void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library)
        throw std::runtime_error(exercise + ": cannot load its kernel library (" + dlerror() +
                                 "): build it with `ninja -C " TRAINER_BUILD_DIR " " + file + "." +
                                 variant + "_kernel`, or let `grader run 08/train_gpt` do it");
    auto entry =
        reinterpret_cast<void* (*)(const char*)>(dlsym(library, "trainer_exercise_function"));
    if (!entry) throw std::runtime_error(path + " has no trainer_exercise_function");
    return entry;
}

// The choices file: "op exercise" per line, # comments. Ops it does not name are the reference's.
std::array<std::string, kExerciseOps> read_choices(const std::string& path) {
    std::ifstream file(path);
    if (!file)
        throw std::runtime_error(
            "no choice of kernels at " + path + " (`grader run 08/train_gpt` writes it from " +
            "modules/08_training/kernels.toml; or give --kernel-choices FILE, lines \"op " +
            "exercise\")");
    std::array<std::string, kExerciseOps> chosen{};
    std::string line;
    for (int number = 1; std::getline(file, line); ++number) {
        line = line.substr(0, line.find('#'));
        std::istringstream fields(line);
        std::string op, exercise, extra;
        if (!(fields >> op)) continue;
        const auto found = std::find(std::begin(kExerciseOpNames), std::end(kExerciseOpNames), op);
        if (!(fields >> exercise) || (fields >> extra) || found == std::end(kExerciseOpNames))
            throw std::runtime_error(path + ":" + std::to_string(number) +
                                     ": not \"op exercise\" with an op of kernel_ops.toml (gemm, "
                                     "layernorm, attention, ...): " +
                                     line);
        chosen[found - std::begin(kExerciseOpNames)] = exercise;
    }
    return chosen;
}

// Which of the contract's functions the library has for this mode, and what the table does
// around it; throws where it has none this mode can run.
template <typename Act>
std::string boundary(ExerciseOp op, const Plugged& p) {
    constexpr bool bf16_run = std::is_same_v<Act, bf16>;
    const char* const converted = bf16_run ? "an fp32 kernel in a bf16 run: its inputs converted "
                                             "to float, its outputs rounded back to bf16; "
                                           : "";
    const auto has = [&](const char* key) { return p.find(key) != nullptr; };
    const std::string act = bf16_run ? "bf16" : "float";
    // A bf16 run where the library lacks the op's bf16 entry point: said before the conversions.
    const auto without = [&](const char* key) {
        return bf16_run ? "(no " + std::string(key) + " in this library) " : std::string();
    };
    std::string text;
    switch (op) {
        case kGemm:
            if (has("gemm_bf16_epilogue") && bf16_run)
                return "gemm_bf16_epilogue: each product one call into bf16, the bias (and the "
                       "GELU or its derivative where gelu is not plugged) in its epilogue, W read "
                       "as stored for dinp, dout and inp for dW (MN-major: nothing transposed), "
                       "dW added into the float gradient; the bias gradient by the table's column "
                       "sums";
            if (has("gemm_bf16") && bf16_run)
                return without("gemm_bf16_epilogue") +
                       "the products in float (gemm_bf16's C), then bias, GELU and bf16 by the "
                       "table; W, dout and inp transposed for the backward's products (gemm_bf16 "
                       "takes A B^T), rows padded with zeros to a multiple of 8";
            if (has("sgemm"))
                return std::string(converted) +
                       "W transposed for the forward's product and dout for the weight gradient "
                       "(sgemm's B is K x N), which sgemm accumulates (beta 1); bias, GELU and the "
                       "bias gradient by the table";
            break;
        case kLinearBackward:
            if (has("linear_backward")) return std::string(converted) + "as its contract says";
            break;
        case kGelu:
        case kEmbedding:
        case kAdamW: {
            const char* key = op == kGelu        ? "gelu_forward"
                              : op == kEmbedding ? "embedding_forward"
                                                 : "adamw";
            if (has((std::string(key) + " " + act).c_str()))
                return "its " + act + " overload, as its contract says";
            break;
        }
        case kLayerNorm:
            if (has("layernorm_bf16") && bf16_run)
                return "layernorm_bf16: the bf16 rows as they are, in chunks of 2^26 values";
            if (has("layernorm"))
                return without("layernorm_bf16") + converted + "as its contract says";
            break;
        case kLayerNormBackward:
            if (has("layernorm_backward_bf16") && bf16_run)
                return "layernorm_backward_bf16: the bf16 rows as they are, adding into the "
                       "trainer's gradients itself, in chunks of 2^26 values";
            if (has("layernorm_backward"))
                return without("layernorm_backward_bf16") + converted +
                       "dx, dweight and dbias written to scratch, then added to the trainer's "
                       "gradients (the trainer accumulates them)";
            break;
        case kAttention:
            if (has("flash_wgmma_packed") && bf16_run)
                return "flash_wgmma_packed: q, k, v read in the packed qkv [B, T, 3C], out written "
                       "token-major; heads of 64 or 128";
            if ((has("flash_wgmma") || has("flash_tc")) && bf16_run)
                return "q, k, v cut out of the packed qkv [B, T, 3C] into [B][H][T][D], out put "
                       "back; heads of 64 or 128";
            if (has("flash_causal") || has("flash_forward") || has("attention_naive"))
                return std::string(converted) +
                       "q, k, v cut out of the packed qkv [B, T, 3C] into [B][H][T][D], out put "
                       "back; heads of 64 or 128" +
                       (bf16_run ? ""
                                 : "; the probabilities the reference's backward reads come "
                                   "from the reference's forward, run beside it");
            break;
        case kAttentionBackward:
            if (has("flash_backward") && bf16_run)
                return "q, k, v, out and dout cut into [B][H][T][D], dq, dk, dv (float) put back "
                       "into dqkv; heads of 64 or 128";
            break;
        case kCrossEntropy:
            if (has("cross_entropy_bf16") && bf16_run)
                return "cross_entropy_bf16: the bf16 logits as they are, padded rows, the gradient "
                       "at the trainer's scale written over them, in chunks of 2^26 values";
            if (has("cross_entropy"))
                return without("cross_entropy_bf16") + converted +
                       "the logits copied to float with the padded vocabulary columns masked to "
                       "-inf, in chunks of rows; its dlogits (the chunk's mean) scaled to the "
                       "trainer's loss scale";
            break;
        case kResidual:
            if (has("vector_add_bf16") && bf16_run)
                return "vector_add_bf16: the bf16 values as they are, in chunks of 2^26";
            if (has("vector_add"))
                return without("vector_add_bf16") + converted + "as its contract says";
            break;
        case kDecodeAttention:
            if (has("decode_attention") && bf16_run)
                return "the new tokens' q cut out of qkv [B, 3C] into [B][H][D]; the KV cache as "
                       "the trainer keeps it, [B][H][capacity][D] (kv_heads = heads); heads of 64 "
                       "or 128";
            break;
        case kTopK:
            if (has("topk"))
                return "the logits copied to float rows of V columns; each row masked to -inf "
                       "below its top_k-th largest logit (topk's k-th value), then the draw with "
                       "top_k 0: the same rule as the sample's own top-k";
            break;
        case kSample:
            if (has("sample"))
                return "the logits copied to float rows of V columns (masked by topk where it "
                       "is plugged); the uniforms and the tokens as its contract says";
            break;
        default:
            break;
    }
    throw std::runtime_error(std::string(kExerciseOpNames[op]) + ": " + p.exercise +
                             " has no kernel for this op in a" +
                             (bf16_run ? " bf16 run"
                                       : "n fp32 run (--dtype fp32 takes the fp32 "
                                         "exercises only)"));
}

template <typename Act>
void load(ExerciseTable& table) {
    if (table.loaded) return;
    const std::string path = !table_options.choices.empty()
                                 ? table_options.choices
                                 : std::string(TRAINER_KERNELS_DIR) + "/" + table.variant + ".txt";
    const auto chosen = read_choices(path);
    for (int op = 0; op < kExerciseOps; ++op) {
        Plugged& p = table.ops[op];
        p.exercise = chosen[op];
        if (p.exercise.empty()) continue;
        p.find = load_library(p.exercise, table.variant);
        p.boundary = boundary<Act>(static_cast<ExerciseOp>(op), p);
    }
    table.loaded = true;
    std::printf("kernels: %s (%s), every other op the reference's:\n", table.name, path.c_str());
    const Plugged& gemm = table.ops[kGemm];
    // A bf16 run whose gemm library has gemm_bf16_epilogue: the GELU of an unplugged gelu rides in
    // its epilogue (linear_forward, linear_backward).
    const bool epilogue =
        std::is_same_v<Act, bf16> && !gemm.exercise.empty() && gemm.find("gemm_bf16_epilogue");
    for (int op = 0; op < kExerciseOps; ++op) {
        const Plugged& p = table.ops[op];
        if (p.exercise.empty() && op == kLinearBackward && !gemm.exercise.empty())
            std::printf(
                "  %-19s not plugged: its two products on gemm's kernel (%s: %s%s), the "
                "bias gradient by the table's column sums\n",
                kExerciseOpNames[op], table.whose, gemm.exercise.c_str(),
                epilogue ? ", gemm_bf16_epilogue: W read as stored, dW added into float" : "");
        else if (p.exercise.empty() && op == kGelu && epilogue)
            std::printf("  %-19s not plugged: in gemm's epilogue (%s: %s, gemm_bf16_epilogue)\n",
                        kExerciseOpNames[op], table.whose, gemm.exercise.c_str());
        else if (p.exercise.empty())
            std::printf("  %-19s reference\n", kExerciseOpNames[op]);
        else
            std::printf("  %-19s %s: %s | %s\n", kExerciseOpNames[op], table.whose,
                        p.exercise.c_str(), p.boundary.c_str());
    }
    std::fflush(stdout);
}

// ---- Scratch and the conversions at the boundary ----

// Device scratch, one buffer per use, each growing to its largest request (the ops run one after
// another on the default stream, so a buffer is free again when its op returns).
enum Scratch {
    kOperandA,
    kOperandB,
    kProduct,
    kOutput,
    kHeads,
    kHeadGradients,
    kHeadLse,
    kScores,
    kGradientA,
    kGradientB,
    kColumnSums,
    kLogits,
    kTopValues,
    kTopIndices,
    kScratches
};

template <typename T>
T* scratch(Scratch use, long long count) {
    static void* buffers[kScratches] = {};
    static std::size_t sizes[kScratches] = {};
    const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
    if (bytes > sizes[use]) {
        if (buffers[use]) CUDA_CHECK(cudaFree(buffers[use]));
        CUDA_CHECK(cudaMalloc(&buffers[use], bytes));
        sizes[use] = bytes;
    }
    return static_cast<T*>(buffers[use]);
}

constexpr int kBlock = 256;

unsigned blocks_for(long long n) {
    return static_cast<unsigned>(std::min<long long>(course::ceil_div(n, kBlock), 65536));
}

// out[i] = f(in[i], i) over n values, arithmetic in float whatever the storage types.
template <typename To, typename From, typename F>
__global__ void map_kernel(To* out, const From* in, long long n, F f) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        out[i] = static_cast<To>(f(static_cast<float>(in[i]), i));
}

template <typename To, typename From, typename F>
void map(To* out, const From* in, long long n, F f) {
    map_kernel<<<blocks_for(n), kBlock>>>(out, in, n, f);
    CUDA_CHECK_LAUNCH();
}

struct Same {
    __device__ float operator()(float x, long long) const { return x; }
};
struct Scaled {
    float scale;
    __device__ float operator()(float x, long long) const { return x * scale; }
};
// The padded vocabulary columns of a row of logits masked: no probability, no gradient.
struct MaskedColumns {
    int V, Vp;
    __device__ float operator()(float x, long long i) const { return i % Vp < V ? x : -INFINITY; }
};
template <typename Act>
struct PlusBias {  // a product's row plus the layer's bias (none where bias is null)
    const Act* bias;
    int OC;
    __device__ float operator()(float x, long long i) const {
        return bias ? x + static_cast<float>(bias[i % OC]) : x;
    }
};

// n values of `in` as To (a copy converting float and bf16); `in` itself where it is already a To.
template <typename To, typename From>
const To* as(Scratch use, const From* in, long long n) {
    if constexpr (std::is_same_v<To, From>) {
        return in;
    } else {
        To* out = scratch<To>(use, n);
        map(out, in, n, Same{});
        return out;
    }
}

// acc[i] += inc[i]: outputs that a contract writes and the trainer accumulates.
template <typename T>
__global__ void add_into_kernel(T* acc, const float* inc, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        acc[i] = static_cast<T>(static_cast<float>(acc[i]) + inc[i]);
}

template <typename T>
void add_into(T* acc, const float* inc, long long n) {
    add_into_kernel<<<blocks_for(n), kBlock>>>(acc, inc, n);
    CUDA_CHECK_LAUNCH();
}

constexpr int kTile = 32, kTileRows = 8;

// out (cols x out_cols) = the transpose of in (rows x cols), converted, with columns rows ..
// out_cols - 1 of out zero (padding for a product's K). Through a shared tile (+1: no bank
// conflicts on the column reads), so both the reads and the writes are coalesced.
template <typename To, typename From>
__global__ void transpose_kernel(To* out, const From* in, int rows, int cols, int out_cols) {
    __shared__ float tile[kTile][kTile + 1];
    const int c0 = blockIdx.x * kTile, r0 = blockIdx.y * kTile;
    for (int y = threadIdx.y; y < kTile; y += kTileRows) {
        const int r = r0 + y, c = c0 + threadIdx.x;
        tile[y][threadIdx.x] = r < rows && c < cols
                                   ? static_cast<float>(in[static_cast<long long>(r) * cols + c])
                                   : 0.0f;
    }
    __syncthreads();
    for (int y = threadIdx.y; y < kTile; y += kTileRows) {
        const int c = c0 + y, r = r0 + threadIdx.x;
        if (c < cols && r < out_cols)
            out[static_cast<long long>(c) * out_cols + r] = static_cast<To>(tile[threadIdx.x][y]);
    }
}

template <typename To, typename From>
To* transposed(Scratch use, const From* in, int rows, int cols, int out_cols) {
    To* out = scratch<To>(use, static_cast<long long>(cols) * out_cols);
    const dim3 grid(course::ceil_div(cols, kTile), course::ceil_div(out_cols, kTile));
    transpose_kernel<<<grid, dim3(kTile, kTileRows)>>>(out, in, rows, cols, out_cols);
    CUDA_CHECK_LAUNCH();
    return out;
}

// sums[c] += the sum of column c of m (rows x cols), in two passes: the column sums of chunks of
// kSumRows rows, each a block of kTile x kTileRows threads over kTile columns (thread (x, y) adds
// rows y, y + kTileRows, ... of column x: a warp reads kTile consecutive values of a row), its
// rows' sums added in order; then each column's chunk sums, in chunk order (the same bits on
// every run). The chunks keep the GPU busy where a block per kTile columns would not: GPT-2's
// 768 columns are 24 such blocks, its 16384 rows 64 chunks.
constexpr int kSumRows = 256;
constexpr int kSumLoads = 8;

// partials[chunk][c] for the kTile columns of band `band`; chunk and band from a 1D grid (either
// may pass grid.y's 65535).
template <typename Act>
__global__ void column_chunk_sums_kernel(float* partials, const Act* m, int rows, int cols,
                                         int bands) {
    __shared__ float partial[kTileRows][kTile];
    const int band = blockIdx.x % bands, chunk = blockIdx.x / bands;
    const int col = band * kTile + threadIdx.x;
    const int last = min((chunk + 1) * kSumRows, rows);
    float sum = 0.0f;
    if (col < cols)
        for (int first = chunk * kSumRows + threadIdx.y; first < last;
             first += kTileRows * kSumLoads) {
            // kSumLoads independent loads in flight before the first is added.
            float values[kSumLoads];
#pragma unroll
            for (int j = 0; j < kSumLoads; ++j) {
                const int r = first + j * kTileRows;
                values[j] =
                    r < last ? static_cast<float>(m[static_cast<long long>(r) * cols + col]) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < kSumLoads; ++j) sum += values[j];
        }
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || col >= cols) return;
    float total = 0.0f;
    for (int y = 0; y < kTileRows; ++y) total += partial[y][threadIdx.x];
    partials[static_cast<long long>(chunk) * cols + col] = total;
}

// sums[c] += the chunks' partial sums of column c: a block of kTile x kTileRows threads per kTile
// columns, thread (x, y) adding chunks y, y + kTileRows, ..., then the kTileRows sums in order.
__global__ void add_chunk_sums_kernel(float* sums, const float* partials, int chunks, int cols) {
    __shared__ float partial[kTileRows][kTile];
    const int col = blockIdx.x * kTile + threadIdx.x;
    float sum = 0.0f;
    if (col < cols)
        for (int chunk = threadIdx.y; chunk < chunks; chunk += kTileRows)
            sum += partials[static_cast<long long>(chunk) * cols + col];
    partial[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || col >= cols) return;
    float total = 0.0f;
    for (int y = 0; y < kTileRows; ++y) total += partial[y][threadIdx.x];
    sums[col] += total;
}

template <typename Act>
void add_column_sums(float* sums, const Act* m, int rows, int cols) {
    const int chunks = course::ceil_div(rows, kSumRows), bands = course::ceil_div(cols, kTile);
    float* partials = scratch<float>(kColumnSums, static_cast<long long>(chunks) * cols);
    column_chunk_sums_kernel<<<static_cast<unsigned>(chunks) * bands, dim3(kTile, kTileRows)>>>(
        partials, m, rows, cols, bands);
    CUDA_CHECK_LAUNCH();
    add_chunk_sums_kernel<<<bands, dim3(kTile, kTileRows)>>>(sums, partials, chunks, cols);
    CUDA_CHECK_LAUNCH();
}

// ---- The table's plumbing ----

template <typename Act>
const Ops<Act>& reference() {
    static const Ops<Act>* table = ops_table<Act>("reference");
    return *table;
}

std::string shape(const char* what, long long a, long long b) {
    return std::string(what) + " " + std::to_string(a) + " x " + std::to_string(b);
}

// ---- GELU: the learner's (08_training/gelu) or the reference's, as a pass of its own ----

template <int kTable, typename Act>
void gelu_forward(Act* out, const Act* inp, long long n) {
    ExerciseTable& table = tables[kTable];
    auto* f = table.ops[kGelu].function<exercise::GeluForward<Act>>(
        std::is_same_v<Act, bf16> ? "gelu_forward bf16" : "gelu_forward float");
    if (ran(table, kGelu, [&] { f(out, inp, n); })) return;
    gelu_forward_reference(out, inp, n);
}

// dinp = GELU'(inp) * dinp, in place.
template <int kTable, typename Act>
void gelu_backward_in_place(Act* dinp, const Act* inp, long long n) {
    ExerciseTable& table = tables[kTable];
    auto* f = table.ops[kGelu].function<exercise::GeluBackward<Act>>(
        std::is_same_v<Act, bf16> ? "gelu_backward bf16" : "gelu_backward float");
    if (ran(table, kGelu, [&] { f(dinp, inp, dinp, n); })) return;
    gelu_backward_reference(dinp, inp, dinp, n);
}

// ---- Linear layers: the learner's GEMM (04, 05) for the products ----
//
// Three products per layer: y = inp W^T (forward), dinp = dout W, dweight += dout^T inp. sgemm
// (fp32, modules 04 and 05's sgemm_warptile) takes row-major A (M x K) and B (K x N): W^T and
// dout^T are transposed copies. gemm_bf16 (05's tensor-core rungs) takes A (M x K) and B (N x K),
// sizes multiples of 8 and 16-byte aligned rows: W^T, dout^T and inp^T are transposed copies, and
// the rows of the tokens are padded with zeros to a multiple of 8 (zero rows of A give rows of C
// nobody reads; zero columns of K add nothing).

int round_up8(int n) { return (n + 7) / 8 * 8; }

// Where gemm_bf16's contract cannot take a product of these sizes (N and K are the model's widths,
// M and the backward's K the tokens, which padding covers): the reason, else empty.
std::string gemm_bf16_refuses(int rows, int C, int OC) {
    if (C % 8 != 0 || OC % 8 != 0)
        return "gemm_bf16 takes sizes that are multiples of 8, and this layer is " +
               shape("", OC, C);
    if (round_up8(rows) > 65536 || C > 65536 || OC > 65536)
        return "gemm_bf16 takes sizes up to 2^16, and this layer is " + shape("", OC, C) + " for " +
               std::to_string(rows) + " rows";
    return "";
}

// A matrix (rows x cols) as gemm_bf16 reads it: 16-byte aligned, its rows padded with zeros to a
// multiple of 8 (a copy where it is not so already).
const bf16* gemm_bf16_operand(Scratch use, const bf16* a, int rows, int cols) {
    const int padded = round_up8(rows);
    if (padded == rows && course::is_aligned(a, 16)) return a;
    bf16* copy = scratch<bf16>(use, static_cast<long long>(padded) * cols);
    CUDA_CHECK(cudaMemcpyAsync(copy, a, static_cast<std::size_t>(rows) * cols * sizeof(bf16),
                               cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaMemsetAsync(copy + static_cast<long long>(rows) * cols, 0,
                               static_cast<std::size_t>(padded - rows) * cols * sizeof(bf16)));
    return copy;
}

// y (float, rows x OC) = inp (rows x C) @ weight (OC x C)^T.
template <typename Act>
float* forward_product(const Plugged& gemm, const Act* inp, const Act* weight, int rows, int C,
                       int OC) {
    float* y = scratch<float>(kProduct, static_cast<long long>(round_up8(rows)) * OC);
    if constexpr (std::is_same_v<Act, bf16>) {
        if (auto* f = gemm.function<decltype(::gemm_bf16)>("gemm_bf16")) {
            f(round_up8(rows), OC, C, gemm_bf16_operand(kOperandA, inp, rows, C),
              gemm_bf16_operand(kOperandB, weight, OC, C), y);
            return y;
        }
    }
    const float* a = as<float>(kOperandA, inp, static_cast<long long>(rows) * C);
    const float* b = transposed<float>(kOperandB, weight, OC, C, OC);  // C x OC
    gemm.function<decltype(::sgemm)>("sgemm")(rows, OC, C, 1.0f, a, b, 0.0f, y);
    return y;
}

// dinp (float, rows x C) = dout (rows x OC) @ weight (OC x C).
template <typename Act>
float* input_gradient(const Plugged& gemm, const Act* dout, const Act* weight, int rows, int C,
                      int OC) {
    float* dinp = scratch<float>(kProduct, static_cast<long long>(round_up8(rows)) * C);
    if constexpr (std::is_same_v<Act, bf16>) {
        if (auto* f = gemm.function<decltype(::gemm_bf16)>("gemm_bf16")) {
            const bf16* w_t = transposed<bf16>(kOperandB, weight, OC, C, OC);  // C x OC
            f(round_up8(rows), C, OC, gemm_bf16_operand(kOperandA, dout, rows, OC), w_t, dinp);
            return dinp;
        }
    }
    const float* a = as<float>(kOperandA, dout, static_cast<long long>(rows) * OC);
    const float* b = as<float>(kOperandB, weight, static_cast<long long>(OC) * C);
    gemm.function<decltype(::sgemm)>("sgemm")(rows, C, OC, 1.0f, a, b, 0.0f, dinp);
    return dinp;
}

// dweight (OC x C) += dout (rows x OC)^T @ inp (rows x C).
template <typename Act>
void add_weight_gradient(const Plugged& gemm, float* dweight, const Act* dout, const Act* inp,
                         int rows, int C, int OC) {
    if constexpr (std::is_same_v<Act, bf16>) {
        if (auto* f = gemm.function<decltype(::gemm_bf16)>("gemm_bf16")) {
            const int K = round_up8(rows);
            const bf16* dout_t = transposed<bf16>(kOperandA, dout, rows, OC, K);  // OC x K
            const bf16* inp_t = transposed<bf16>(kOperandB, inp, rows, C, K);     // C x K
            float* product = scratch<float>(kProduct, static_cast<long long>(OC) * C);
            f(OC, C, K, dout_t, inp_t, product);
            add_into(dweight, product, static_cast<long long>(OC) * C);
            return;
        }
    }
    const float* a = transposed<float>(kOperandA, dout, rows, OC, rows);  // OC x rows
    const float* b = as<float>(kOperandB, inp, static_cast<long long>(rows) * C);
    gemm.function<decltype(::sgemm)>("sgemm")(OC, C, rows, 1.0f, a, b, 1.0f, dweight);
}

// Whether the learner's GEMM takes this layer; a note where its contract refuses the sizes.
template <typename Act>
bool gemm_takes(ExerciseTable& table, int rows, int C, int OC) {
    const Plugged& gemm = table.ops[kGemm];
    if (!gemm.active()) return false;
    if (!std::is_same_v<Act, bf16> || !gemm.find("gemm_bf16")) return true;
    const std::string refused = gemm_bf16_refuses(rows, C, OC);
    if (refused.empty()) return true;
    note(table, "gemm: " + refused + ": the reference runs it");
    return false;
}

// ---- Linear layers through gemm_bf16_epilogue (05's fast reference): no conversions ----
//
// Where the gemm library defines the optional gemm_bf16_epilogue (gemm_bf16_epilogue.h), a bf16
// run makes each product one call, reading every operand as the trainer stores it: y = inp W^T
// (both K-major) with the bias, and the GELU where gelu is not plugged, in its epilogue; dinp =
// dout W, W (OC x C, stored K x N) read MN-major, times GELU' likewise; dW += dout^T inp, dout
// and inp (rows x OC, rows x C: K x M and K x N) read MN-major, added into the float gradient.
// Where gelu is plugged, its own kernel runs as a pass of its own (the learner's choice).

using EpilogueGemm = decltype(::gemm_bf16_epilogue);

// Why gemm_bf16_epilogue's contract does not take this layer (the sizes, the pointers' 16-byte
// alignment), else empty.
std::string epilogue_refuses(int rows, int C, int OC, std::initializer_list<const void*> pointers) {
    if (C % 8 != 0 || OC % 8 != 0)
        return "gemm_bf16_epilogue takes widths that are multiples of 8, and this layer is " +
               shape("", OC, C);
    if (rows > 65536 || C > 65536 || OC > 65536 ||
        static_cast<long long>(rows) * std::max(C, OC) >= (1LL << 31))
        return "gemm_bf16_epilogue takes sizes up to 2^16 and matrices below 2^31 values, and "
               "this layer is " +
               shape("", OC, C) + " for " + std::to_string(rows) + " rows";
    for (const void* p : pointers)
        if (p && !course::is_aligned(p, 16))
            return "gemm_bf16_epilogue takes matrices that start on 16 bytes";
    return "";
}

// The gemm library's gemm_bf16_epilogue where this bf16 run's layer is within its contract, else
// null (with a note where the library has one but the layer does not fit: gemm_bf16's path then).
template <typename Act>
EpilogueGemm* epilogue_gemm(ExerciseTable& table, int rows, int C, int OC,
                            std::initializer_list<const void*> pointers) {
    const Plugged& gemm = table.ops[kGemm];
    if (!std::is_same_v<Act, bf16> || !gemm.active()) return nullptr;
    auto* f = gemm.function<EpilogueGemm>("gemm_bf16_epilogue");
    if (!f) return nullptr;
    const std::string refused = epilogue_refuses(rows, C, OC, pointers);
    if (refused.empty()) return f;
    note(table, "gemm: " + refused + ": gemm_bf16, converted, runs it");
    return nullptr;
}

template <int kTable, typename Act>
void linear_forward(Act* out, Act* gelu_input, const Act* inp, const Act* weight, const Act* bias,
                    int rows, int C, int OC) {
    ExerciseTable& table = tables[kTable];
    // y = inp W^T + bias, where GELU follows into gelu_input; then out = GELU(gelu_input).
    Act* y = gelu_input ? gelu_input : out;
    const long long n = static_cast<long long>(rows) * OC;
    if constexpr (std::is_same_v<Act, bf16>) {
        const bool fused_gelu = gelu_input && !table.ops[kGelu].active();
        if (auto* f = epilogue_gemm<Act>(table, rows, C, OC, {out, gelu_input, inp, weight, bias});
            f && ran(table, kGemm, [&] {
                GemmEpilogue epilogue;
                epilogue.out = fused_gelu ? out : y;
                epilogue.bias = bias;
                if (fused_gelu) epilogue.gelu_input = gelu_input;
                f(rows, OC, C, inp, GemmMajor::kK, weight, GemmMajor::kK, epilogue);
            })) {
            if (gelu_input && !fused_gelu) gelu_forward<kTable>(out, gelu_input, n);
            return;
        }
    }
    const bool ours = gemm_takes<Act>(table, rows, C, OC) && ran(table, kGemm, [&] {
                          const float* product =
                              forward_product(table.ops[kGemm], inp, weight, rows, C, OC);
                          map(y, product, n, PlusBias<Act>{bias, OC});
                      });
    if (!ours) {
        if (!gelu_input || !table.ops[kGelu].active()) {
            reference<Act>().linear_forward(out, gelu_input, inp, weight, bias, rows, C, OC);
            return;  // the reference's product, with its own GELU where there is one
        }
        reference<Act>().linear_forward(y, nullptr, inp, weight, bias, rows, C, OC);
    }
    if (gelu_input) gelu_forward<kTable>(out, gelu_input, n);
}

template <int kTable, typename Act>
void linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                     const Act* gelu_input, const Act* weight, int rows, int C, int OC) {
    ExerciseTable& table = tables[kTable];
    const long long in_count = static_cast<long long>(rows) * C;
    // The learner's whole backward (08_training/linear_backward, float): GELU' included.
    auto* whole =
        table.ops[kLinearBackward].function<decltype(::linear_backward)>("linear_backward");
    if (ran(table, kLinearBackward, [&] {
            const long long out_count = static_cast<long long>(rows) * OC;
            float* dinp_f = std::is_same_v<Act, float> ? reinterpret_cast<float*>(dinp)
                                                       : scratch<float>(kOutput, in_count);
            whole(dinp_f, dweight, dbias, as<float>(kGradientA, dout, out_count),
                  as<float>(kOperandA, inp, in_count),
                  gelu_input ? as<float>(kGradientB, gelu_input, in_count) : nullptr,
                  as<float>(kOperandB, weight, static_cast<long long>(OC) * C), rows, C, OC);
            if constexpr (std::is_same_v<Act, bf16>) map(dinp, dinp_f, in_count, Same{});
        }))
        return;
    if constexpr (std::is_same_v<Act, bf16>) {
        const bool fused_gelu = gelu_input && !table.ops[kGelu].active();
        if (auto* f = epilogue_gemm<Act>(table, rows, C, OC,
                                         {dinp, dweight, dout, inp, gelu_input, weight});
            f && ran(table, kGemm, [&] {
                GemmEpilogue input_gradient;
                input_gradient.out = dinp;
                if (fused_gelu) input_gradient.gelu_backward_input = gelu_input;
                f(rows, C, OC, dout, GemmMajor::kK, weight, GemmMajor::kMN, input_gradient);
                GemmEpilogue weight_gradient;
                weight_gradient.accumulate = dweight;
                f(OC, C, rows, dout, GemmMajor::kMN, inp, GemmMajor::kMN, weight_gradient);
                if (dbias) add_column_sums(dbias, dout, rows, OC);
            })) {
            if (gelu_input && !fused_gelu)
                gelu_backward_in_place<kTable>(dinp, gelu_input, in_count);
            return;
        }
    }
    // The products by the learner's GEMM, the bias gradient by the table's column sums.
    const bool ours =
        gemm_takes<Act>(table, rows, C, OC) && ran(table, kGemm, [&] {
            const Plugged& gemm = table.ops[kGemm];
            map(dinp, input_gradient(gemm, dout, weight, rows, C, OC), in_count, Same{});
            add_weight_gradient(gemm, dweight, dout, inp, rows, C, OC);
            if (dbias) add_column_sums(dbias, dout, rows, OC);
        });
    if (!ours) {
        if (!gelu_input || !table.ops[kGelu].active()) {
            reference<Act>().linear_backward(dinp, dweight, dbias, dout, inp, gelu_input, weight,
                                             rows, C, OC);
            return;  // with the reference's own GELU' where there is one
        }
        reference<Act>().linear_backward(dinp, dweight, dbias, dout, inp, nullptr, weight, rows, C,
                                         OC);
    }
    if (gelu_input) gelu_backward_in_place<kTable>(dinp, gelu_input, in_count);
}

// ---- The optional bf16 entry points of 01 and 06: the trainer's own precision ----

// The values one call of an optional bf16 entry point takes at most (their contracts: 2^26).
constexpr long long kEntryPointValues = 1LL << 26;

// call(first, count) over the rows in chunks of at most kEntryPointValues values (cols at most
// that: the callers check).
template <typename Call>
void in_row_chunks(int rows, long long cols, Call&& call) {
    const int chunk = static_cast<int>(std::min<long long>(rows, kEntryPointValues / cols));
    for (int first = 0; first < rows; first += chunk) call(first, std::min(chunk, rows - first));
}

// The library's bf16 entry point `key` of type F, in a bf16 run, else null.
template <typename F, typename Act>
F* bf16_entry(const Plugged& plugged, const char* key) {
    return std::is_same_v<Act, bf16> ? plugged.function<F>(key) : nullptr;
}

// ---- LayerNorm (06): float32 contracts, written outputs ----

template <int kTable, typename Act>
void layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                       const Act* bias, int rows, int C) {
    ExerciseTable& table = tables[kTable];
    if constexpr (std::is_same_v<Act, bf16>) {
        if (auto* f = bf16_entry<decltype(::layernorm_bf16), Act>(table.ops[kLayerNorm],
                                                                  "layernorm_bf16");
            f && C <= kEntryPointValues && ran(table, kLayerNorm, [&] {
                in_row_chunks(rows, C, [&](int first, int count) {
                    const long long offset = static_cast<long long>(first) * C;
                    f(inp + offset, weight, bias, out + offset, mean + first, rstd + first, count,
                      C);
                });
            }))
            return;
    }
    auto* f = table.ops[kLayerNorm].function<decltype(::layernorm)>("layernorm");
    if (ran(table, kLayerNorm, [&] {
            const long long n = static_cast<long long>(rows) * C;
            float* y = std::is_same_v<Act, float> ? reinterpret_cast<float*>(out)
                                                  : scratch<float>(kOutput, n);
            f(as<float>(kOperandA, inp, n), as<float>(kGradientA, weight, C),
              as<float>(kGradientB, bias, C), y, mean, rstd, rows, C);
            if constexpr (std::is_same_v<Act, bf16>) map(out, y, n, Same{});
        }))
        return;
    reference<Act>().layernorm_forward(out, mean, rstd, inp, weight, bias, rows, C);
}

template <int kTable, typename Act>
void layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                        const Act* weight, const float* mean, const float* rstd, int rows, int C) {
    ExerciseTable& table = tables[kTable];
    if constexpr (std::is_same_v<Act, bf16>) {
        // It adds into dinp, dweight and dbias itself, as the trainer's op does.
        if (auto* f = bf16_entry<decltype(::layernorm_backward_bf16), Act>(
                table.ops[kLayerNormBackward], "layernorm_backward_bf16");
            f && C <= kEntryPointValues && ran(table, kLayerNormBackward, [&] {
                in_row_chunks(rows, C, [&](int first, int count) {
                    const long long offset = static_cast<long long>(first) * C;
                    f(inp + offset, dout + offset, weight, mean + first, rstd + first,
                      dinp + offset, dweight, dbias, count, C);
                });
            }))
            return;
    }
    auto* f = table.ops[kLayerNormBackward].function<decltype(::layernorm_backward)>(
        "layernorm_backward");
    if (ran(table, kLayerNormBackward, [&] {
            const long long n = static_cast<long long>(rows) * C;
            float* dx = scratch<float>(kOutput, n);
            float* dgamma = scratch<float>(kGradientA, 2LL * C);
            float* dbeta = dgamma + C;
            f(as<float>(kOperandA, inp, n), as<float>(kOperandB, dout, n),
              as<float>(kProduct, weight, C), mean, rstd, dx, dgamma, dbeta, rows, C);
            add_into(dinp, dx, n);
            add_into(dweight, dgamma, C);
            add_into(dbias, dbeta, C);
        }))
        return;
    reference<Act>().layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows,
                                        C);
}

// ---- Attention (07): per-head tensors cut out of the packed qkv ----

// Whether the learner's attention takes heads of this size; a note where it does not.
bool heads_taken(ExerciseTable& table, ExerciseOp op, int HS) {
    if (!table.ops[op].active()) return false;
    if (HS == 64 || HS == 128) return true;
    note(table, std::string(kExerciseOpNames[op]) + ": its contract takes heads of 64 or 128, " +
                    "this model's are " + std::to_string(HS) + ": the reference runs it");
    return false;
}

// out and L (each query row's logsumexp) from the learner's forward kernel.
template <typename Act>
void exercise_attention(ExerciseTable& table, Act* out, float* L, const Act* qkv, int B, int T,
                        int C, int NH) {
    const Plugged& p = table.ops[kAttention];
    const int HS = C / NH;
    const long long btc = static_cast<long long>(B) * T * C;
    const float scale = attention_scale(HS);
    if constexpr (std::is_same_v<Act, bf16>) {
        // flash_wgmma's fast reference reads the trainer's layouts itself (flash_wgmma_packed.h).
        if (auto* f = p.function<decltype(::flash_wgmma_packed)>("flash_wgmma_packed")) {
            f(qkv, out, L, B, NH, T, HS, scale, true);
            return;
        }
        // flash_wgmma's contract is flash_tc's (on Hopper's instructions): the same call.
        auto* f = p.function<decltype(::flash_wgmma)>("flash_wgmma");
        if (!f) f = p.function<decltype(::flash_tc)>("flash_tc");
        if (f) {
            bf16* q = scratch<bf16>(kHeads, 4 * btc);  // q, k, v, then out
            to_heads(q, qkv, 3, B, T, NH, HS);
            f(q, q + btc, q + 2 * btc, q + 3 * btc, L, B, NH, T, HS, scale, true);
            from_heads(out, q + 3 * btc, 1, B, T, NH, HS);
            return;
        }
    }
    float* q = scratch<float>(kHeads, 4 * btc);
    to_heads(q, qkv, 3, B, T, NH, HS);
    float *k = q + btc, *v = q + 2 * btc, *o = q + 3 * btc;
    if (auto* f = p.function<decltype(::flash_causal)>("flash_causal")) {
        f(q, k, v, o, L, B, NH, T, HS, scale, true);
    } else if (auto* f = p.function<decltype(::flash_forward)>("flash_forward")) {
        f(q, k, v, o, L, B, NH, T, HS, scale, true);
    } else {
        const long long scores = static_cast<long long>(B) * NH * T * T;
        if (scores >= (1LL << 31))
            throw std::runtime_error(
                "attention_naive's contract takes batch * heads * T * T "
                "below 2^31: use a shorter -t");
        p.function<decltype(::attention_naive)>("attention_naive")(
            q, k, v, o, L, scratch<float>(kScores, scores), B, NH, T, HS, scale, true);
    }
    from_heads(out, o, 1, B, T, NH, HS);
}

template <int kTable, typename Act>
void attention_forward(Act* out, float* lse, Act* att, Act* scratch_heads, Act* preatt,
                       const Act* qkv, int B, int T, int C, int NH) {
    ExerciseTable& table = tables[kTable];
    const Ops<Act>& ref = reference<Act>();
    const int HS = C / NH;
    if (heads_taken(table, kAttention, HS)) {
        // The T x T way (the fp32 mode) keeps the probabilities for the reference's backward:
        // the reference's forward makes them, and the learner's kernel writes out after it.
        const bool keeps_scores = ref.attention_keeps_scores(HS);
        if (keeps_scores)
            ref.attention_forward(out, lse, att, scratch_heads, preatt, qkv, B, T, C, NH);
        float* L =
            keeps_scores ? scratch<float>(kHeadLse, static_cast<long long>(B) * NH * T) : lse;
        if (ran(table, kAttention, [&] { exercise_attention(table, out, L, qkv, B, T, C, NH); }) ||
            keeps_scores)
            return;
    }
    ref.attention_forward(out, lse, att, scratch_heads, preatt, qkv, B, T, C, NH);
}

template <int kTable, typename Act>
void attention_backward(Act* dqkv, Act* scratch_heads, Act* datt, const Act* dout, const Act* qkv,
                        const Act* out, const float* lse, const Act* att, int B, int T, int C,
                        int NH) {
    ExerciseTable& table = tables[kTable];
    const int HS = C / NH;
    // flash_backward (bf16) needs the forward's logsumexps: the flash way's.
    if constexpr (std::is_same_v<Act, bf16>) {
        if (heads_taken(table, kAttentionBackward, HS) && lse &&
            ran(table, kAttentionBackward, [&] {
                const long long btc = static_cast<long long>(B) * T * C;
                bf16* q = scratch<bf16>(kHeads, 5 * btc);  // q, k, v, out, dout
                to_heads(q, qkv, 3, B, T, NH, HS);
                to_heads(q + 3 * btc, out, 1, B, T, NH, HS);
                to_heads(q + 4 * btc, dout, 1, B, T, NH, HS);
                float* dq = scratch<float>(kHeadGradients, 3 * btc);  // dq, dk, dv
                table.ops[kAttentionBackward].function<decltype(::flash_backward)>(
                    "flash_backward")(q, q + btc, q + 2 * btc, q + 3 * btc, q + 4 * btc, lse, dq,
                                      dq + btc, dq + 2 * btc, B, NH, T, HS, attention_scale(HS),
                                      true);
                from_heads(dqkv, dq, 3, B, T, NH, HS);
            }))
            return;
    }
    reference<Act>().attention_backward(dqkv, scratch_heads, datt, dout, qkv, out, lse, att, B, T,
                                        C, NH);
}

// ---- Cross-entropy (06): float32 logits with -inf for masked classes, rows at a time ----

// Rows per call: two float copies of a chunk of rows (logits and dlogits) stay under 512 MB.
int cross_entropy_chunk(int Vp) {
    return static_cast<int>(std::max<long long>(1, (256LL << 20) / (4LL * Vp)));
}

template <int kTable, typename Act>
void cross_entropy(Act* logits, float* losses, const int* targets, float dloss, int rows, int V,
                   int Vp) {
    ExerciseTable& table = tables[kTable];
    if constexpr (std::is_same_v<Act, bf16>) {
        // The trainer's op exactly: padded rows, the gradient at dloss written over the logits
        // (none where dloss is 0).
        if (auto* f = bf16_entry<decltype(::cross_entropy_bf16), Act>(table.ops[kCrossEntropy],
                                                                      "cross_entropy_bf16");
            f && Vp <= kEntryPointValues && ran(table, kCrossEntropy, [&] {
                in_row_chunks(rows, Vp, [&](int first, int count) {
                    Act* x = logits + static_cast<long long>(first) * Vp;
                    f(x, targets + first, losses + first, dloss != 0.0f ? x : nullptr, dloss, count,
                      V, Vp);
                });
            }))
            return;
    }
    auto* f = table.ops[kCrossEntropy].function<decltype(::cross_entropy)>("cross_entropy");
    if (ran(table, kCrossEntropy, [&] {
            const int chunk = cross_entropy_chunk(Vp);
            for (int row = 0; row < rows; row += chunk) {
                const int count = std::min(chunk, rows - row);
                const long long n = static_cast<long long>(count) * Vp;
                Act* x = logits + static_cast<long long>(row) * Vp;
                float* x_f = scratch<float>(kOperandA, n);
                float* dx_f = scratch<float>(kOutput, n);
                map(x_f, x, n, MaskedColumns{V, Vp});
                f(x_f, targets + row, losses + row, dx_f, count, Vp);
                // dlogits is the gradient of the chunk's mean loss (1 / count each row): the
                // trainer's is dloss per row.
                if (dloss != 0.0f) map(x, dx_f, n, Scaled{dloss * count});
            }
        }))
        return;
    reference<Act>().cross_entropy(logits, losses, targets, dloss, rows, V, Vp);
}

// ---- The residual add (01's vector_add) ----

template <int kTable, typename Act>
void residual_forward(Act* out, const Act* a, const Act* b, long long n) {
    ExerciseTable& table = tables[kTable];
    if constexpr (std::is_same_v<Act, bf16>) {
        if (auto* f = bf16_entry<decltype(::vector_add_bf16), Act>(table.ops[kResidual],
                                                                   "vector_add_bf16");
            f && ran(table, kResidual, [&] {
                for (long long first = 0; first < n; first += kEntryPointValues)
                    f(a + first, b + first, out + first,
                      static_cast<std::size_t>(std::min(kEntryPointValues, n - first)));
            }))
            return;
    }
    auto* f = table.ops[kResidual].function<decltype(::vector_add)>("vector_add");
    if (ran(table, kResidual, [&] {
            float* sum = std::is_same_v<Act, float> ? reinterpret_cast<float*>(out)
                                                    : scratch<float>(kOutput, n);
            f(as<float>(kOperandA, a, n), as<float>(kOperandB, b, n), sum,
              static_cast<std::size_t>(n));
            if constexpr (std::is_same_v<Act, bf16>) map(out, sum, n, Same{});
        }))
        return;
    reference<Act>().residual_forward(out, a, b, n);
}

// ---- Module 08: embedding and AdamW, with float and bf16 overloads as ops.h has them ----

template <int kTable, typename Act>
void embedding_forward(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T,
                       int C) {
    ExerciseTable& table = tables[kTable];
    auto* f = table.ops[kEmbedding].function<exercise::EmbeddingForward<Act>>(
        std::is_same_v<Act, bf16> ? "embedding_forward bf16" : "embedding_forward float");
    if (ran(table, kEmbedding, [&] { f(out, tokens, wte, wpe, B, T, C); })) return;
    reference<Act>().embedding_forward(out, tokens, wte, wpe, B, T, C);
}

template <int kTable, typename Act>
void embedding_backward(float* dwte, float* dwpe, const Act* dout, const TokenBuckets& buckets,
                        int B, int T, int C) {
    ExerciseTable& table = tables[kTable];
    auto* f = table.ops[kEmbedding].function<exercise::EmbeddingBackward<Act>>(
        std::is_same_v<Act, bf16> ? "embedding_backward bf16" : "embedding_backward float");
    // Module 08's TokenBuckets is ops.h's, field for field.
    const ::TokenBuckets theirs{buckets.count, buckets.token, buckets.start, buckets.positions};
    if (ran(table, kEmbedding, [&] { f(dwte, dwpe, dout, theirs, B, T, C); })) return;
    reference<Act>().embedding_backward(dwte, dwpe, dout, buckets, B, T, C);
}

template <int kTable, typename Act>
void adamw(float* master, Act* working, const float* grads, float* m, float* v, long long n,
           float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
           float eps, float weight_decay, float grad_scale) {
    ExerciseTable& table = tables[kTable];
    auto* f = table.ops[kAdamW].function<exercise::AdamW<Act>>(
        std::is_same_v<Act, bf16> ? "adamw bf16" : "adamw float");
    if (ran(table, kAdamW, [&] {
            f(master, working, grads, m, v, n, lr, beta1, beta2, beta1_correction, beta2_correction,
              eps, weight_decay, grad_scale);
        }))
        return;
    reference<Act>().adamw(master, working, grads, m, v, n, lr, beta1, beta2, beta1_correction,
                           beta2_correction, eps, weight_decay, grad_scale);
}

// ---- Module 10: generation's decode attention, top-k and sampling ----

// A new token's embedding and the cache's writes are the reference's in every table.
template <typename Act>
void decode_embedding(Act* out, const int* tokens, const Act* wte, const Act* wpe,
                      const int* lengths, int B, int C) {
    reference<Act>().decode_embedding(out, tokens, wte, wpe, lengths, B, C);
}
template <typename Act>
void kv_cache_write(Act* k_cache, Act* v_cache, const Act* qkv, const int* lengths, int B, int T,
                    int C, int NH, int capacity) {
    reference<Act>().kv_cache_write(k_cache, v_cache, qkv, lengths, B, T, C, NH, capacity);
}

// Whether the learner's decode_attention takes this step's shapes (its contract's limits); a note
// where it does not.
bool decode_shapes_taken(ExerciseTable& table, int B, int NH, int capacity, int HS) {
    if (!heads_taken(table, kDecodeAttention, HS)) return false;
    if (B <= 1024 && NH <= 128 && capacity <= 65536 &&
        static_cast<long long>(B) * NH * capacity * HS < (1LL << 31))
        return true;
    note(table,
         "decode_attention: its contract takes up to 1024 sequences, 128 heads, 65536 "
         "positions and 2^31 cache elements, and this step is " +
             std::to_string(B) + " x " + std::to_string(NH) + " x " + std::to_string(capacity) +
             ": the reference runs it");
    return false;
}

// The learner's decode_attention (bf16): the new tokens' q cut out of qkv, the caches and the
// workspace as they are (the trainer's layout and workspace are the contract's, with kv_heads =
// heads); its lse is not used.
template <int kTable, typename Act>
void decode_attention(Act* out, float* workspace, const Act* qkv, const Act* k_cache,
                      const Act* v_cache, const int* lengths, int B, int C, int NH, int capacity) {
    ExerciseTable& table = tables[kTable];
    if constexpr (std::is_same_v<Act, bf16>) {
        const int HS = C / NH;
        if (decode_shapes_taken(table, B, NH, capacity, HS) && ran(table, kDecodeAttention, [&] {
                const long long bc = static_cast<long long>(B) * C;
                bf16* q = scratch<bf16>(kHeads, 3 * bc);  // q, k, v per head; the contract reads q
                to_heads(q, qkv, 3, B, 1, NH, HS);
                table.ops[kDecodeAttention].function<exercise::DecodeAttention>("decode_attention")(
                    q, k_cache, v_cache, lengths, out,
                    scratch<float>(kHeadLse, static_cast<long long>(B) * NH), workspace, B, NH, NH,
                    capacity, HS, attention_scale(HS));
            }))
            return;
    }
    reference<Act>().decode_attention(out, workspace, qkv, k_cache, v_cache, lengths, B, C, NH,
                                      capacity);
}

// x (rows x V, float) = the first V columns of logits (rows x Vp): a row of the sampling contracts.
template <typename Act>
__global__ void sampled_rows_kernel(float* x, const Act* logits, int V, int Vp, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        x[i] = static_cast<float>(logits[i / V * Vp + i % V]);
}

// x[r][i] = -inf where it is below row r's threshold, values[r][k - 1] (topk's k-th largest).
__global__ void mask_below_kernel(float* x, const float* values, int V, int k, long long n) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        if (x[i] < values[i / V * k + k - 1]) x[i] = -INFINITY;
}

// Whether the learner's topk narrows this draw (a top-k to apply, within its contract's limits),
// and whether its sample takes the rows; a note where a plugged kernel does not.
bool topk_taken(ExerciseTable& table, int rows, int V, int top_k) {
    if (!table.ops[kTopK].active() || top_k <= 0 || top_k >= V) return false;
    if (top_k <= 2048 && V <= (1 << 18) && rows <= 1024 &&
        static_cast<long long>(rows) * V <= (1LL << 24))
        return true;
    note(table,
         "topk: its contract takes k up to 2048, rows of up to 2^18 and 2^24 logits in all, "
         "and this draw is top_k " +
             std::to_string(top_k) + " of " + std::to_string(rows) + " x " + std::to_string(V) +
             ": the draw's own top-k runs");
    return false;
}
bool sample_taken(ExerciseTable& table, int rows, int V) {
    if (!table.ops[kSample].active()) return false;
    if (rows <= (1 << 20) && V <= (1 << 18)) return true;
    note(table, "sample: its contract takes up to 2^20 rows of 2^18 logits, and this draw is " +
                    std::to_string(rows) + " x " + std::to_string(V) + ": the reference runs it");
    return false;
}

// The draw with the learner's topk and sample (fp32 contracts, on float rows of V logits). topk
// gives each row's top_k-th largest logit; the row masked to -inf below it and drawn with top_k 0
// is the sample contract's top-k itself (the ties at the threshold kept), so the rule does not
// change with what is plugged: without topk, the sample's own top-k; without sample, the
// reference's draw on the masked rows.
template <int kTable, typename Act>
void sample(int* tokens, const Act* logits, const float* uniforms, int rows, int V, int Vp,
            float temperature, int top_k, float top_p) {
    ExerciseTable& table = tables[kTable];
    const bool narrows = topk_taken(table, rows, V, top_k);
    const bool draws = sample_taken(table, rows, V);
    if (!narrows && !draws) {
        reference<Act>().sample(tokens, logits, uniforms, rows, V, Vp, temperature, top_k, top_p);
        return;
    }
    const long long n = static_cast<long long>(rows) * V;
    float* x = scratch<float>(kLogits, n);
    sampled_rows_kernel<<<blocks_for(n), kBlock>>>(x, logits, V, Vp, n);
    CUDA_CHECK_LAUNCH();
    int k = top_k;
    if (narrows && ran(table, kTopK, [&] {
            float* values = scratch<float>(kTopValues, static_cast<long long>(rows) * top_k);
            table.ops[kTopK].function<exercise::TopK>("topk")(
                x, values, scratch<int>(kTopIndices, static_cast<long long>(rows) * top_k), rows, V,
                top_k);
            mask_below_kernel<<<blocks_for(n), kBlock>>>(x, values, V, top_k, n);
            CUDA_CHECK_LAUNCH();
        }))
        k = 0;
    if (draws && ran(table, kSample, [&] {
            table.ops[kSample].function<exercise::Sample>("sample")(x, uniforms, tokens, rows, V,
                                                                    temperature, k, top_p);
        }))
        return;
    reference<float>().sample(tokens, x, uniforms, rows, V, V, temperature, k, top_p);
}

template <typename Act>
bool attention_keeps_scores(int head_size) {
    return reference<Act>().attention_keeps_scores(head_size);
}

// A decoding step is captured where it runs the reference's ops alone: an exercise's kernels
// launch on the default stream (their contracts take none), and the boundary around them
// allocates its scratch as it goes.
template <int kTable, typename Act>
const char* graph_refusal() {
    if (const char* refused = reference<Act>().graph_refusal()) return refused;
    const ExerciseTable& table = tables[kTable];
    std::string plugged;
    for (ExerciseOp op : {kGemm, kGelu, kLayerNorm, kResidual, kDecodeAttention, kTopK, kSample})
        if (table.ops[op].active())
            plugged += (plugged.empty() ? "" : ", ") + std::string(kExerciseOpNames[op]) + " (" +
                       table.ops[op].exercise + ")";
    if (plugged.empty()) return nullptr;
    static std::string reason;
    reason =
        "the exercises' kernels of a decoding step, " + plugged + ", launch on the default stream";
    return reason.c_str();
}

void sum_of_squares(float* out, const float* values, long long n) {
    reference<float>().sum_of_squares(out, values, n);
}

template <int kTable, typename Act>
const Ops<Act> kExerciseTable = {
    kTableNames[kTable],
    embedding_forward<kTable, Act>,
    embedding_backward<kTable, Act>,
    layernorm_forward<kTable, Act>,
    layernorm_backward<kTable, Act>,
    linear_forward<kTable, Act>,
    linear_backward<kTable, Act>,
    attention_forward<kTable, Act>,
    attention_backward<kTable, Act>,
    attention_keeps_scores<Act>,
    residual_forward<kTable, Act>,
    cross_entropy<kTable, Act>,
    sum_of_squares,
    adamw<kTable, Act>,
    decode_embedding<Act>,
    kv_cache_write<Act>,
    decode_attention<kTable, Act>,
    sample<kTable, Act>,
    graph_refusal<kTable, Act>,
};

// For the op check: the exercises an op of the trainer runs now ("gemm (yours:
// 04_sgemm/sgemm_vectorized), gelu (...)"), empty where it runs the reference alone.
template <int kTable>
std::string exercises_in(TrainerOp op) {
    const ExerciseTable& table = tables[kTable];
    const auto with = [&](std::initializer_list<ExerciseOp> ops) {
        std::string text;
        for (ExerciseOp e : ops) {
            if (!table.ops[e].active()) continue;
            text += (text.empty() ? "" : ", ") + std::string(kExerciseOpNames[e]) + " (" +
                    table.whose + ": " + table.ops[e].exercise + ")";
        }
        return text;
    };
    switch (op) {
        case TrainerOp::kEmbeddingForward:
        case TrainerOp::kEmbeddingBackward:
            return with({kEmbedding});
        case TrainerOp::kLayerNormForward:
            return with({kLayerNorm});
        case TrainerOp::kLayerNormBackward:
            return with({kLayerNormBackward});
        case TrainerOp::kLinearForward:
            return with({kGemm, kGelu});
        case TrainerOp::kLinearBackward:
            return table.ops[kLinearBackward].active() ? with({kLinearBackward})
                                                       : with({kGemm, kGelu});
        case TrainerOp::kAttentionForward:
            return with({kAttention});
        case TrainerOp::kAttentionBackward:
            return with({kAttentionBackward});
        case TrainerOp::kResidualForward:
            return with({kResidual});
        case TrainerOp::kCrossEntropy:
            return with({kCrossEntropy});
        case TrainerOp::kAdamW:
            return with({kAdamW});
        case TrainerOp::kDecodeAttention:
            return with({kDecodeAttention});
        default:  // the embedding of a new token and the cache's writes are the reference's;
                  // sampled tokens are not compared
            return "";
    }
}

template <int kTable, typename Act>
const Ops<Act>* table_for_use() {
    load<Act>(tables[kTable]);
    if (table_options.check_every <= 0) return &kExerciseTable<kTable, Act>;
    return checked_table(kExerciseTable<kTable, Act>, reference<Act>(), exercises_in<kTable>,
                         table_options.check_every, table_options.steps, table_options.first_step);
}

}  // namespace

void configure_exercise_tables(const ExerciseTableOptions& options) { table_options = options; }

template <typename Act>
const Ops<Act>* exercise_table(const std::string& name) {
    if (name == kTableNames[0]) return table_for_use<0, Act>();
    if (name == kTableNames[1]) return table_for_use<1, Act>();
    if (name == kTableNames[2]) return table_for_use<2, Act>();
    static_assert(kTables == 3, "one line above per table");
    return nullptr;
}
template const Ops<float>* exercise_table<float>(const std::string&);
template const Ops<bf16>* exercise_table<bf16>(const std::string&);

template <>
const Ops<fp16>* exercise_table<fp16>(const std::string& name) {
    for (const char* table : kTableNames)
        if (name == table)
            throw std::invalid_argument("--kernels " + name +
                                        ": module 08's exercise tables run in fp32 or bf16, not "
                                        "fp16 (--dtype fp32 on a GPU without bf16)");
    return nullptr;
}

}  // namespace trainer
