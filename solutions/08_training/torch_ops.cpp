// 08_training/torch_ops: your kernels as PyTorch operators, the C++ half: each op of torch_ops.h
// checks its tensors, brings them to the layout and dtype its kernel's contract reads, allocates
// the outputs and calls the kernel. Reference solution (its Python half: torch_ops.py).
//
// Teaches: what stands between a kernel's contract (raw pointers, sizes, a layout, a dtype, the
// default stream) and a PyTorch tensor (a device, a dtype, strides, a storage offset, a current
// stream): TORCH_LIBRARY gives the op a schema, TORCH_LIBRARY_IMPL(course, CUDA, ...) its CUDA
// implementation, and the implementation turns whatever a caller passes into what the contract
// promises its kernel, or refuses it with one line.
//
// Run:  grader run 08/torch_ops --solutions
// Contract: torch_ops.h                Notes:  notes/08_training.md
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <torch/library.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

#include "cross_entropy.h"
#include "flash_backward.h"
#include "flash_causal.h"
#include "flash_tc.h"
#include "gelu.h"
#include "gemm_bf16.h"
#include "gemm_bf16_epilogue.h"
#include "layernorm.h"
#include "layernorm_backward.h"
#include "sgemm.h"
#include "softmax_online.h"
#include "torch_ops.h"

// The optional entry point beside gemm_bf16 (gemm_bf16_epilogue.h): wgmma_gemm's fast reference
// defines it, the readable solutions and mma_pipeline do not. Declared weak, it is null where
// the build compiled no definition, and course::mm converts around gemm_bf16 there.
__attribute__((weak)) decltype(gemm_bf16_epilogue) gemm_bf16_epilogue;

namespace {

using at::Tensor;

// What every op asks of every tensor argument first: on a GPU, and the same one as the first.
void check_cuda(const char* op, const char* name, const Tensor& t, const Tensor& first) {
    TORCH_CHECK(t.is_cuda(), op, ": ", name, " is on ", t.device(),
                "; the op runs on CUDA tensors");
    TORCH_CHECK(t.device() == first.device(), op, ": ", name, " is on ", t.device(),
                " and the first argument on ", first.device());
}

void check_dtype(const char* op, const char* name, const Tensor& t, at::ScalarType dtype) {
    TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, " is ", t.scalar_type(),
                "; its kernel's contract takes ", dtype);
}

// The contracts enqueue their kernels on the default stream: a caller inside a
// torch.cuda.stream(...) block (or a CUDA graph's capture) would see them run outside its order.
void check_stream(const char* op) {
    TORCH_CHECK(at::cuda::getCurrentCUDAStream() == at::cuda::getDefaultCUDAStream(), op,
                ": the course's kernels run on the default stream, and PyTorch's current stream "
                "is another (a torch.cuda.stream block, a CUDA graph capture): call it outside");
}

// bf16 tensor cores (flash_tc, flash_backward, gemm_bf16) need compute capability 8.0.
void check_bf16_gpu(const char* op) {
    const cudaDeviceProp* gpu = at::cuda::getCurrentDeviceProperties();
    TORCH_CHECK(gpu->major >= 8, op, ": its bfloat16 kernel needs compute capability 8.0 or ",
                "newer (bf16 tensor cores); this GPU is ", gpu->major, ".", gpu->minor);
}

void check_int(const char* op, const char* what, std::int64_t value) {
    TORCH_CHECK(value <= INT_MAX, op, ": ", what, " = ", value, " does not fit the contract's int");
}

// The contracts read dense row-major arrays through a bare pointer. A view with other strides
// (a transpose, a slice of columns, an expanded gradient) would be read as if it were row-major:
// copy it into that layout first. Free when it already is.
Tensor row_major(const Tensor& t) { return t.contiguous(); }

