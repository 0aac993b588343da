// trainer/ops_reference: the course's reference implementation of every op of the GPT trainer.
//
// Teaches: what a transformer's training step is made of at the kernel level. The matrix products
// (every linear layer, and attention's two products per head where it is not fused) go to
// cuBLASLt with float accumulation, with what can ride in the product's epilogue: the bias, the
// MLP's GELU and its derivative, the bias gradient. Everything between them is a memory-bound
// kernel, written here one per op, 16 bytes per access: embedding, LayerNorm (a warp per row),
// causal softmax (a warp per row), the residual add, a fused softmax cross-entropy that writes its
// gradient over the logits, and a fused AdamW. Attention in bf16 with heads of 64 or 128 is fused
// on GPUs with bf16 tensor cores: cuDNN's flash attention reading the packed qkv in place, where
// the build has cuDNN, else module 07's fast references (flash_wgmma and flash_wgmma_backward on
// a Hopper GPU, else flash_tc and flash_backward); elsewhere (fp32, fp16, other head sizes, older
// GPUs) the scores are written out and softmaxed between two products. Every reduction into a
// parameter gradient runs in a fixed order; so does everything else but the fused backwards' dq
// (module 07's float atomics make bf16 runs with it repeat to rounding rather than bit for bit;
// cuDNN does not promise either). In the all-fp32 mode, LayerNorm's forward and the causal softmax
// are module 06's fast references, called through their contracts. fp16 (the T4's mixed precision)
// runs the bf16 mode's kernels on __half, with cuBLASLt's fp16 products; its loss scaling is the
// model's (gpt.cu) and the loop's (train_gpt.cu). Generation's ops (a new token's embedding, the KV
// cache written, decode attention, sampling) are in ops_generation.cu. Every kernel and product is
// enqueued on op_stream() (ops.h), so that generation can capture a decoding step into a CUDA
// graph.
//
// Run:  ninja -C build/trainer train_gpt && build/trainer/bin/train_gpt --help (trainer/README.md)
// Interface: ops.h
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "course/activation.h"
#include "course/baselines.h"  // cuDNN's fused attention (common/baselines/cudnn_attention.cu)
#include "course/exercise.h"
#include "course/launch.h"
#include "flash_backward.h"      // module 07: attention backward, bf16 (flash_backward_fast.cu)
#include "flash_tc.h"            // module 07: attention forward, bf16 (flash_tc_fast.cu)
#include "flash_wgmma_packed.h"  // module 07: both on Hopper, bf16 (flash_wgmma*_fast.cu)
#include "kernel_common.h"
#include "layernorm.h"  // module 06: LayerNorm forward, fp32 (layernorm_fast.cu)
#include "ops.h"
#include "ops_generation.h"  // decode_embedding, kv_cache_write, decode_attention, sample
#include "ops_reference.h"
#include "softmax_causal.h"  // module 06: causal softmax, fp32 (softmax_causal.cu)

namespace trainer {
namespace {

// Arithmetic is float whatever the storage type (the conversions: course/activation.h).
using course::from_float;
using course::to_float;

// ---- Elementwise ops: W values per access (Pack, kernel_common.h) ----

// Functors of one or two values for elementwise() (below); Op::kInputs says how many it reads.
struct Add {  // the residual add; a gradient added into another
    static constexpr int kInputs = 2;
    __device__ float operator()(float a, float b) const { return a + b; }
};

// GELU, the tanh approximation of GPT-2 (as cuBLASLt's epilogues compute it).
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

struct GeluForward {
    static constexpr int kInputs = 1;
    __device__ float operator()(float x, float) const {
        return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
    }
};

struct GeluBackward {  // (x, dout) -> GELU'(x) * dout
    static constexpr int kInputs = 2;
    __device__ float operator()(float x, float dout) const {
        const float u = kGeluScale * (x + kGeluCubic * x * x * x);
        const float th = tanhf(u);
        const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
        return (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du_dx) * dout;
    }
};

// out[i] = op(a[i], b[i]) over `packs` packs of W values (b unread by a one-input op).
template <typename Act, int W, typename Op>
__global__ void elementwise_kernel(Act* out, const Act* a, const Act* b, long long packs, Op op) {
    using Vec = Pack<Act, W>;
    for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < packs;
         p += static_cast<long long>(gridDim.x) * blockDim.x) {
        const Vec as = reinterpret_cast<const Vec*>(a)[p];
        Vec bs = as;
        if constexpr (Op::kInputs == 2) bs = reinterpret_cast<const Vec*>(b)[p];
        Vec result;
        for (int k = 0; k < W; ++k)
            result.value[k] = from_float<Act>(op(to_float(as.value[k]), to_float(bs.value[k])));
        reinterpret_cast<Vec*>(out)[p] = result;
    }
}

// n values, 16 bytes per access where n and the pointers allow it.
template <typename Act, typename Op>
void elementwise(Act* out, const Act* a, const Act* b, long long n) {
    if (moves_wide<Act>(n, out, a, Op::kInputs == 2 ? b : a))
        elementwise_kernel<Act, kWide<Act>, Op>
            <<<elementwise_blocks(n / kWide<Act>), kElementwiseBlock, 0, op_stream()>>>(
                out, a, b, n / kWide<Act>, Op{});
    else
        elementwise_kernel<Act, 1, Op>
            <<<elementwise_blocks(n), kElementwiseBlock, 0, op_stream()>>>(out, a, b, n, Op{});
    CUDA_CHECK_LAUNCH();
}

// ---- cuBLASLt: every matrix product of the model ----

cudaDataType_t cuda_type(float) { return CUDA_R_32F; }
cudaDataType_t cuda_type(bf16) { return CUDA_R_16BF; }
cudaDataType_t cuda_type(fp16) { return CUDA_R_16F; }

void cublas_check(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string("cuBLASLt: ") + what + " failed (status " +
                                 std::to_string(static_cast<int>(status)) + ")");
}

// The GEMM plans already made, by shape: choosing an algorithm costs tens of microseconds and a
// training step has hundreds of products of a few dozen shapes.
struct GemmPlan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    bool runs;  // whether cuBLASLt had an algorithm for it
};

// What the product does besides D = alpha op(A) op(B) + beta D, fused into its epilogue (cuBLASLt
// computes these as it writes D, where it has an algorithm for them), with a vector and a matrix
// `aux` (m x n, leading dimension ldd) of D's type:
//   kBias          D += vector (m values, read) in every column (none where it is null)
//   kGeluBias      aux = op(A) op(B) + vector (written), D = GELU(aux) (cuBLASLt's GELU_AUX_BIAS)
//   kGeluGradient  D = op(A) op(B) * GELU'(aux) (aux read; cuBLASLt's DGELU)
//   kBiasGradient  vector = the sums of op(B) over k (n values, written: a linear layer's bias
//                  gradient, cuBLASLt's BGRADB)
// cuBLASLt's GELU is the tanh approximation, GPT-2's.
enum class Epilogue { kNone, kBias, kGeluBias, kGeluGradient, kBiasGradient };
struct Fused {
    Epilogue kind = Epilogue::kNone;
    const void* vector = nullptr;
    const void* aux = nullptr;
};

cublasLtEpilogue_t lt_epilogue(const Fused& fused) {
    switch (fused.kind) {
        case Epilogue::kBias:
            return fused.vector ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
        case Epilogue::kGeluBias:
            return fused.vector ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        case Epilogue::kGeluGradient:
            return CUBLASLT_EPILOGUE_DGELU;
        case Epilogue::kBiasGradient:
            return CUBLASLT_EPILOGUE_BGRADB;
        default:
            return CUBLASLT_EPILOGUE_DEFAULT;
    }
}

