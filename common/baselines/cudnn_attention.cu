// cuDNN's fused attention, the baseline of module 07's tensor-core exercises (flash_tc and
// flash_backward): the flash-attention kernels a framework calls (PyTorch's cuDNN backend of
// scaled_dot_product_attention), reached through cuDNN's backend graph API, since the pip wheel
// the course finds ships no frontend.
//
// cuDNN has no "attention" call: it is given a graph of operations and recognizes the pattern.
// The forward graph is S = Q K^T, scale * S, the causal mask, a softmax written as max, exp, sum
// (its "stats" output, max + log sum, is the contract's logsumexp L), and O = P V; the backward
// graph recomputes P from L and produces dV = P^T dO, dS = P (dO V^T - rowsum(dO * O)), dK, dQ.
// Each graph is described once per shape (its tensors and operations), cuDNN's heuristics pick an
// engine for it, and the finalized plan is kept; a call binds the pointers and runs the plan, so
// timed calls measure the kernels. The scratch memory (cuDNN's workspace and the backward's two
// float32 buffers) is one grow-only allocation. Without cuDNN, or where no engine takes a graph
// (a GPU before Ampere, a cuDNN older than 9.6), the calls throw with the reason: the checkers
// then time against cuBLAS's attention (cublas_attention.cu).
#include <array>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "library.h"

#if COURSE_HAVE_CUDNN
#include "cudnn_support.h"
#include "scratch.h"
#endif

namespace course::baseline::library {

#if COURSE_HAVE_CUDNN

namespace {

// A backend descriptor, destroyed with its owner.
class Descriptor {
  public:
    explicit Descriptor(cudnnBackendDescriptorType_t type) {
        cudnn_check(cudnnBackendCreateDescriptor(type, &handle_), "cudnnBackendCreateDescriptor");
    }
    Descriptor(Descriptor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
    Descriptor(const Descriptor&) = delete;
    Descriptor& operator=(const Descriptor&) = delete;
    Descriptor& operator=(Descriptor&&) = delete;
    ~Descriptor() {
        if (handle_) cudnnBackendDestroyDescriptor(handle_);
    }

    cudnnBackendDescriptor_t get() const { return handle_; }

    template <class T>
    Descriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                    const T* values, std::int64_t count = 1) {
        const cudnnStatus_t status = cudnnBackendSetAttribute(handle_, name, type, count, values);
        if (status != CUDNN_STATUS_SUCCESS)
            cudnn_check(status,
                        ("cudnnBackendSetAttribute of attribute " + std::to_string(name)).c_str());
        return *this;
    }
    Descriptor& finalize() {
        cudnn_check(cudnnBackendFinalize(handle_), "cudnnBackendFinalize");
        return *this;
    }

  private:
    cudnnBackendDescriptor_t handle_ = nullptr;
};

using Tensor = cudnnBackendDescriptor_t;

// A tensor of [batch][heads][rows][cols]: its dimensions and the stride of each.
struct Layout {
    std::array<std::int64_t, 4> dims, strides;
};

// Row-major: the last dimension contiguous (Q, K, V, O are [B][H][T][D], L is [B][H][T][1]).
Layout row_major(std::int64_t batch, std::int64_t heads, std::int64_t rows, std::int64_t cols) {
    return {{batch, heads, rows, cols}, {heads * rows * cols, rows * cols, cols, 1}};
}

// The same memory read as [batch][heads][cols][rows], each matrix transposed: K as K^T.
Layout transposed(Layout layout) {
    std::swap(layout.dims[2], layout.dims[3]);
    std::swap(layout.strides[2], layout.strides[3]);
    return layout;
}

// The tensors a call binds (its unique ids in the graph). The scalars are passed by value: the
// variant pack points at host memory holding them.
enum Uid : std::int64_t {
    kQ = 1,
    kK,
    kV,
    kO,
    kL,
    kdO,
    kdQ,
    kdK,
    kdV,
    kScale,     // the softmax scale
    kMaskFill,  // -inf, the score of a masked key
    kOne,       // 1.0f
    kDelta,     // the backward's rowsum(dO * O), float32 [B][H][T][1] in our scratch
    kdQSum,     // the backward's float32 dQ, summed over key tiles, in our scratch
};
constexpr std::int64_t kFirstVirtualUid = 100;

// A bound tensor's unique id and its memory.
using Binding = std::pair<Uid, const void*>;

// A graph's tensors and operations (their descriptors live as long as the graph), and the plan
// cuDNN made of it.
class Graph {
  public:
    // A tensor bound to memory at each call.
    Tensor tensor(Uid uid, cudnnDataType_t type, const Layout& layout) {
        return make_tensor(uid, type, layout, false, false);
    }
    // An intermediate that exists only inside the fused kernel.
    Tensor virtual_tensor(cudnnDataType_t type, const Layout& layout) {
        return make_tensor(next_virtual_uid_++, type, layout, true, false);
    }
    // A float passed by value at each call.
    Tensor scalar(Uid uid) {
        return make_tensor(uid, CUDNN_DATA_FLOAT, {{1, 1, 1, 1}, {1, 1, 1, 1}}, false, true);
    }