// The same for the contracts whose pointers must start on a 16-byte boundary (vector loads,
// cp.async): a dense view that starts inside an allocation is copied into a fresh one, which
// PyTorch's allocator aligns.
Tensor row_major_aligned(const Tensor& t) {
    Tensor dense = t.contiguous();
    return reinterpret_cast<std::uintptr_t>(dense.data_ptr()) % 16 == 0 ? dense : dense.clone();
}

// An operand of gemm_bf16_epilogue, t [rows, K] (A, or B as b^T): read where it lies if it is
// row-major (GemmMajor::kK) or the transpose of a row-major matrix (kMN), on a 16-byte boundary;
// copied row-major otherwise.
std::pair<Tensor, GemmMajor> epilogue_operand(const Tensor& t) {
    if (reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0) {
        if (t.is_contiguous()) return {t, GemmMajor::kK};
        if (t.t().is_contiguous()) return {t, GemmMajor::kMN};
    }
    return {row_major_aligned(t), GemmMajor::kK};
}

const float* f32(const Tensor& t) { return t.data_ptr<float>(); }
float* f32_out(Tensor& t) { return t.data_ptr<float>(); }
const __nv_bfloat16* bf16(const Tensor& t) {
    return reinterpret_cast<const __nv_bfloat16*>(t.data_ptr<at::BFloat16>());
}
__nv_bfloat16* bf16_out(Tensor& t) {
    return reinterpret_cast<__nv_bfloat16*>(t.data_ptr<at::BFloat16>());
}

// ---- module 06 ----

Tensor softmax(const Tensor& x_in) {
    constexpr const char* op = "course::softmax";
    check_cuda(op, "x", x_in, x_in);
    check_dtype(op, "x", x_in, at::kFloat);
    TORCH_CHECK(x_in.dim() >= 1, op, ": x needs at least one dimension");
    check_stream(op);
    const c10::cuda::CUDAGuard guard(x_in.device());
    const Tensor x = row_major(x_in);
    Tensor y = at::empty_like(x);
    if (x.numel() == 0) return y;
    const std::int64_t cols = x.size(-1);
    TORCH_CHECK(x.numel() < (std::int64_t{1} << 31), op, ": ", x.numel(),
                " elements; softmax_online's contract takes fewer than 2^31");
    softmax_online(f32(x), f32_out(y), static_cast<int>(x.numel() / cols), static_cast<int>(cols));
    return y;
}

std::tuple<Tensor, Tensor, Tensor> layernorm_op(const Tensor& x_in, const Tensor& weight_in,
                                                const Tensor& bias_in) {
    constexpr const char* op = "course::layernorm";
    for (const auto& [name, t] :
         {std::pair{"x", &x_in}, {"weight", &weight_in}, {"bias", &bias_in}}) {
        check_cuda(op, name, *t, x_in);
        check_dtype(op, name, *t, at::kFloat);
    }
    TORCH_CHECK(x_in.dim() >= 1, op, ": x needs at least one dimension");
    const std::int64_t cols = x_in.size(-1);
    TORCH_CHECK(weight_in.dim() == 1 && weight_in.size(0) == cols && bias_in.dim() == 1 &&
                    bias_in.size(0) == cols,
                op, ": weight and bias must be [", cols, "] (x's last dimension); got ",
                weight_in.sizes(), " and ", bias_in.sizes());
    check_stream(op);
    const c10::cuda::CUDAGuard guard(x_in.device());
    const Tensor x = row_major(x_in), weight = row_major(weight_in), bias = row_major(bias_in);
    Tensor y = at::empty_like(x);
    Tensor mean = at::empty(x.sizes().slice(0, x.dim() - 1), x.options());
    Tensor rstd = at::empty_like(mean);
    if (x.numel() == 0) return {y, mean, rstd};
    const std::int64_t rows = x.numel() / cols;
    check_int(op, "rows", rows);
    check_int(op, "C", cols);
    layernorm(f32(x), f32(weight), f32(bias), f32_out(y), f32_out(mean), f32_out(rstd),
              static_cast<int>(rows), static_cast<int>(cols));
    return {y, mean, rstd};
}