using GemmKey = std::tuple<int, int, int, int, int, int, int, int, int, int, int, long long,
                           long long, long long, int, int, int, int>;

// The largest power of two up to 256 that divides the address and every batch's offset: cuBLASLt
// picks algorithms for the alignment it is promised (the attention's T x T batches of an odd T
// are 4-byte aligned only).
int alignment_of(const void* p, long long stride_bytes) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    int alignment = 256;
    while (alignment > 1 && (address % alignment != 0 || stride_bytes % alignment != 0))
        alignment /= 2;
    return alignment;
}

struct Cublas {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 32u << 20;
    std::map<GemmKey, GemmPlan> plans;
};

Cublas& cublas() {
    static Cublas state;
    if (!state.handle) {
        cublas_check(cublasLtCreate(&state.handle), "cublasLtCreate");
        CUDA_CHECK(cudaMalloc(&state.workspace, state.workspace_bytes));
    }
    return state;
}

// Column-major, as cuBLAS sees memory: D[m, n] = alpha * op(A) @ op(B) + beta * D, with
// op(A) m x k, op(B) k x n, leading dimensions lda, ldb, ldd, and `batch` products whose
// operands are `stride_*` elements apart. A row-major matrix is its transpose in column-major,
// which is how the callers below turn the model's row-major products into these. Returns false,
// having done nothing, where cuBLASLt has no algorithm for the fused GELU or bias gradient (the
// caller does them another way); throws where it has none for a plain product or kBias.
template <typename In, typename Out>
bool gemm(Out* d, const In* a, const In* b, Fused fused, int m, int n, int k, bool trans_a,
          bool trans_b, int lda, int ldb, int ldd, float alpha, float beta, int batch = 1,
          long long stride_a = 0, long long stride_b = 0, long long stride_d = 0) {
    Cublas& state = cublas();
    const int align_a = alignment_of(a, stride_a * sizeof(In));
    const int align_b = alignment_of(b, stride_b * sizeof(In));
    const int align_d = alignment_of(d, stride_d * sizeof(Out));
    const GemmKey key{static_cast<int>(cuda_type(In{})),
                      static_cast<int>(cuda_type(Out{})),
                      static_cast<int>(lt_epilogue(fused)),
                      m,
                      n,
                      k,
                      trans_a,
                      trans_b,
                      lda,
                      ldb,
                      ldd,
                      stride_a,
                      stride_b,
                      stride_d,
                      batch,
                      align_a,
                      align_b,
                      align_d};
    auto found = state.plans.find(key);
    if (found == state.plans.end()) {
        GemmPlan plan{};
        cublas_check(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                     "matmul descriptor");
        const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
        const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
        const cublasLtEpilogue_t epilogue = lt_epilogue(fused);
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                       sizeof(epilogue));
        if (fused.aux) {
            const std::int64_t ld_aux = ldd;
            cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld_aux,
                                           sizeof(ld_aux));
        }
        // Stored shapes: op(A) is m x k, so A itself is k x m when transposed.
        cublas_check(cublasLtMatrixLayoutCreate(&plan.a, cuda_type(In{}), trans_a ? k : m,
                                                trans_a ? m : k, lda),
                     "layout of A");
        cublas_check(cublasLtMatrixLayoutCreate(&plan.b, cuda_type(In{}), trans_b ? n : k,
                                                trans_b ? k : n, ldb),
                     "layout of B");
        cublas_check(cublasLtMatrixLayoutCreate(&plan.d, cuda_type(Out{}), m, n, ldd),
                     "layout of D");
        if (batch > 1) {
            const std::pair<cublasLtMatrixLayout_t, long long> strided[] = {
                {plan.a, stride_a}, {plan.b, stride_b}, {plan.d, stride_d}};
            for (const auto& [layout, stride] : strided) {
                cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                 sizeof(batch));
                cublasLtMatrixLayoutSetAttribute(
                    layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
            }
        }
        cublasLtMatmulPreference_t preference;
        cublas_check(cublasLtMatmulPreferenceCreate(&preference), "preference");
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &state.workspace_bytes, sizeof(state.workspace_bytes));
        const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> alignments[] = {
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_d},
            {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d}};
        for (const auto& [attribute, bytes] : alignments)
            cublasLtMatmulPreferenceSetAttribute(preference, attribute, &bytes, sizeof(bytes));
        cublasLtMatmulHeuristicResult_t heuristic{};
        int found_algos = 0;
        cublasLtMatmulAlgoGetHeuristic(state.handle, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                       preference, 1, &heuristic, &found_algos);
        cublasLtMatmulPreferenceDestroy(preference);
        plan.runs = found_algos > 0;
        if (!plan.runs && (fused.kind == Epilogue::kNone || fused.kind == Epilogue::kBias))
            throw std::runtime_error(
                "cuBLASLt has no algorithm for a " + std::string(kDtypeName<In>) + " product of " +
                std::to_string(m) + " x " + std::to_string(n) + " x " + std::to_string(k) +
                " on this GPU (bf16 needs compute capability 8.0 or newer: "
                "try --dtype fp16 or fp32)");
        plan.algo = heuristic.algo;
        found = state.plans.emplace(key, plan).first;
    }
    const GemmPlan& plan = found->second;
    if (!plan.runs) return false;
    if (fused.vector)
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &fused.vector,
                                       sizeof(fused.vector));
    if (fused.aux)
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                       &fused.aux, sizeof(fused.aux));
    cublas_check(
        cublasLtMatmul(state.handle, plan.desc, &alpha, a, plan.a, b, plan.b, &beta, d, plan.d, d,
                       plan.d, &plan.algo, state.workspace, state.workspace_bytes, op_stream()),
        "cublasLtMatmul");
    return true;
}

// Scratch that grows to the largest request and is reused (the ops run one after another on
// one stream: ops.h's op_stream).
float* scratch_floats(long long n) {
    static float* buffer = nullptr;
    static long long size = 0;
    if (n > size) {
        if (buffer) CUDA_CHECK(cudaFree(buffer));
        CUDA_CHECK(cudaMalloc(&buffer, n * sizeof(float)));
        size = n;
    }
    return buffer;
}

// A vector of ones, for column sums as a product (dbias = dout^T @ ones).
template <typename Act>
const Act* ones(long long n) {
    static Act* buffer = nullptr;
    static long long size = 0;
    if (n > size) {
        if (buffer) CUDA_CHECK(cudaFree(buffer));
        CUDA_CHECK(cudaMalloc(&buffer, n * sizeof(Act)));
        std::vector<Act> host(n, Act(1.0f));
        CUDA_CHECK(cudaMemcpy(buffer, host.data(), n * sizeof(Act), cudaMemcpyHostToDevice));
        size = n;
    }
    return buffer;
}

// ---- Linear layers ----

// Row-major out[rows, OC] = inp[rows, C] @ weight[OC, C]^T is, column-major, out^T (OC x rows) =
// weight (stored C x OC, transposed) @ inp^T (stored C x rows as it is). With gelu_input, the
// product and its bias go there and their GELU to out, in the product's epilogue where cuBLASLt
// has one for these shapes, else in a pass of its own.
template <typename Act>
void linear_forward(Act* out, Act* gelu_input, const Act* inp, const Act* weight, const Act* bias,
                    int rows, int C, int OC) {
    if (!gelu_input) {
        gemm(out, weight, inp, {Epilogue::kBias, bias}, OC, rows, C, true, false, C, C, OC, 1.0f,
             0.0f);
        return;
    }
    if (gemm(out, weight, inp, {Epilogue::kGeluBias, bias, gelu_input}, OC, rows, C, true, false, C,
             C, OC, 1.0f, 0.0f))
        return;
    gemm(gelu_input, weight, inp, {Epilogue::kBias, bias}, OC, rows, C, true, false, C, C, OC, 1.0f,
         0.0f);
    elementwise<Act, GeluForward>(out, gelu_input, nullptr, static_cast<long long>(rows) * OC);
}