    // y = mode(x), mode(x, b), or for BINARY_SELECT with inputs {x, b, t}: y = t ? x : b.
    // GEN_INDEX writes each element's index along `axis`.
    void pointwise(cudnnPointwiseMode_t mode, std::initializer_list<Tensor> inputs, Tensor y,
                   cudnnDataType_t precision = CUDNN_DATA_FLOAT, std::int64_t axis = 0) {
        Descriptor& math = keep(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        math.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode)
            .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision);
        if (mode == CUDNN_POINTWISE_GEN_INDEX)
            math.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis);
        const cudnnBackendDescriptor_t math_descriptor = math.finalize().get();
        Descriptor& op = keep(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR,
               &math_descriptor);
        const cudnnBackendAttributeName_t slots[] = {CUDNN_ATTR_OPERATION_POINTWISE_XDESC,
                                                     CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
                                                     CUDNN_ATTR_OPERATION_POINTWISE_TDESC};
        int slot = 0;
        for (const Tensor& input : inputs)
            op.set(slots[slot++], CUDNN_TYPE_BACKEND_DESCRIPTOR, &input);
        add(op.set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y));
    }

    // c = a b for each [batch][head], accumulated in float32.
    void matmul(Tensor a, Tensor b, Tensor c) {
        const cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;
        const cudnnBackendDescriptor_t math =
            keep(CUDNN_BACKEND_MATMUL_DESCRIPTOR)
                .set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &accumulate)
                .finalize()
                .get();
        add(keep(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR)
                .set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &a)
                .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &b)
                .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &c)
                .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &math));
    }

    // y = the max or the sum of x over the dimensions where y has extent 1 (here: each row).
    void reduction(cudnnReduceTensorOp_t op, Tensor x, Tensor y) {
        const cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;
        const cudnnBackendDescriptor_t math =
            keep(CUDNN_BACKEND_REDUCTION_DESCRIPTOR)
                .set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &op)
                .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &accumulate)
                .finalize()
                .get();
        add(keep(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR)
                .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x)
                .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y)
                .set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &math));
    }

    // y = x seen through y's layout (a transposed view; no data moves).
    void reshape(Tensor x, Tensor y) {
        add(keep(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR)
                .set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x)
                .set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y));
    }

    // Finalizes the graph and keeps the plan of the first engine configuration, among those
    // cuDNN's heuristics rank (mode A, then its fallback list), that builds for it. Throws when
    // none does, with cuDNN's reason for the last refusal.
    void make_plan(const std::string& what) {
        cudnnHandle_t handle = cudnn_handle();
        Descriptor& graph = keep(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        graph
            .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, operations_.data(),
                 static_cast<std::int64_t>(operations_.size()))
            .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle)
            .finalize();
        const cudnnBackendDescriptor_t graph_descriptor = graph.get();
        std::string refusal = "the heuristics offered no engine";
        for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
            Descriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
            heuristics
                .set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                     &graph_descriptor)
                .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode)
                .finalize();
            std::int64_t count = 0;
            cudnn_check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
                        "cudnnBackendGetAttribute (how many engine configurations)");
            std::vector<Descriptor> configs;
            std::vector<cudnnBackendDescriptor_t> handles;
            for (std::int64_t i = 0; i < count; ++i) {
                configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
                handles.push_back(configs.back().get());
            }
            cudnn_check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                                 handles.data()),
                        "cudnnBackendGetAttribute (the engine configurations)");
            for (std::int64_t i = 0; i < count; ++i) {
                Descriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
                plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle)
                    .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                         &handles[i]);
                if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) {
                    char detail[1024] = "";
                    cudnnGetLastErrorString(detail, sizeof detail);
                    refusal = detail;
                    continue;
                }
                std::int64_t written = 0;
                cudnn_check(
                    cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                             CUDNN_TYPE_INT64, 1, &written, &workspace_bytes_),
                    "cudnnBackendGetAttribute (workspace size)");
                owned_.push_back(std::move(configs[i]));
                owned_.push_back(std::move(plan));
                plan_ = owned_.back().get();
                return;
            }
        }
        throw std::runtime_error("cuDNN has no engine for " + what + ": " + refusal);
    }

    // Runs the plan on the default stream: `bindings` gives each bound tensor's memory (device
    // pointers; host pointers for the scalars), `workspace` cuDNN's own.
    void run(const std::vector<Binding>& bindings, void* workspace) const {
        std::vector<std::int64_t> uids;
        std::vector<void*> pointers;
        for (const auto& [uid, pointer] : bindings) {
            uids.push_back(uid);
            pointers.push_back(const_cast<void*>(pointer));
        }
        Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(),
                 static_cast<std::int64_t>(uids.size()))
            .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(),
                 static_cast<std::int64_t>(pointers.size()))
            .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace)
            .finalize();
        cudnn_check(cudnnBackendExecute(cudnn_handle(), plan_, pack.get()), "cudnnBackendExecute");
    }

    std::size_t workspace_bytes() const { return static_cast<std::size_t>(workspace_bytes_); }

  private:
    Descriptor& keep(cudnnBackendDescriptorType_t type) { return owned_.emplace_back(type); }
    void add(Descriptor& operation) { operations_.push_back(operation.finalize().get()); }

    Tensor make_tensor(std::int64_t uid, cudnnDataType_t type, const Layout& layout,
                       bool is_virtual, bool by_value) {
        const std::int64_t alignment = 16;  // bytes; every buffer here starts at an allocation
        return keep(CUDNN_BACKEND_TENSOR_DESCRIPTOR)
            .set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
            .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, layout.dims.data(), 4)
            .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, layout.strides.data(), 4)
            .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
            .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment)
            .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &is_virtual)
            .set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &by_value)
            .finalize()
            .get();
    }

    std::deque<Descriptor> owned_;  // a deque: adding one never moves the others
    std::vector<cudnnBackendDescriptor_t> operations_;
    std::int64_t next_virtual_uid_ = kFirstVirtualUid;
    cudnnBackendDescriptor_t plan_ = nullptr;
    std::int64_t workspace_bytes_ = 0;
};