std::tuple<Tensor, Tensor, Tensor> layernorm_backward_op(const Tensor& dy_in, const Tensor& x_in,
                                                         const Tensor& weight_in,
                                                         const Tensor& mean_in,
                                                         const Tensor& rstd_in) {
    constexpr const char* op = "course::layernorm_backward";
    for (const auto& [name, t] : {std::pair{"dy", &dy_in},
                                  {"x", &x_in},
                                  {"weight", &weight_in},
                                  {"mean", &mean_in},
                                  {"rstd", &rstd_in}}) {
        check_cuda(op, name, *t, dy_in);
        check_dtype(op, name, *t, at::kFloat);
    }
    TORCH_CHECK(x_in.dim() >= 1 && dy_in.sizes() == x_in.sizes(), op,
                ": dy must have x's shape; got ", dy_in.sizes(), " and ", x_in.sizes());
    const std::int64_t cols = x_in.size(-1);
    const std::int64_t rows = cols == 0 ? 0 : x_in.numel() / cols;
    TORCH_CHECK(weight_in.numel() == cols && mean_in.numel() == rows && rstd_in.numel() == rows, op,
                ": weight must hold ", cols, " values, mean and rstd ", rows, " (x's rows)");
    check_stream(op);
    const c10::cuda::CUDAGuard guard(x_in.device());
    const Tensor dy = row_major(dy_in), x = row_major(x_in), weight = row_major(weight_in);
    const Tensor mean = row_major(mean_in), rstd = row_major(rstd_in);
    Tensor dx = at::empty_like(x);
    Tensor dweight = at::empty({cols}, x.options());
    Tensor dbias = at::empty({cols}, x.options());
    if (x.numel() == 0) return {dx, dweight.zero_(), dbias.zero_()};
    check_int(op, "rows", rows);
    check_int(op, "C", cols);
    layernorm_backward(f32(x), f32(dy), f32(weight), f32(mean), f32(rstd), f32_out(dx),
                       f32_out(dweight), f32_out(dbias), static_cast<int>(rows),
                       static_cast<int>(cols));
    return {dx, dweight, dbias};
}

std::tuple<Tensor, Tensor> cross_entropy_op(const Tensor& logits_in, const Tensor& targets_in) {
    constexpr const char* op = "course::cross_entropy";
    check_cuda(op, "logits", logits_in, logits_in);
    check_cuda(op, "targets", targets_in, logits_in);
    check_dtype(op, "logits", logits_in, at::kFloat);
    TORCH_CHECK(
        !at::isFloatingType(targets_in.scalar_type()) && targets_in.scalar_type() != at::kBool, op,
        ": targets are class indices (int64); got ", targets_in.scalar_type());
    TORCH_CHECK(logits_in.dim() == 2 && targets_in.dim() == 1 &&
                    targets_in.size(0) == logits_in.size(0) && logits_in.size(0) >= 1 &&
                    logits_in.size(1) >= 1,
                op, ": logits must be [N, V] and targets [N], N and V >= 1; got ",
                logits_in.sizes(), " and ", targets_in.sizes());
    check_stream(op);
    const c10::cuda::CUDAGuard guard(logits_in.device());
    const Tensor logits = row_major(logits_in);
    const std::int64_t rows = logits.size(0), vocab = logits.size(1);
    check_int(op, "N", rows);
    check_int(op, "V", vocab);
    // The kernel reads targets[r] as an index into its row: one outside [0, V) would read past
    // it. One synchronization per call, the price of a clear line instead of a wrong loss.
    const auto [low_tensor, high_tensor] = at::aminmax(targets_in);
    const std::int64_t low = low_tensor.item<std::int64_t>(),
                       high = high_tensor.item<std::int64_t>();
    TORCH_CHECK(low >= 0 && high < vocab, op, ": targets must lie in [0, ", vocab, "); they span [",
                low, ", ", high, "]");
    const Tensor targets = targets_in.to(at::kInt).contiguous();  // the contract's int
    Tensor losses = at::empty({rows}, logits.options());
    Tensor dlogits = at::empty_like(logits);
    cross_entropy(f32(logits), targets.data_ptr<int>(), f32_out(losses), f32_out(dlogits),
                  static_cast<int>(rows), static_cast<int>(vocab));
    // dlogits is already the gradient of the mean (the contract divides by the rows).
    return {losses.mean(), dlogits};
}