template <typename Act>
void linear_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                     const Act* gelu_input, const Act* weight, int rows, int C, int OC) {
    // dinp[rows, C] = dout[rows, OC] @ weight[OC, C]: column-major dinp^T = weight^T @ dout^T,
    // both stored untransposed; times GELU'(gelu_input) where inp was GELU(gelu_input).
    if (!gelu_input) {
        gemm(dinp, weight, dout, {}, C, rows, OC, false, false, C, OC, C, 1.0f, 0.0f);
    } else if (!gemm(dinp, weight, dout, {Epilogue::kGeluGradient, nullptr, gelu_input}, C, rows,
                     OC, false, false, C, OC, C, 1.0f, 0.0f)) {
        gemm(dinp, weight, dout, {}, C, rows, OC, false, false, C, OC, C, 1.0f, 0.0f);
        elementwise<Act, GeluBackward>(dinp, gelu_input, dinp, static_cast<long long>(rows) * C);
    }
    // dweight[OC, C] += dout^T @ inp: column-major dweight^T (C x OC) = inp^T (C x rows) @ dout
    // (rows x OC, the transpose of dout^T as stored). dbias[OC] += the column sums of dout, which
    // are op(B)'s sums over k: the same product's epilogue computes them as it reads dout, into
    // scratch (it overwrites), then added; where cuBLASLt has no such epilogue, a product with a
    // column of ones (rereading dout).
    float* column_sums = dbias ? scratch_floats(OC) : nullptr;
    const bool sums_fused =
        dbias && gemm(dweight, inp, dout, {Epilogue::kBiasGradient, column_sums}, C, OC, rows,
                      false, true, C, OC, C, 1.0f, 1.0f);
    if (!sums_fused) gemm(dweight, inp, dout, {}, C, OC, rows, false, true, C, OC, C, 1.0f, 1.0f);
    if (!dbias) return;
    if (!sums_fused)
        gemm(column_sums, dout, ones<Act>(rows), {}, OC, 1, rows, false, false, OC, rows, OC, 1.0f,
             0.0f);
    elementwise<float, Add>(dbias, dbias, column_sums, OC);
}

// ---- Embedding ----

template <typename Act>
__global__ void embedding_forward_kernel(Act* out, const int* tokens, const Act* wte,
                                         const Act* wpe, int B, int T, int C) {
    const long long n = static_cast<long long>(B) * T * C;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const long long position = i / C;  // b * T + t
        const int c = static_cast<int>(i % C);
        const int t = static_cast<int>(position % T);
        const int token = tokens[position];
        out[i] = from_float<Act>(to_float(wte[static_cast<long long>(token) * C + c]) +
                                 to_float(wpe[static_cast<long long>(t) * C + c]));
    }
}

template <typename Act>
void embedding_forward(Act* out, const int* tokens, const Act* wte, const Act* wpe, int B, int T,
                       int C) {
    const long long n = static_cast<long long>(B) * T * C;
    embedding_forward_kernel<<<elementwise_blocks(n), kElementwiseBlock, 0, op_stream()>>>(
        out, tokens, wte, wpe, B, T, C);
    CUDA_CHECK_LAUNCH();
}

// One block per distinct token: its threads own channels and sum the token's positions in
// increasing order.
template <typename Act>
__global__ void token_embedding_backward_kernel(float* dwte, const Act* dout, const int* token,
                                                const int* start, const int* positions, int C) {
    const int bucket = blockIdx.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = 0.0f;
        for (int p = start[bucket]; p < start[bucket + 1]; ++p)
            sum += to_float(dout[static_cast<long long>(positions[p]) * C + c]);
        dwte[static_cast<long long>(token[bucket]) * C + c] += sum;
    }
}

// One thread per (t, c): the sum over the batch, in order.
template <typename Act>
__global__ void position_embedding_backward_kernel(float* dwpe, const Act* dout, int B, int T,
                                                   int C) {
    const long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;  // t * C + c
    if (i >= static_cast<long long>(T) * C) return;
    float sum = 0.0f;
    for (int b = 0; b < B; ++b) sum += to_float(dout[static_cast<long long>(b) * T * C + i]);
    dwpe[i] += sum;
}

template <typename Act>
void embedding_backward(float* dwte, float* dwpe, const Act* dout, const TokenBuckets& buckets,
                        int B, int T, int C) {
    token_embedding_backward_kernel<<<buckets.count, 256, 0, op_stream()>>>(
        dwte, dout, buckets.token, buckets.start, buckets.positions, C);
    CUDA_CHECK_LAUNCH();
    const long long n = static_cast<long long>(T) * C;
    position_embedding_backward_kernel<<<static_cast<unsigned>(
                                             course::ceil_div(n, kElementwiseBlock)),
                                         kElementwiseBlock, 0, op_stream()>>>(dwpe, dout, B, T, C);
    CUDA_CHECK_LAUNCH();
}

// ---- LayerNorm ----

constexpr float kLayerNormEpsilon = 1e-5f;  // GPT-2's, and module 06's kLayerNormEps
constexpr int kNormWarps = 4;               // warps per block: one row at a time each

// A warp per row: the mean, then the variance around it (two passes over a row the warp's L1
// holds), then the normalized row.
template <typename Act>
__global__ void layernorm_forward_kernel(Act* out, float* mean, float* rstd, const Act* inp,
                                         const Act* weight, const Act* bias, int rows, int C) {
    const int row = blockIdx.x * kNormWarps + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (row >= rows) return;
    const Act* x = inp + static_cast<long long>(row) * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += kWarp) sum += to_float(x[c]);
    const float row_mean = warp_sum(sum) / C;
    float squares = 0.0f;
    for (int c = lane; c < C; c += kWarp) {
        const float centered = to_float(x[c]) - row_mean;
        squares += centered * centered;
    }
    const float row_rstd = rsqrtf(warp_sum(squares) / C + kLayerNormEpsilon);
    Act* y = out + static_cast<long long>(row) * C;
    for (int c = lane; c < C; c += kWarp)
        y[c] = from_float<Act>((to_float(x[c]) - row_mean) * row_rstd * to_float(weight[c]) +
                               to_float(bias[c]));
    if (lane == 0) {
        mean[row] = row_mean;
        rstd[row] = row_rstd;
    }
}

template <typename Act>
void layernorm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                       const Act* bias, int rows, int C) {
    if constexpr (std::is_same_v<Act, float>) {
        // Module 06's contract is exactly this op in fp32.
        ::layernorm(inp, weight, bias, out, mean, rstd, rows, C);
    } else {
        layernorm_forward_kernel<<<course::ceil_div(rows, kNormWarps), kNormWarps * kWarp, 0,
                                   op_stream()>>>(out, mean, rstd, inp, weight, bias, rows, C);
        CUDA_CHECK_LAUNCH();
    }
}

constexpr int kNormBackwardRowsPerBlock = 32;