// [batch][heads][T][D] stored token-major, [batch][T][heads][D], each token's row `row_stride`
// elements long (row_major's layout where row_stride is 0).
Layout token_major(std::int64_t batch, std::int64_t heads, std::int64_t T, std::int64_t D,
                   std::int64_t row_stride) {
    if (row_stride == 0) return row_major(batch, heads, T, D);
    return {{batch, heads, T, D}, {T * row_stride, D, row_stride, 1}};
}

// The tensors of a graph over [batch][heads][T][D] inputs: Q, K, V (and their gradients) laid
// out as qkv, O (and dO) as o, intermediates of that shape as per_head.
struct Shapes {
    Layout qkv, o, per_head, scores, rows;  // [B][H][T][D] x 3, [B][H][T][T], [B][H][T][1]
    Shapes(int batch, int heads, int T, int D, int qkv_row_stride, int o_row_stride)
        : qkv(token_major(batch, heads, T, D, qkv_row_stride)),
          o(token_major(batch, heads, T, D, o_row_stride)),
          per_head(row_major(batch, heads, T, D)),
          scores(row_major(batch, heads, T, T)),
          rows(row_major(batch, heads, T, 1)) {}
};

// x where the key is visible to the query (key index <= query index), -inf elsewhere: two index
// tensors, a comparison and a select, the form cuDNN's attention engines recognize as the causal
// mask (they then skip the masked tiles).
Tensor causal_mask(Graph& graph, Tensor x, const Shapes& shapes) {
    const Tensor query = graph.virtual_tensor(CUDNN_DATA_INT32, shapes.scores),
                 key = graph.virtual_tensor(CUDNN_DATA_INT32, shapes.scores),
                 visible = graph.virtual_tensor(CUDNN_DATA_BOOLEAN, shapes.scores),
                 masked = graph.virtual_tensor(CUDNN_DATA_FLOAT, shapes.scores);
    graph.pointwise(CUDNN_POINTWISE_GEN_INDEX, {x}, query, CUDNN_DATA_FLOAT, /*axis=*/2);
    graph.pointwise(CUDNN_POINTWISE_GEN_INDEX, {x}, key, CUDNN_DATA_FLOAT, /*axis=*/3);
    graph.pointwise(CUDNN_POINTWISE_CMP_GE, {query, key}, visible, CUDNN_DATA_BOOLEAN);
    graph.pointwise(CUDNN_POINTWISE_BINARY_SELECT, {x, graph.scalar(kMaskFill), visible}, masked);
    return masked;
}

