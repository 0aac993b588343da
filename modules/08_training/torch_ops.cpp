// 08_training/torch_ops: your kernels as PyTorch operators, the C++ half: each op of torch_ops.h
// checks its tensors, brings them to the layout and dtype its kernel's contract reads, allocates
// the outputs and calls the kernel (its Python half: torch_ops.py).
//
// Teaches: what stands between a kernel's contract (raw pointers, sizes, a layout, a dtype, the
// default stream) and a PyTorch tensor (a device, a dtype, strides, a storage offset, a current
// stream): TORCH_LIBRARY gives the op a schema, TORCH_LIBRARY_IMPL(course, CUDA, ...) its CUDA
// implementation, and the implementation turns whatever a caller passes into what the contract
// promises its kernel, or refuses it with one line.
//
// Run:  grader run 08/torch_ops         Stuck:  grader hint 08/torch_ops
// Contract: torch_ops.h                Notes:  notes/08_training.md
//
// course::gelu and course::gelu_backward are written out: the pattern of every op. Fill in the
// others with the same steps (and the Python half, torch_ops.py).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_bf16.h>
#include <torch/library.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "course/todo.h"
#include "cross_entropy.h"
#include "flash_backward.h"
#include "flash_causal.h"
#include "flash_tc.h"
#include "gelu.h"
#include "gemm_bf16.h"
#include "layernorm.h"
#include "layernorm_backward.h"
#include "sgemm.h"
#include "softmax_online.h"
#include "torch_ops.h"

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
    // TODO: check x (a CUDA tensor, float32, at least one dimension) and the stream, guard its
    //       device, make it row-major, allocate y, and call softmax_online over rows =
    //       numel / cols rows of cols = x.size(-1) values (an empty x: return the empty y).
    COURSE_TODO("course::softmax in torch_ops.cpp");
}

std::tuple<Tensor, Tensor, Tensor> layernorm_op(const Tensor& x_in, const Tensor& weight_in,
                                                const Tensor& bias_in) {
    // TODO: as softmax, with weight and bias [C]; mean and rstd have x's shape without its last
    //       dimension (x.sizes().slice(0, x.dim() - 1)).
    COURSE_TODO("course::layernorm in torch_ops.cpp");
}

std::tuple<Tensor, Tensor, Tensor> layernorm_backward_op(const Tensor& dy_in, const Tensor& x_in,
                                                         const Tensor& weight_in,
                                                         const Tensor& mean_in,
                                                         const Tensor& rstd_in) {
    // TODO: dy must have x's shape; weight C values, mean and rstd one per row; dx like x,
    //       dweight and dbias [C] (written by the kernel, not accumulated into).
    COURSE_TODO("course::layernorm_backward in torch_ops.cpp");
}

std::tuple<Tensor, Tensor> cross_entropy_op(const Tensor& logits_in, const Tensor& targets_in) {
    // TODO: logits [N, V] float32, targets [N] class indices in [0, V) (check it: the kernel reads
    //       targets[r] as an index), converted to the contract's int32; return the mean of the
    //       kernel's per-row losses and its dlogits (already the gradient of that mean).
    COURSE_TODO("course::cross_entropy in torch_ops.cpp");
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
    // TODO: the same dtype for all three (float32 or bfloat16), [B, H, T, D] of one shape, D 64 or
    //       128, T >= 1, fewer than 2^31 elements.
    COURSE_TODO("check_heads in torch_ops.cpp");
}

std::tuple<Tensor, Tensor> attention_op(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                        bool causal) {
    // TODO: flash_causal for float32, flash_tc for bfloat16 (check_bf16_gpu first); their
    //       pointers start on 16-byte boundaries (row_major_aligned); scale 1 / sqrt(D); lse
    //       [B, H, T] float32.
    COURSE_TODO("course::attention in torch_ops.cpp");
}

std::tuple<Tensor, Tensor, Tensor> attention_backward_op(const Tensor& dout_in, const Tensor& q_in,
                                                         const Tensor& k_in, const Tensor& v_in,
                                                         const Tensor& out_in, const Tensor& lse_in,
                                                         bool causal) {
    // TODO: flash_backward reads bfloat16 Q, K, V, O, dO and float32 L, and writes float32 dQ, dK,
    //       dV: convert what differs, and return the gradients in q's dtype.
    COURSE_TODO("course::attention_backward in torch_ops.cpp");
}

// ---- modules 04 and 05 ----

Tensor mm_op(const Tensor& a_in, const Tensor& b_in) {
    // TODO: float32: sgemm(M, N, K, 1, a, b, 0, c) on row-major a [M, K] and b [K, N].
    //       bfloat16: gemm_bf16 computes A B^T with B [N, K] row-major, which is b.t() (free for
    //       a linear layer's weight W passed as b = W.t()); M, N, K multiples of 8; its float32
    //       result rounded to bfloat16.
    COURSE_TODO("course::mm in torch_ops.cpp");
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