// A warp per row for dinp; each warp sums its rows' dweight and dbias terms into its own slice
// of shared memory, then the block adds the warps' slices in order into its partial row:
// partials[block] holds C dweight sums then C dbias sums. Each lane moves W consecutive columns
// at a time (16 bytes where C allows): a warp's requests are then 512 contiguous bytes, enough in
// flight to keep the memory busy (with one value per lane, the kernel ran at a tenth of it). A
// slice holds column p * W + k at k * (C / W) + p: the 32 lanes of a warp, W columns apart, add
// into 32 consecutive floats (column-major they would be W floats apart, W lanes per bank).
constexpr int kNormBackwardWarps = 8;

template <typename Act, int W>
__global__ void layernorm_backward_kernel(Act* dinp, float* partials, const Act* dout,
                                          const Act* inp, const Act* weight, const float* mean,
                                          const float* rstd, int rows, int C) {
    using Vec = Pack<Act, W>;
    extern __shared__ float sums[];  // [kNormBackwardWarps][2][W][C / W]
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    float* warp_sums = sums + static_cast<long long>(warp) * 2 * C;
    for (int c = lane; c < 2 * C; c += kWarp) warp_sums[c] = 0.0f;
    const int packs = C / W;
    const Vec* weights = reinterpret_cast<const Vec*>(weight);
    const int first_row = blockIdx.x * kNormBackwardRowsPerBlock;
    const int last_row = min(first_row + kNormBackwardRowsPerBlock, rows);
    for (int row = first_row + warp; row < last_row; row += kNormBackwardWarps) {
        const long long offset = static_cast<long long>(row) * C;
        const Vec* x = reinterpret_cast<const Vec*>(inp + offset);
        const Vec* dy = reinterpret_cast<const Vec*>(dout + offset);
        Vec* dx = reinterpret_cast<Vec*>(dinp + offset);
        const float row_mean = mean[row], row_rstd = rstd[row];
        // xhat = (x - mean) * rstd, g = dout * weight; the two row means of the formula:
        float g_sum = 0.0f, g_xhat_sum = 0.0f;
        for (int p = lane; p < packs; p += kWarp) {
            const Vec xs = x[p], dys = dy[p], ws = weights[p];
            for (int k = 0; k < W; ++k) {
                const float xhat = (to_float(xs.value[k]) - row_mean) * row_rstd;
                const float g = to_float(dys.value[k]) * to_float(ws.value[k]);
                g_sum += g;
                g_xhat_sum += g * xhat;
            }
        }
        const float g_mean = warp_sum(g_sum) / C, g_xhat_mean = warp_sum(g_xhat_sum) / C;
        for (int p = lane; p < packs; p += kWarp) {
            const Vec xs = x[p], dys = dy[p], ws = weights[p];
            Vec dxs = dx[p];
            for (int k = 0; k < W; ++k) {
                const float xhat = (to_float(xs.value[k]) - row_mean) * row_rstd;
                const float d = to_float(dys.value[k]);
                const float g = d * to_float(ws.value[k]);
                const float dxhat = row_rstd * (g - g_mean - xhat * g_xhat_mean);
                dxs.value[k] = from_float<Act>(to_float(dxs.value[k]) + dxhat);
                warp_sums[k * packs + p] += d * xhat;
                warp_sums[C + k * packs + p] += d;
            }
            dx[p] = dxs;
        }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
        const int column = c % C;  // of dweight (c < C) or dbias
        const int slot = c - column + column % W * packs + column / W;
        float total = 0.0f;
        for (int w = 0; w < kNormBackwardWarps; ++w)
            total += sums[static_cast<long long>(w) * 2 * C + slot];
        partials[static_cast<long long>(blockIdx.x) * 2 * C + c] = total;
    }
}

// dweight[c] += sum over blocks of partials[block][c] (and dbias[c] from column C + c). A block
// of 32 x kPartialLanes threads per 32 columns: lane (x, y) adds the partial rows y, y +
// kPartialLanes, ... of column x (a warp reads 32 contiguous floats), then the kPartialLanes
// sums of a column are added in order: a fixed order, so the same bits on every run, with
// hundreds of independent loads in flight instead of one long chain per column.
constexpr int kPartialLanes = 32;

__global__ void add_partials_kernel(float* dweight, float* dbias, const float* partials, int blocks,
                                    int C) {
    // +1: the column reads below are free of bank conflicts
    __shared__ float sums[kPartialLanes][kWarp + 1];
    const int column = blockIdx.x * kWarp + threadIdx.x;  // of the 2C: dweight's, then dbias's
    float sum = 0.0f;
    if (column < 2 * C)
        for (int b = threadIdx.y; b < blocks; b += kPartialLanes)
            sum += partials[static_cast<long long>(b) * 2 * C + column];
    sums[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y != 0 || column >= 2 * C) return;
    float total = 0.0f;
    for (int y = 0; y < kPartialLanes; ++y) total += sums[y][threadIdx.x];
    if (column < C)
        dweight[column] += total;
    else
        dbias[column - C] += total;
}