// O and L: S = Q K^T, scaled, masked; the softmax's max m, e = exp(s - m), l = sum e, and
// L = m + log l; O = (e / l) V with the probabilities in the inputs' 16-bit `type` (bf16, fp16).
void build_forward(Graph& graph, const Shapes& shapes, bool causal, cudnnDataType_t type) {
    const Tensor Q = graph.tensor(kQ, type, shapes.qkv),
                 K_t = graph.tensor(kK, type, transposed(shapes.qkv)),
                 V = graph.tensor(kV, type, shapes.qkv), O = graph.tensor(kO, type, shapes.o),
                 L = graph.tensor(kL, CUDNN_DATA_FLOAT, shapes.rows);
    const auto scores = [&] { return graph.virtual_tensor(CUDNN_DATA_FLOAT, shapes.scores); };
    const auto per_row = [&] { return graph.virtual_tensor(CUDNN_DATA_FLOAT, shapes.rows); };

    const Tensor S = scores(), scaled = scores();
    graph.matmul(Q, K_t, S);
    graph.pointwise(CUDNN_POINTWISE_MUL, {S, graph.scalar(kScale)}, scaled);
    const Tensor logits = causal ? causal_mask(graph, scaled, shapes) : scaled;

    const Tensor max = per_row(), shifted = scores(), e = scores(), sum = per_row(),
                 log_sum = per_row();
    graph.reduction(CUDNN_REDUCE_TENSOR_MAX, logits, max);
    graph.pointwise(CUDNN_POINTWISE_SUB, {logits, max}, shifted);
    graph.pointwise(CUDNN_POINTWISE_EXP, {shifted}, e);
    graph.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
    graph.pointwise(CUDNN_POINTWISE_LOG, {sum}, log_sum);
    graph.pointwise(CUDNN_POINTWISE_ADD, {max, log_sum}, L);

    const Tensor P = graph.virtual_tensor(type, shapes.scores);
    graph.pointwise(CUDNN_POINTWISE_DIV, {e, sum}, P);
    graph.matmul(P, V, O);
}