// ---- module 08 ----

Tensor gelu_op(const Tensor& x_in) {
    constexpr const char* op = "course::gelu";
    check_cuda(op, "x", x_in, x_in);
    TORCH_CHECK(x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16, op,
                ": x is ", x_in.scalar_type(), "; gelu's contract takes float32 or bfloat16");
    check_stream(op);
    const c10::cuda::CUDAGuard guard(x_in.device());
    const Tensor x = row_major(x_in);
    Tensor y = at::empty_like(x);
    if (x.numel() == 0) return y;
    if (x.scalar_type() == at::kFloat)
        gelu_forward(f32_out(y), f32(x), x.numel());
    else
        gelu_forward(bf16_out(y), bf16(x), x.numel());
    return y;
}

Tensor gelu_backward_op(const Tensor& dy_in, const Tensor& x_in) {
    constexpr const char* op = "course::gelu_backward";
    check_cuda(op, "dy", dy_in, x_in);
    check_cuda(op, "x", x_in, x_in);
    TORCH_CHECK(x_in.scalar_type() == at::kFloat || x_in.scalar_type() == at::kBFloat16, op,
                ": x is ", x_in.scalar_type(), "; gelu's contract takes float32 or bfloat16");
    check_dtype(op, "dy", dy_in, x_in.scalar_type());
    TORCH_CHECK(dy_in.sizes() == x_in.sizes(), op, ": dy must have x's shape; got ", dy_in.sizes(),
                " and ", x_in.sizes());
    check_stream(op);
    const c10::cuda::CUDAGuard guard(x_in.device());
    const Tensor dy = row_major(dy_in), x = row_major(x_in);
    Tensor dx = at::empty_like(x);
    if (x.numel() == 0) return dx;
    if (x.scalar_type() == at::kFloat)
        gelu_backward(f32_out(dx), f32(x), f32(dy), x.numel());
    else
        gelu_backward(bf16_out(dx), bf16(x), bf16(dy), x.numel());
    return dx;
}

// ---- module 07 ----

struct Heads {
    int batch, heads, T, D;
};

// q, k and v of one shape [B, H, T, D], D 64 or 128, all of one dtype.
Heads check_heads(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
    for (const auto& [name, t] : {std::pair{"q", &q}, {"k", &k}, {"v", &v}}) {
        check_cuda(op, name, *t, q);
        TORCH_CHECK(t->scalar_type() == q.scalar_type(), op, ": ", name, " is ", t->scalar_type(),
                    " and q ", q.scalar_type());
    }
    TORCH_CHECK(q.scalar_type() == at::kFloat || q.scalar_type() == at::kBFloat16, op, ": q is ",
                q.scalar_type(),
                "; the attention kernels take float32 (flash_causal) or bfloat16 "
                "(flash_tc)");
    TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(), op,
                ": q, k and v must be [B, H, T, D] of one shape; got ", q.sizes(), ", ", k.sizes(),
                ", ", v.sizes());
    const std::int64_t D = q.size(3);
    TORCH_CHECK(D == 64 || D == 128, op, ": head size D = ", D, "; the kernels take 64 or 128");
    TORCH_CHECK(q.size(2) >= 1, op, ": T must be at least 1");
    TORCH_CHECK(q.numel() < (std::int64_t{1} << 31), op, ": ", q.numel(),
                " elements per tensor; the contracts take fewer than 2^31");
    return {static_cast<int>(q.size(0)), static_cast<int>(q.size(1)), static_cast<int>(q.size(2)),
            static_cast<int>(D)};
}