template <typename Act, int W>
void launch_layernorm_backward(Act* dinp, float* partials, const Act* dout, const Act* inp,
                               const Act* weight, const float* mean, const float* rstd, int rows,
                               int C, int blocks) {
    static bool opted_in = false;
    if (!opted_in) {
        course::opt_in_shared_bytes(layernorm_backward_kernel<Act, W>);
        opted_in = true;
    }
    const std::size_t shared = static_cast<std::size_t>(kNormBackwardWarps) * 2 * C * sizeof(float);
    layernorm_backward_kernel<Act, W><<<blocks, kNormBackwardWarps * kWarp, shared, op_stream()>>>(
        dinp, partials, dout, inp, weight, mean, rstd, rows, C);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void layernorm_backward(Act* dinp, float* dweight, float* dbias, const Act* dout, const Act* inp,
                        const Act* weight, const float* mean, const float* rstd, int rows, int C) {
    const int blocks = course::ceil_div(rows, kNormBackwardRowsPerBlock);
    float* partials = scratch_floats(static_cast<long long>(blocks) * 2 * C);
    // 16-byte accesses where every row starts on 16 bytes.
    if (moves_wide<Act>(C, dinp, dout, inp, weight))
        launch_layernorm_backward<Act, kWide<Act>>(dinp, partials, dout, inp, weight, mean, rstd,
                                                   rows, C, blocks);
    else
        launch_layernorm_backward<Act, 1>(dinp, partials, dout, inp, weight, mean, rstd, rows, C,
                                          blocks);
    add_partials_kernel<<<course::ceil_div(2 * C, kWarp), dim3(kWarp, kPartialLanes), 0,
                          op_stream()>>>(dweight, dbias, partials, blocks, C);
    CUDA_CHECK_LAUNCH();
}

// ---- Attention, the T x T way: cuBLAS products per head and a causal softmax between them ----

// `count` tensors side by side per position, packed [B, T, count, NH, HS] (qkv: count 3), and
// the same as one [B, NH, T, HS] tensor after another (q, k, v): the layout attention's kernels
// take. Split goes from packed to per-head, merge back, converting to the output's type (the
// flash backward's float gradients to Act). A block row of the grid per head tensor (its
// (which, b, h) from blockIdx.y, no division per element); a thread moves W values of a row of
// HS, both sides contiguous in them.
template <bool kSplit, int W, typename To, typename From>
__global__ void rearrange_heads_kernel(To* to, const From* from, int count, int B, int T, int NH,
                                       int HS) {
    const int head = blockIdx.y;  // (which * B + b) * NH + h
    const int h = head % NH, b = head / NH % B, which = head / (NH * B);
    const int packs_per_row = HS / W;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;  // t * packs_per_row + pack
    if (i >= T * packs_per_row) return;
    const int t = i / packs_per_row, d = i % packs_per_row * W;
    const long long per_head = (static_cast<long long>(head) * T + t) * HS + d;
    const long long packed =
        ((static_cast<long long>(b) * T + t) * count + which) * NH * HS + h * HS + d;
    const Pack<From, W> values =
        *reinterpret_cast<const Pack<From, W>*>(from + (kSplit ? packed : per_head));
    Pack<To, W> converted;
    for (int k = 0; k < W; ++k) converted.value[k] = from_float<To>(to_float(values.value[k]));
    *reinterpret_cast<Pack<To, W>*>(to + (kSplit ? per_head : packed)) = converted;
}

constexpr int kRearrangeBlock = 256;

// Launches the kernel over `count` tensors of B * NH * T rows of HS: 16 bytes of To per access
// (and as many values of From) where HS and the pointers allow it.
template <bool kSplit, typename To, typename From>
void rearrange_heads(To* to, const From* from, int count, int B, int T, int NH, int HS) {
    const int heads = count * B * NH;
    if (heads > 65535)
        throw std::invalid_argument("attention: " + std::to_string(heads) +
                                    " head tensors are more than a grid's 65535 rows");
    const auto launch = [&](auto width) {
        constexpr int W = decltype(width)::value;
        const dim3 grid(course::ceil_div(T * (HS / W), kRearrangeBlock), heads);
        rearrange_heads_kernel<kSplit, W>
            <<<grid, kRearrangeBlock, 0, op_stream()>>>(to, from, count, B, T, NH, HS);
    };
    if (HS % kWide<To> == 0 && course::is_aligned(to, 16) &&
        course::is_aligned(from, sizeof(From) * kWide<To>))
        launch(std::integral_constant<int, kWide<To>>{});
    else
        launch(std::integral_constant<int, 1>{});
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void split_heads(Act* heads, const Act* packed, int count, int B, int T, int NH, int HS) {
    rearrange_heads<true>(heads, packed, count, B, T, NH, HS);
}
template <typename Act, typename Head>
void merge_heads(Act* packed, const Head* heads, int count, int B, int T, int NH, int HS) {
    rearrange_heads<false>(packed, heads, count, B, T, NH, HS);
}

// A warp per row i of a T x T score matrix: softmax of scale * scores over keys 0..i, zeros after.
template <typename Act>
__global__ void causal_softmax_kernel(Act* att, const Act* preatt, long long rows, int T,
                                      float scale) {
    const long long row =
        blockIdx.x * static_cast<long long>(blockDim.x / kWarp) + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (row >= rows) return;
    const int i = static_cast<int>(row % T);  // the query's position: keys 0..i are visible
    const Act* scores = preatt + row * T;
    float row_max = -FLT_MAX;
    for (int j = lane; j <= i; j += kWarp) row_max = fmaxf(row_max, to_float(scores[j]));
    row_max = warp_max(row_max);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += kWarp) sum += expf((to_float(scores[j]) - row_max) * scale);
    const float inverse = 1.0f / warp_sum(sum);
    Act* probs = att + row * T;
    for (int j = lane; j < T; j += kWarp)
        probs[j] = from_float<Act>(j <= i ? expf((to_float(scores[j]) - row_max) * scale) * inverse
                                          : 0.0f);
}

// dpreatt = scale * att * (datt - sum_k att * datt) on keys 0..i, in place over datt.
template <typename Act>
__global__ void causal_softmax_backward_kernel(Act* datt, const Act* att, long long rows, int T,
                                               float scale) {
    const long long row =
        blockIdx.x * static_cast<long long>(blockDim.x / kWarp) + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (row >= rows) return;
    const int i = static_cast<int>(row % T);
    const Act* p = att + row * T;
    Act* dp = datt + row * T;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += kWarp) dot += to_float(p[j]) * to_float(dp[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < T; j += kWarp)
        dp[j] = from_float<Act>(j <= i ? scale * to_float(p[j]) * (to_float(dp[j]) - dot) : 0.0f);
}

constexpr int kSoftmaxRowsPerBlock = 8;  // warps per block

// Launchers: module 06's contract in fp32, the kernels above in bf16 and fp16 (in bf16 only heads
// that flash attention does not take come here; fp16 always does).
template <typename Act>
void causal_softmax(Act* att, const Act* preatt, long long rows, int T, float scale) {
    if constexpr (std::is_same_v<Act, float>) {
        ::softmax_causal(preatt, att, static_cast<int>(rows / T), T, scale);  // exactly this op
    } else {
        const unsigned blocks = static_cast<unsigned>(course::ceil_div(rows, kSoftmaxRowsPerBlock));
        causal_softmax_kernel<<<blocks, kSoftmaxRowsPerBlock * kWarp, 0, op_stream()>>>(
            att, preatt, rows, T, scale);
        CUDA_CHECK_LAUNCH();
    }
}

template <typename Act>
void causal_softmax_backward(Act* datt, const Act* att, long long rows, int T, float scale) {
    const unsigned blocks = static_cast<unsigned>(course::ceil_div(rows, kSoftmaxRowsPerBlock));
    causal_softmax_backward_kernel<<<blocks, kSoftmaxRowsPerBlock * kWarp, 0, op_stream()>>>(
        datt, att, rows, T, scale);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void scores_attention_forward(Act* out, Act* att, Act* scratch, Act* preatt, const Act* qkv, int B,
                              int T, int C, int NH) {
    const int HS = C / NH;
    const long long btc = static_cast<long long>(B) * T * C;
    Act* q = scratch;
    Act* k = scratch + btc;
    Act* v = scratch + 2 * btc;
    split_heads(scratch, qkv, 3, B, T, NH, HS);
    const int heads = B * NH;
    const long long head_stride = static_cast<long long>(T) * HS,
                    score_stride = static_cast<long long>(T) * T;
    // preatt[i][j] = q_i . k_j: column-major preatt^T (T x T) = k^T... k stored (HS x T),
    // transposed.
    gemm<Act, Act>(preatt, k, q, {}, T, T, HS, true, false, HS, HS, T, 1.0f, 0.0f, heads,
                   head_stride, head_stride, score_stride);
    const float scale = attention_scale(HS);
    causal_softmax(att, preatt, static_cast<long long>(heads) * T, T, scale);
    // y[i][d] = sum_j att[i][j] v[j][d]: column-major y^T (HS x T) = v^T (HS x T) @ att^T (T x T),
    // both stored as they are. y goes where q was (q is no longer needed).
    Act* y = q;
    gemm<Act, Act>(y, v, att, {}, HS, T, T, false, false, HS, T, HS, 1.0f, 0.0f, heads, head_stride,
                   score_stride, head_stride);
    merge_heads(out, y, 1, B, T, NH, HS);
}

template <typename Act>
void scores_attention_backward(Act* dqkv, Act* scratch, Act* datt, const Act* dout, const Act* qkv,
                               const Act* att, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const long long btc = static_cast<long long>(B) * T * C;
    const Act* q = scratch;
    const Act* k = scratch + btc;
    const Act* v = scratch + 2 * btc;
    Act* dq = scratch + 3 * btc;
    Act* dk = scratch + 4 * btc;
    Act* dv = scratch + 5 * btc;
    split_heads(scratch, qkv, 3, B, T, NH, HS);
    // dy per head goes where dq will be: dq is written last, after dy's last use.
    Act* dy = dq;
    split_heads(dy, dout, 1, B, T, NH, HS);
    const int heads = B * NH;
    const long long head_stride = static_cast<long long>(T) * HS,
                    score_stride = static_cast<long long>(T) * T;
    // datt[i][j] = dy_i . v_j (the same product as preatt, with dy for q and v for k)
    gemm<Act, Act>(datt, v, dy, {}, T, T, HS, true, false, HS, HS, T, 1.0f, 0.0f, heads,
                   head_stride, head_stride, score_stride);
    // dv[j][d] = sum_i att[i][j] dy[i][d]: column-major dv^T (HS x T) = dy^T (HS x T) @ att
    // (T x T, the transpose of att^T as stored).
    gemm<Act, Act>(dv, dy, att, {}, HS, T, T, false, true, HS, T, HS, 1.0f, 0.0f, heads,
                   head_stride, score_stride, head_stride);
    const long long rows = static_cast<long long>(heads) * T;
    const float scale = attention_scale(HS);
    causal_softmax_backward(datt, att, rows, T, scale);
    // dk[j][d] = sum_i dpreatt[i][j] q[i][d] (the shape of dv's product), then
    // dq[i][d] = sum_j dpreatt[i][j] k[j][d] (the shape of y's product; overwrites dy).
    gemm<Act, Act>(dk, q, datt, {}, HS, T, T, false, true, HS, T, HS, 1.0f, 0.0f, heads,
                   head_stride, score_stride, head_stride);
    gemm<Act, Act>(dq, k, datt, {}, HS, T, T, false, false, HS, T, HS, 1.0f, 0.0f, heads,
                   head_stride, score_stride, head_stride);
    merge_heads(dqkv, dq, 3, B, T, NH, HS);
}

// ---- Attention, the flash way: module 07's kernels (bf16, heads of 64 or 128) ----
//
// No T x T buffer: the forward keeps each row's logsumexp, the backward recomputes the
// probabilities from it. Where flash_wgmma_runs_here (a Hopper GPU, sm_90a code in this build) the
// kernels are flash_wgmma's and flash_wgmma_backward's fast references, else flash_tc's and
// flash_backward's: one contract each (the Hopper ones are the others' on Hopper's instructions),
// with the same O and logsumexps between them. The contracts take [B, NH, T, HS] tensors, so q, k,
// v (and out, dout) are split per head around them as in the T x T way, except on Hopper: the fast
// references read q, k, v in the packed qkv and out, dout token-major themselves, the forward
// writes out token-major and the backward dqkv in bf16 (flash_wgmma_packed.h), dq's float sums in
// the scratch; elsewhere dq, dk, dv, in float, are merged back as before.

__global__ void tensor_core_probe_kernel() {}

// Module 07's kernels need bf16 tensor cores (sm_80) in this build and on this GPU.
bool flash_attention_runs_here() {
    static const bool runs = [] {
        int device = 0, major = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
        return major >= 8 && course::compiled_arch(tensor_core_probe_kernel) >= 80;
    }();
    return runs;
}

// fp16 takes the T x T way: cuDNN's fused attention has no engine for it before compute
// capability 8.0 (the GPUs that run the trainer in fp16), and module 07's kernels are bf16.
template <typename Act>
bool attention_keeps_scores(int head_size) {
    return !(std::is_same_v<Act, bf16> && (head_size == 64 || head_size == 128) &&
             flash_attention_runs_here());
}

void flash_attention_forward(bf16* out, float* lse, bf16* scratch, const bf16* qkv, int B, int T,
                             int C, int NH) {
    const int HS = C / NH;
    if (flash_wgmma_runs_here()) {
        ::flash_wgmma_packed(qkv, out, lse, B, NH, T, HS, attention_scale(HS), true);
        return;
    }
    const long long btc = static_cast<long long>(B) * T * C;
    bf16 *q = scratch, *k = scratch + btc, *v = scratch + 2 * btc, *y = scratch + 3 * btc;
    split_heads(q, qkv, 3, B, T, NH, HS);
    ::flash_tc(q, k, v, y, lse, B, NH, T, HS, attention_scale(HS), true);
    merge_heads(out, y, 1, B, T, NH, HS);
}

void flash_attention_backward(bf16* dqkv, bf16* scratch, const bf16* dout, const bf16* qkv,
                              const bf16* out, const float* lse, int B, int T, int C, int NH) {
    const int HS = C / NH;
    const long long btc = static_cast<long long>(B) * T * C;
    bf16 *q = scratch, *k = scratch + btc, *v = scratch + 2 * btc, *y = scratch + 3 * btc,
         *dy = scratch + 4 * btc;
    // dq, dk, dv in float, one after another (merged back as one count-3 tensor); on Hopper dq's
    // float sums alone
    float* dq = reinterpret_cast<float*>(scratch + 5 * btc);
    if (flash_wgmma_runs_here()) {
        ::flash_wgmma_backward_packed(qkv, out, dout, lse, dq, dqkv, B, NH, T, HS,
                                      attention_scale(HS), true);
        return;
    }
    split_heads(q, qkv, 3, B, T, NH, HS);
    split_heads(y, out, 1, B, T, NH, HS);
    split_heads(dy, dout, 1, B, T, NH, HS);
    ::flash_backward(q, k, v, y, dy, lse, dq, dq + btc, dq + 2 * btc, B, NH, T, HS,
                     attention_scale(HS), true);
    merge_heads(dqkv, dq, 3, B, T, NH, HS);
}

// ---- Attention, cuDNN's way: its fused flash attention, reading the packed qkv in place ----
//
// Where the course's baselines library has cuDNN (common/baselines/cudnn_attention.cu, the graph
// module 07 is measured against), its engines read q, k, v where the qkv projection wrote them
// (each token's row of 3C holds them side by side: token-major, a row stride of 3C) and write out,
// and in the backward dq, dk, dv into dqkv, the same way: no per-head copies at all. Where it
// refuses (a build without cuDNN, no engine for the shape), module 07's flash kernels take over,
// said once on stderr.

bool cudnn_attention_allowed = true;  // allow_cudnn_attention (ops.h)

// Runs `call` unless cuDNN refused an earlier one from the same place; false where it refuses.
template <typename Call>
bool cudnn_took(const char* what, Call&& call) {
    static bool refused = false;
    if (refused || !cudnn_attention_allowed) return false;
    try {
        call();
        return true;
    } catch (const std::exception& e) {
        refused = true;
        std::fprintf(stderr,
                     "%s: cuDNN's fused attention not used (%s): module 07's flash kernels "
                     "instead\n",
                     what, e.what());
        return false;
    }
}

const std::uint16_t* bits(const bf16* p) { return reinterpret_cast<const std::uint16_t*>(p); }
std::uint16_t* bits(bf16* p) { return reinterpret_cast<std::uint16_t*>(p); }

bool cudnn_attention_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH) {
    const int HS = C / NH;
    return cudnn_took("attention forward", [&] {
        course::baseline::cudnn_attention_token_major_bf16(
            bits(qkv), bits(qkv + C), bits(qkv + 2 * C), bits(out), lse, B, NH, T, HS,
            attention_scale(HS), true, 3 * C, C);
    });
}

bool cudnn_attention_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                              const float* lse, int B, int T, int C, int NH) {
    const int HS = C / NH;
    return cudnn_took("attention backward", [&] {
        course::baseline::cudnn_attention_backward_token_major_bf16(
            bits(qkv), bits(qkv + C), bits(qkv + 2 * C), bits(out), bits(dout), lse, bits(dqkv),
            bits(dqkv + C), bits(dqkv + 2 * C), B, NH, T, HS, attention_scale(HS), true, 3 * C, C);
    });
}