// dQ, dK, dV: delta = rowsum(dO * O) (into our float32 buffer), P = exp(scale Q K^T - L)
// masked, dV = P^T dO, dS = scale * P * (dO V^T - delta), dK = dS^T Q, and dQ = dS K summed in
// float32 (our second buffer) before it is rounded to the inputs' `type` (bf16, fp16).
void build_backward(Graph& graph, const Shapes& shapes, bool causal, cudnnDataType_t type) {
    const Layout qkv_t = transposed(shapes.qkv), scores_t = transposed(shapes.scores);
    const Tensor Q = graph.tensor(kQ, type, shapes.qkv), K_t = graph.tensor(kK, type, qkv_t),
                 V_t = graph.tensor(kV, type, qkv_t), O = graph.tensor(kO, type, shapes.o),
                 dO = graph.tensor(kdO, type, shapes.o),
                 L = graph.tensor(kL, CUDNN_DATA_FLOAT, shapes.rows),
                 dQ = graph.tensor(kdQ, type, shapes.qkv), dK = graph.tensor(kdK, type, shapes.qkv),
                 dV = graph.tensor(kdV, type, shapes.qkv),
                 delta = graph.tensor(kDelta, CUDNN_DATA_FLOAT, shapes.rows),
                 dQ_sum = graph.tensor(kdQSum, CUDNN_DATA_FLOAT, shapes.per_head),
                 scale = graph.scalar(kScale);
    const auto scores = [&] { return graph.virtual_tensor(CUDNN_DATA_FLOAT, shapes.scores); };

    // delta; the product by 1 is where a dropout graph scales it, and the engines expect it
    const Tensor dO_times_O = graph.virtual_tensor(CUDNN_DATA_FLOAT, shapes.per_head),
                 row_sums = graph.virtual_tensor(CUDNN_DATA_FLOAT, shapes.rows);
    graph.pointwise(CUDNN_POINTWISE_MUL, {dO, O}, dO_times_O);
    graph.reduction(CUDNN_REDUCE_TENSOR_ADD, dO_times_O, row_sums);
    graph.pointwise(CUDNN_POINTWISE_MUL, {row_sums, graph.scalar(kOne)}, delta);

    // P, recomputed from L
    const Tensor S = scores(), scaled = scores(), shifted = scores(), P = scores();
    graph.matmul(Q, K_t, S);
    graph.pointwise(CUDNN_POINTWISE_MUL, {S, scale}, scaled);
    graph.pointwise(CUDNN_POINTWISE_SUB, {scaled, L}, shifted);
    graph.pointwise(CUDNN_POINTWISE_EXP, {causal ? causal_mask(graph, shifted, shapes) : shifted},
                    P);

    // dV = P^T dO
    const Tensor P_t = graph.virtual_tensor(type, scores_t);
    graph.reshape(P, P_t);
    graph.matmul(P_t, dO, dV);

    // dS = scale * P * (dP - delta) with dP = dO V^T
    const Tensor dP = scores(), dP_minus_delta = scores(), dS_unscaled = scores(), dS = scores();
    graph.matmul(dO, V_t, dP);
    graph.pointwise(CUDNN_POINTWISE_SUB, {dP, delta}, dP_minus_delta);
    graph.pointwise(CUDNN_POINTWISE_MUL, {dP_minus_delta, P}, dS_unscaled);
    graph.pointwise(CUDNN_POINTWISE_MUL, {dS_unscaled, scale}, dS);

    // dK = dS^T Q
    const Tensor dS_t = graph.virtual_tensor(type, scores_t);
    graph.reshape(dS, dS_t);
    graph.matmul(dS_t, Q, dK);

    // dQ = dS K, in float32, then the inputs' type
    const Tensor K = graph.virtual_tensor(type, shapes.qkv);
    graph.reshape(K_t, K);
    graph.matmul(dS, K, dQ_sum);
    graph.pointwise(CUDNN_POINTWISE_IDENTITY, {dQ_sum}, dQ);
}

// batch, heads, T, D, causal, qkv_row_stride, o_row_stride, the 16-bit type
using Key = std::tuple<int, int, int, int, bool, int, int, cudnnDataType_t>;