std::tuple<Tensor, Tensor> attention_op(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                        bool causal) {
    constexpr const char* op = "course::attention";
    const Heads h = check_heads(op, q_in, k_in, v_in);
    if (q_in.scalar_type() == at::kBFloat16) check_bf16_gpu(op);
    check_stream(op);
    const c10::cuda::CUDAGuard guard(q_in.device());
    const Tensor q = row_major_aligned(q_in), k = row_major_aligned(k_in),
                 v = row_major_aligned(v_in);
    Tensor out = at::empty_like(q);
    Tensor lse = at::empty({h.batch, h.heads, h.T}, q.options().dtype(at::kFloat));
    const float scale = 1.0f / std::sqrt(static_cast<float>(h.D));
    if (h.batch == 0 || h.heads == 0) return {out, lse};
    if (q.scalar_type() == at::kFloat)
        flash_causal(f32(q), f32(k), f32(v), f32_out(out), f32_out(lse), h.batch, h.heads, h.T, h.D,
                     scale, causal);
    else
        flash_tc(bf16(q), bf16(k), bf16(v), bf16_out(out), f32_out(lse), h.batch, h.heads, h.T, h.D,
                 scale, causal);
    return {out, lse};
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_op(const Tensor& dout_in, const Tensor& q_in,
                                                         const Tensor& k_in, const Tensor& v_in,
                                                         const Tensor& out_in, const Tensor& lse_in,
                                                         bool causal) {
    constexpr const char* op = "course::attention_backward";
    const Heads h = check_heads(op, q_in, k_in, v_in);
    check_cuda(op, "dout", dout_in, q_in);
    check_cuda(op, "out", out_in, q_in);
    check_cuda(op, "lse", lse_in, q_in);
    TORCH_CHECK(dout_in.sizes() == q_in.sizes() && out_in.sizes() == q_in.sizes(), op,
                ": dout and out must have q's shape ", q_in.sizes());
    check_dtype(op, "lse", lse_in, at::kFloat);
    TORCH_CHECK(lse_in.sizes() == at::IntArrayRef({h.batch, h.heads, h.T}), op, ": lse must be [",
                h.batch, ", ", h.heads, ", ", h.T, "]; got ", lse_in.sizes());
    check_bf16_gpu(op);  // flash_backward is bf16 whatever the inputs' dtype
    check_stream(op);
    const c10::cuda::CUDAGuard guard(q_in.device());
    // flash_backward reads bf16: a float32 attention's tensors are rounded for it (module 07 has
    // no float32 backward), which costs bf16's precision in the gradients.
    const auto as_bf16 = [](const Tensor& t) { return row_major_aligned(t.to(at::kBFloat16)); };
    const Tensor q = as_bf16(q_in), k = as_bf16(k_in), v = as_bf16(v_in), out = as_bf16(out_in),
                 dout = as_bf16(dout_in), lse = row_major_aligned(lse_in);
    const auto gradient = [&] { return at::empty(q.sizes(), q.options().dtype(at::kFloat)); };
    Tensor dq = gradient(), dk = gradient(), dv = gradient();
    if (h.batch > 0 && h.heads > 0)
        flash_backward(bf16(q), bf16(k), bf16(v), bf16(out), bf16(dout), f32(lse), f32_out(dq),
                       f32_out(dk), f32_out(dv), h.batch, h.heads, h.T, h.D,
                       1.0f / std::sqrt(static_cast<float>(h.D)), causal);
    const at::ScalarType dtype = q_in.scalar_type();
    return {dq.to(dtype), dk.to(dtype), dv.to(dtype)};
}

// ---- modules 04 and 05 ----

Tensor mm_op(const Tensor& a_in, const Tensor& b_in) {
    constexpr const char* op = "course::mm";
    check_cuda(op, "a", a_in, a_in);
    check_cuda(op, "b", b_in, a_in);
    TORCH_CHECK(a_in.scalar_type() == b_in.scalar_type(), op, ": a is ", a_in.scalar_type(),
                " and b ", b_in.scalar_type());
    TORCH_CHECK(a_in.dim() == 2 && b_in.dim() == 2 && a_in.size(1) == b_in.size(0), op,
                ": a must be [M, K] and b [K, N]; got ", a_in.sizes(), " and ", b_in.sizes());
    const std::int64_t M = a_in.size(0), K = a_in.size(1), N = b_in.size(1);
    check_stream(op);
    const c10::cuda::CUDAGuard guard(a_in.device());
    if (a_in.scalar_type() == at::kFloat) {
        TORCH_CHECK(M <= (1 << 20) && N <= (1 << 20) && K <= (1 << 20), op,
                    ": sgemm's contract takes M, N and K up to 2^20; got ", M, " x ", N, " x ", K);
        TORCH_CHECK(M * K < (std::int64_t{1} << 31) && K * N < (std::int64_t{1} << 31) &&
                        M * N < (std::int64_t{1} << 31),
                    op, ": sgemm's matrices hold fewer than 2^31 elements each");
        Tensor c = at::empty({M, N}, a_in.options());
        if (M == 0 || N == 0) return c;
        if (K == 0) return c.zero_();
        const Tensor a = row_major(a_in), b = row_major(b_in);
        sgemm(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), 1.0f, f32(a), f32(b),
              0.0f, f32_out(c));
        return c;
    }
    TORCH_CHECK(a_in.scalar_type() == at::kBFloat16, op, ": a is ", a_in.scalar_type(),
                "; the kernels take float32 (sgemm) or bfloat16 (gemm_bf16)");
    check_bf16_gpu(op);
    TORCH_CHECK(M % 8 == 0 && N % 8 == 0 && K % 8 == 0 && M >= 8 && N >= 8 && K >= 8 &&
                    M <= (1 << 16) && N <= (1 << 16) && K <= (1 << 16),
                op, ": gemm_bf16's contract takes M, N and K multiples of 8 from 8 to 2^16; got ",
                M, " x ", N, " x ", K);
    if (gemm_bf16_epilogue != nullptr) {
        // Either layout of each operand and a bf16 result: a linear layer's three products (x W^T,
        // dy W, dy^T x: mm's b and the backward's transposed views) run without a copy.
        const auto [a, a_major] = epilogue_operand(a_in);
        const auto [bt, b_major] = epilogue_operand(b_in.t());
        Tensor c = at::empty({M, N}, a_in.options());
        GemmEpilogue epilogue;
        epilogue.out = bf16_out(c);
        gemm_bf16_epilogue(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), bf16(a),
                           a_major, bf16(bt), b_major, epilogue);
        return c;
    }
    // gemm_bf16 computes A B^T with both operands K-contiguous: b^T, row-major, is its B. For a
    // linear layer's weight W [N, K] passed as b = W.t(), that is W itself: no copy.
    const Tensor a = row_major_aligned(a_in), bt = row_major_aligned(b_in.t());
    Tensor c = at::empty({M, N}, a.options().dtype(at::kFloat));
    gemm_bf16(static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), bf16(a), bf16(bt),
              f32_out(c));
    return c.to(at::kBFloat16);
}

}  // namespace

TORCH_LIBRARY(course, m) { define_course_ops(m); }

TORCH_LIBRARY_IMPL(course, CUDA, m) {
    m.impl("softmax", &softmax);
    m.impl("layernorm", &layernorm_op);
    m.impl("layernorm_backward", &layernorm_backward_op);
    m.impl("cross_entropy", &cross_entropy_op);
    m.impl("gelu", &gelu_op);
    m.impl("gelu_backward", &gelu_backward_op);
    m.impl("attention", &attention_op);
    m.impl("attention_backward", &attention_backward_op);
    m.impl("mm", &mm_op);
}