// ---- Attention: the way the head size allows ----

template <typename Act>
void attention_forward(Act* out, float* lse, Act* att, Act* scratch, Act* preatt, const Act* qkv,
                       int B, int T, int C, int NH) {
    if constexpr (std::is_same_v<Act, bf16>) {
        if (!attention_keeps_scores<Act>(C / NH)) {
            if (!cudnn_attention_forward(out, lse, qkv, B, T, C, NH))
                flash_attention_forward(out, lse, scratch, qkv, B, T, C, NH);
            return;
        }
    }
    scores_attention_forward(out, att, scratch, preatt, qkv, B, T, C, NH);
}

template <typename Act>
void attention_backward(Act* dqkv, Act* scratch, Act* datt, const Act* dout, const Act* qkv,
                        const Act* out, const float* lse, const Act* att, int B, int T, int C,
                        int NH) {
    if constexpr (std::is_same_v<Act, bf16>) {
        if (!attention_keeps_scores<Act>(C / NH)) {
            if (!cudnn_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH))
                flash_attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, C, NH);
            return;
        }
    }
    scores_attention_backward(dqkv, scratch, datt, dout, qkv, att, B, T, C, NH);
}

// ---- The residual add ----

template <typename Act>
void residual_forward(Act* out, const Act* a, const Act* b, long long n) {
    elementwise<Act, Add>(out, a, b, n);
}