// The plan of a graph for this shape and type, built on its first call and kept.
const Graph& plan_for(std::map<Key, Graph>& plans, bool backward, int batch, int heads, int T,
                      int D, bool causal, int qkv_row_stride, int o_row_stride,
                      cudnnDataType_t type) {
    const Key key{batch, heads, T, D, causal, qkv_row_stride, o_row_stride, type};
    if (auto found = plans.find(key); found != plans.end()) return found->second;
    if (!cudnn_handle())
        throw std::runtime_error(
            "no cuDNN handle on this machine (no GPU, or a cuDNN that does "
            "not match the driver)");
    // From 9.6 on, the backward engines zero dQ's float32 buffer themselves.
    if (cudnnGetVersion() < 90600)
        throw std::runtime_error("the cuDNN attention baselines need cuDNN 9.6 or newer; this is " +
                                 std::to_string(cudnnGetVersion()));
    Graph graph;
    const Shapes shapes(batch, heads, T, D, qkv_row_stride, o_row_stride);
    if (backward)
        build_backward(graph, shapes, causal, type);
    else
        build_forward(graph, shapes, causal, type);
    graph.make_plan(std::string(backward ? "the backward" : "the forward") + " of attention at B " +
                    std::to_string(batch) + ", H " + std::to_string(heads) + ", T " +
                    std::to_string(T) + ", D " + std::to_string(D) +
                    (causal ? ", causal" : ", not causal") +
                    (qkv_row_stride != 0 ? ", token-major" : "") +
                    (type == CUDNN_DATA_HALF ? ", fp16" : ", bf16"));
    return plans.emplace(key, std::move(graph)).first->second;
}

std::map<Key, Graph> forward_plans, backward_plans;
Scratch workspace;  // cuDNN's workspace, then (backward) delta and dQ's float32 sums

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
constexpr float kOneValue = 1.0f;

// Bytes rounded up to a multiple of 256, so that the pieces carved from the workspace stay
// aligned.
std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

namespace {

void attention_forward(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                       std::uint16_t* O, float* L, int batch, int heads, int T, int D, float scale,
                       bool causal, int qkv_row_stride, int o_row_stride, cudnnDataType_t type) {
    const Graph& plan = plan_for(forward_plans, false, batch, heads, T, D, causal, qkv_row_stride,
                                 o_row_stride, type);
    std::vector<Binding> bindings{{kQ, Q}, {kK, K}, {kV, V}, {kO, O}, {kL, L}, {kScale, &scale}};
    if (causal) bindings.push_back({kMaskFill, &kNegativeInfinity});
    plan.run(bindings, workspace.get(plan.workspace_bytes()));
}

void attention_backward(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                        const std::uint16_t* O, const std::uint16_t* dO, const float* L,
                        std::uint16_t* dQ, std::uint16_t* dK, std::uint16_t* dV, int batch,
                        int heads, int T, int D, float scale, bool causal, int qkv_row_stride,
                        int o_row_stride, cudnnDataType_t type) {
    const Graph& plan = plan_for(backward_plans, true, batch, heads, T, D, causal, qkv_row_stride,
                                 o_row_stride, type);
    const std::size_t rows = static_cast<std::size_t>(batch) * heads * T;
    const std::size_t cudnn_bytes = aligned(plan.workspace_bytes()),
                      delta_bytes = aligned(rows * sizeof(float));
    char* scratch = static_cast<char*>(
        workspace.get(cudnn_bytes + delta_bytes + rows * static_cast<std::size_t>(D) * 4));
    void *delta = scratch + cudnn_bytes, *dQ_sum = scratch + cudnn_bytes + delta_bytes;
    std::vector<Binding> bindings{{kQ, Q},
                                  {kK, K},
                                  {kV, V},
                                  {kO, O},
                                  {kdO, dO},
                                  {kL, L},
                                  {kdQ, dQ},
                                  {kdK, dK},
                                  {kdV, dV},
                                  {kScale, &scale},
                                  {kOne, &kOneValue},
                                  {kDelta, delta},
                                  {kdQSum, dQ_sum}};
    if (causal) bindings.push_back({kMaskFill, &kNegativeInfinity});
    plan.run(bindings, scratch);
}

}  // namespace

void cudnn_attention_bf16(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                          std::uint16_t* O, float* L, int batch, int heads, int T, int D,
                          float scale, bool causal, int qkv_row_stride, int o_row_stride) {
    attention_forward(Q, K, V, O, L, batch, heads, T, D, scale, causal, qkv_row_stride,
                      o_row_stride, CUDNN_DATA_BFLOAT16);
}

void cudnn_attention_fp16(const std::uint16_t* Q, const std::uint16_t* K, const std::uint16_t* V,
                          std::uint16_t* O, float* L, int batch, int heads, int T, int D,
                          float scale, bool causal, int qkv_row_stride, int o_row_stride) {
    attention_forward(Q, K, V, O, L, batch, heads, T, D, scale, causal, qkv_row_stride,
                      o_row_stride, CUDNN_DATA_HALF);
}

void cudnn_attention_backward_bf16(const std::uint16_t* Q, const std::uint16_t* K,
                                   const std::uint16_t* V, const std::uint16_t* O,
                                   const std::uint16_t* dO, const float* L, std::uint16_t* dQ,
                                   std::uint16_t* dK, std::uint16_t* dV, int batch, int heads,
                                   int T, int D, float scale, bool causal, int qkv_row_stride,
                                   int o_row_stride) {
    attention_backward(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale, causal,
                       qkv_row_stride, o_row_stride, CUDNN_DATA_BFLOAT16);
}

void cudnn_attention_backward_fp16(const std::uint16_t* Q, const std::uint16_t* K,
                                   const std::uint16_t* V, const std::uint16_t* O,
                                   const std::uint16_t* dO, const float* L, std::uint16_t* dQ,
                                   std::uint16_t* dK, std::uint16_t* dV, int batch, int heads,
                                   int T, int D, float scale, bool causal, int qkv_row_stride,
                                   int o_row_stride) {
    attention_backward(Q, K, V, O, dO, L, dQ, dK, dV, batch, heads, T, D, scale, causal,
                       qkv_row_stride, o_row_stride, CUDNN_DATA_HALF);
}

#else

void cudnn_attention_bf16(const std::uint16_t*, const std::uint16_t*, const std::uint16_t*,
                          std::uint16_t*, float*, int, int, int, int, float, bool, int, int) {
    throw std::runtime_error(
        "cudnn_attention_bf16: the course was built without cuDNN (set COURSE_CUDNN_ROOT)");
}

void cudnn_attention_backward_bf16(const std::uint16_t*, const std::uint16_t*, const std::uint16_t*,
                                   const std::uint16_t*, const std::uint16_t*, const float*,
                                   std::uint16_t*, std::uint16_t*, std::uint16_t*, int, int, int,
                                   int, float, bool, int, int) {
    throw std::runtime_error(
        "cudnn_attention_backward_bf16: the course was built without cuDNN (set "
        "COURSE_CUDNN_ROOT)");
}

void cudnn_attention_fp16(const std::uint16_t*, const std::uint16_t*, const std::uint16_t*,
                          std::uint16_t*, float*, int, int, int, int, float, bool, int, int) {
    throw std::runtime_error(
        "cudnn_attention_fp16: the course was built without cuDNN (set COURSE_CUDNN_ROOT)");
}

void cudnn_attention_backward_fp16(const std::uint16_t*, const std::uint16_t*, const std::uint16_t*,
                                   const std::uint16_t*, const std::uint16_t*, const float*,
                                   std::uint16_t*, std::uint16_t*, std::uint16_t*, int, int, int,
                                   int, float, bool, int, int) {
    throw std::runtime_error(
        "cudnn_attention_backward_fp16: the course was built without cuDNN (set "
        "COURSE_CUDNN_ROOT)");
}

#endif

}  // namespace course::baseline::library