// ---- Cross-entropy, fused with its gradient ----

constexpr int kCrossEntropyBlock = 512;

// Sum of x over the block; every thread gets the result. `shared` holds one float per warp.
__device__ float block_sum(float x, float* shared) {
    const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    x = warp_sum(x);
    __syncthreads();  // shared may still be read from a previous call
    if (lane == 0) shared[warp] = x;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w) total += shared[w];
    return total;
}

// A block per row. One pass keeps each thread's running (max, sum of exp) over its columns,
// merged across the block; a second pass writes the gradient. Each thread moves W consecutive
// columns at a time (the padded row length Vp is a multiple of W).
template <typename Act, int W>
__global__ void cross_entropy_kernel(Act* logits, float* losses, const int* targets, float dloss,
                                     int V, int Vp) {
    __shared__ float shared[kCrossEntropyBlock / kWarp];
    const long long row = blockIdx.x;
    Act* x = logits + row * Vp;
    Pack<Act, W>* packs = reinterpret_cast<Pack<Act, W>*>(x);
    const int live = (V + W - 1) / W;  // packs holding at least one real column
    float running_max = -FLT_MAX, running_sum = 0.0f;
    for (int p = threadIdx.x; p < live; p += blockDim.x) {
        const Pack<Act, W> pack = packs[p];
        for (int k = 0; k < W && p * W + k < V; ++k) {
            const float value = to_float(pack.value[k]);
            if (value > running_max) {
                running_sum *= expf(running_max - value);
                running_max = value;
            }
            running_sum += expf(value - running_max);
        }
    }
    // The block's max, then every thread's sum rescaled to it.
    float row_max = running_max;
    {
        const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
        const float m = warp_max(row_max);
        if (lane == 0) shared[warp] = m;
        __syncthreads();
        row_max = -FLT_MAX;
        for (int w = 0; w < static_cast<int>(blockDim.x / kWarp); ++w)
            row_max = fmaxf(row_max, shared[w]);
    }
    const float row_sum = block_sum(running_sum * expf(running_max - row_max), shared);
    const int target = targets[row];
    if (threadIdx.x == 0) losses[row] = row_max + logf(row_sum) - to_float(x[target]);
    if (dloss == 0.0f) return;
    __syncthreads();  // every thread has read x[target] before it is overwritten
    const float inverse_sum = 1.0f / row_sum;
    for (int p = threadIdx.x; p < Vp / W; p += blockDim.x) {
        const Pack<Act, W> pack = packs[p];
        Pack<Act, W> grad;
        for (int k = 0; k < W; ++k) {
            const int c = p * W + k;
            float g = 0.0f;  // the padding columns get no gradient
            if (c < V) {
                const float probability = expf(to_float(pack.value[k]) - row_max) * inverse_sum;
                g = (probability - (c == target ? 1.0f : 0.0f)) * dloss;
            }
            grad.value[k] = from_float<Act>(g);
        }
        packs[p] = grad;
    }
}

template <typename Act>
void cross_entropy(Act* logits, float* losses, const int* targets, float dloss, int rows, int V,
                   int Vp) {
    if (moves_wide<Act>(Vp, logits))  // (every row then starts on 16 bytes)
        cross_entropy_kernel<Act, kWide<Act>>
            <<<rows, kCrossEntropyBlock, 0, op_stream()>>>(logits, losses, targets, dloss, V, Vp);
    else
        cross_entropy_kernel<Act, 1>
            <<<rows, kCrossEntropyBlock, 0, op_stream()>>>(logits, losses, targets, dloss, V, Vp);
    CUDA_CHECK_LAUNCH();
}

// ---- Optimizer ----

constexpr int kSquaresBlocks = 1024;

// A fixed grid, so each block sums the same elements in the same order on every call.
__global__ void sum_of_squares_kernel(float* partials, const float* values, long long n) {
    __shared__ float shared[kElementwiseBlock / kWarp];
    float sum = 0.0f;
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x)
        sum += values[i] * values[i];
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void sum_partials_kernel(float* out, const float* partials, int count) {
    __shared__ float shared[kSquaresBlocks / kWarp];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
    sum = block_sum(sum, shared);
    if (threadIdx.x == 0) *out = sum;
}

void sum_of_squares(float* out, const float* values, long long n) {
    float* partials = scratch_floats(kSquaresBlocks);
    sum_of_squares_kernel<<<kSquaresBlocks, kElementwiseBlock, 0, op_stream()>>>(partials, values,
                                                                                 n);
    CUDA_CHECK_LAUNCH();
    sum_partials_kernel<<<1, kSquaresBlocks, 0, op_stream()>>>(out, partials, kSquaresBlocks);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
__global__ void adamw_kernel(float* master, Act* working, const float* grads, float* m, float* v,
                             long long n, float lr, float beta1, float beta2,
                             float beta1_correction, float beta2_correction, float eps,
                             float weight_decay, float grad_scale) {
    for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<long long>(gridDim.x) * blockDim.x) {
        const float g = grads[i] * grad_scale;
        const float m_i = beta1 * m[i] + (1.0f - beta1) * g;
        const float v_i = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = m_i;
        v[i] = v_i;
        const float m_hat = m_i / beta1_correction, v_hat = v_i / beta2_correction;
        // Decoupled weight decay (AdamW): the parameter shrinks by lr * wd before the step.
        const float p = master[i] * (1.0f - lr * weight_decay) - lr * m_hat / (sqrtf(v_hat) + eps);
        master[i] = p;
        if (working) working[i] = from_float<Act>(p);
    }
}

template <typename Act>
void adamw(float* master, Act* working, const float* grads, float* m, float* v, long long n,
           float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
           float eps, float weight_decay, float grad_scale) {
    adamw_kernel<<<elementwise_blocks(n), kElementwiseBlock, 0, op_stream()>>>(
        master, working, grads, m, v, n, lr, beta1, beta2, beta1_correction, beta2_correction, eps,
        weight_decay, grad_scale);
    CUDA_CHECK_LAUNCH();
}

// A decoding step on the reference's ops is captured whole, but in fp32: its LayerNorm is module
// 06's, through a contract without a stream.
template <typename Act>
const char* reference_graph_refusal() {
    return std::is_same_v<Act, float> ? "in fp32 LayerNorm's forward is module 06's "
                                        "layernorm_fast, which launches on the default stream"
                                      : nullptr;
}

template <typename Act>
const Ops<Act> kReference = {
    "reference",
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
    sum_of_squares,
    adamw<Act>,
    decode_embedding_reference<Act>,
    kv_cache_write_reference<Act>,
    decode_attention_reference<Act>,
    sample_reference<Act>,
    reference_graph_refusal<Act>,
};

// ---- Any table's ops, each call timed alone with CUDA events (--kernels profile, --profile) ----
//
// Where a step's time goes, op by op: every call is followed by a synchronization, so the step is
// slower than without it, but each op's time is its own. The table is printed at exit, without
// the first step (forget_op_times). For each kernel's time, dev/kernel_times.py.

const char* const kOpNames[] = {
    "embedding_forward", "embedding_backward", "layernorm_forward", "layernorm_backward",
    "linear_forward",    "linear_backward",    "attention_forward", "attention_backward",
    "residual_forward",  "cross_entropy",      "sum_of_squares",    "adamw",
    "decode_embedding",  "kv_cache_write",     "decode_attention",  "sample"};
constexpr int kOps = sizeof kOpNames / sizeof kOpNames[0];

struct OpTimes {
    std::string table;  // the name of the table timed
    double ms[kOps] = {};
    long calls[kOps] = {};
    void clear() {
        std::fill(std::begin(ms), std::end(ms), 0.0);
        std::fill(std::begin(calls), std::end(calls), 0L);
    }
    ~OpTimes() {
        double total = 0.0;
        for (double t : ms) total += t;
        if (total == 0.0) return;
        std::printf("GPU time per op (%s, each op timed alone), %.1f ms in all:\n", table.c_str(),
                    total);
        for (int i = 0; i < kOps; ++i)
            if (calls[i])
                std::printf("  %-20s %9.1f ms %5.1f%% %7ld calls\n", kOpNames[i], ms[i],
                            100 * ms[i] / total, calls[i]);
    }
};
OpTimes op_times;

// The table whose ops the profile times: the reference's, unless profiled_table named another.
template <typename Act>
const Ops<Act>* timed_table = &kReference<Act>;

template <int Index, typename Act, auto Entry>
struct Timed;
template <int Index, typename Act, typename... Args, void (*Ops<Act>::*Entry)(Args...)>
struct Timed<Index, Act, Entry> {
    static void call(Args... args) {
        static cudaEvent_t start = nullptr, stop = nullptr;
        if (!start) {
            CUDA_CHECK(cudaEventCreate(&start));
            CUDA_CHECK(cudaEventCreate(&stop));
        }
        CUDA_CHECK(cudaEventRecord(start));
        (timed_table<Act>->*Entry)(args...);
        CUDA_CHECK(cudaEventRecord(stop));
        CUDA_CHECK(cudaEventSynchronize(stop));
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
        op_times.ms[Index] += ms;
        ++op_times.calls[Index];
    }
};

template <typename Act>
bool timed_keeps_scores(int head_size) {  // a question, not an op: not timed
    return timed_table<Act>->attention_keeps_scores(head_size);
}

const char* timed_graph_refusal() {
    return "the profile table synchronizes after every op to time it alone";
}

template <typename Act>
Ops<Act> kProfile = {
    "profile (reference, each op timed)",
    Timed<0, Act, &Ops<Act>::embedding_forward>::call,
    Timed<1, Act, &Ops<Act>::embedding_backward>::call,
    Timed<2, Act, &Ops<Act>::layernorm_forward>::call,
    Timed<3, Act, &Ops<Act>::layernorm_backward>::call,
    Timed<4, Act, &Ops<Act>::linear_forward>::call,
    Timed<5, Act, &Ops<Act>::linear_backward>::call,
    Timed<6, Act, &Ops<Act>::attention_forward>::call,
    Timed<7, Act, &Ops<Act>::attention_backward>::call,
    timed_keeps_scores<Act>,
    Timed<8, Act, &Ops<Act>::residual_forward>::call,
    Timed<9, Act, &Ops<Act>::cross_entropy>::call,
    Timed<10, Act, &Ops<Act>::sum_of_squares>::call,
    Timed<11, Act, &Ops<Act>::adamw>::call,
    Timed<12, Act, &Ops<Act>::decode_embedding>::call,
    Timed<13, Act, &Ops<Act>::kv_cache_write>::call,
    Timed<14, Act, &Ops<Act>::decode_attention>::call,
    Timed<15, Act, &Ops<Act>::sample>::call,
    timed_graph_refusal,
};

}  // namespace

template <typename Act>
const Ops<Act>* ops_table(const std::string& name) {
    if (name == "reference") return &kReference<Act>;
    if (name == "profile") return profiled_table(kReference<Act>);
    return exercise_table<Act>(name);  // module 08: "learner", "solutions", "fast" (ops_learner.cu)
}
template const Ops<float>* ops_table<float>(const std::string&);
template const Ops<bf16>* ops_table<bf16>(const std::string&);
template const Ops<fp16>* ops_table<fp16>(const std::string&);

const char* ops_table_names() { return "reference, profile, learner, solutions, fast"; }

template <typename Act>
const Ops<Act>* profiled_table(const Ops<Act>& table) {
    timed_table<Act> = &table;
    static std::string name;
    name = &table == &kReference<Act> ? "profile (reference, each op timed)"
                                      : std::string(table.name) + ", each op timed";
    op_times.table = &table == &kReference<Act> ? "--kernels profile" : table.name;
    kProfile<Act>.name = name.c_str();
    return &kProfile<Act>;
}
template const Ops<float>* profiled_table(const Ops<float>&);
template const Ops<bf16>* profiled_table(const Ops<bf16>&);
template const Ops<fp16>* profiled_table(const Ops<fp16>&);

// ---- The reference's pieces that the exercise tables reuse (ops_reference.h) ----

template <typename To, typename From>
void to_heads(To* heads, const From* packed, int count, int B, int T, int NH, int HS) {
    rearrange_heads<true>(heads, packed, count, B, T, NH, HS);
}
template <typename To, typename From>
void from_heads(To* packed, const From* heads, int count, int B, int T, int NH, int HS) {
    rearrange_heads<false>(packed, heads, count, B, T, NH, HS);
}
template <typename Act>
void gelu_forward_reference(Act* out, const Act* inp, long long n) {
    elementwise<Act, GeluForward>(out, inp, nullptr, n);
}
template <typename Act>
void gelu_backward_reference(Act* dinp, const Act* inp, const Act* dout, long long n) {
    elementwise<Act, GeluBackward>(dinp, inp, dout, n);
}
#define TRAINER_HEADS(To, From)                                                  \
    template void to_heads<To, From>(To*, const From*, int, int, int, int, int); \
    template void from_heads<To, From>(To*, const From*, int, int, int, int, int);
TRAINER_HEADS(float, float)
TRAINER_HEADS(float, bf16)
TRAINER_HEADS(bf16, float)
TRAINER_HEADS(bf16, bf16)
#undef TRAINER_HEADS
template void gelu_forward_reference<float>(float*, const float*, long long);
template void gelu_forward_reference<bf16>(bf16*, const bf16*, long long);
template void gelu_backward_reference<float>(float*, const float*, const float*, long long);
template void gelu_backward_reference<bf16>(bf16*, const bf16*, const bf16*, long long);

void allow_cudnn_attention(bool allowed) { cudnn_attention_allowed = allowed; }

void forget_op_times() { op_times.clear(); }

}  // namespace trainer
