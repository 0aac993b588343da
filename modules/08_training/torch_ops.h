// Contract of 08_training/torch_ops: the operators `torch.ops.course.*` that your torch_ops.cpp
// implements on CUDA tensors (with the kernels of your earlier exercises) and your torch_ops.py
// makes fit for autograd and torch.compile. Read-only: the checks (python3 -m course_torch check)
// call exactly these schemas.
//
// Every op takes and returns CUDA tensors, works on the tensor's own device, and enqueues its
// kernels on the default stream (the contracts' stream); it refuses, with one line that names the
// op and the argument, a CPU tensor, a dtype its kernel does not take, a shape its contract does
// not take, and a current stream other than the default. A view whose layout is not the dense
// row-major one the contract reads (a transpose, a slice of columns) is copied into that layout
// first (Tensor.contiguous()); so is a tensor that must start on a 16-byte boundary and does not.
// Outputs are new, dense, row-major tensors.
//
//   softmax(x) -> y                  x [..., n] float32: y = softmax over the last dimension
//                                    (06_softmax_norms/softmax_online)
//   layernorm(x, weight, bias) -> (y, mean, rstd)
//                                    x [..., C], weight and bias [C], float32; mean and rstd have
//                                    x's shape without its last dimension (06 layernorm)
//   layernorm_backward(dy, x, weight, mean, rstd) -> (dx, dweight, dbias)
//                                    the gradients of layernorm (06 layernorm_backward)
//   cross_entropy(logits, targets) -> (loss, dlogits)
//                                    logits [N, V] float32, targets [N] int64 (converted to the
//                                    kernel's int32), 0 <= targets < V; loss is the mean over the
//                                    N rows (a 0-dimensional tensor) and dlogits its gradient,
//                                    both from one call of 06 cross_entropy
//   gelu(x) -> y                     any shape, float32 or bfloat16 (08 gelu_forward)
//   gelu_backward(dy, x) -> dx       dx = dy * GELU'(x), as gelu (08 gelu_backward)
//   attention(q, k, v, causal) -> (out, lse)
//                                    q, k, v, out [B, H, T, D] with D 64 or 128, float32
//                                    (07 flash_causal) or bfloat16 (07 flash_tc: compute
//                                    capability 8.0 and newer); scale 1 / sqrt(D); lse [B, H, T]
//                                    float32, the rows' logsumexp
//   attention_backward(dout, q, k, v, out, lse, causal) -> (dq, dk, dv)
//                                    07 flash_backward, whose inputs are bfloat16: float32 inputs
//                                    are rounded to bfloat16 for it, and its float32 gradients
//                                    are returned in the inputs' dtype
//   mm(a, b) -> c                    c = a @ b, a [M, K], b [K, N]: float32 through module 04's
//                                    sgemm (05 sgemm_warptile), bfloat16 through gemm_bf16
//                                    (05 wgmma_gemm on compute capability 9.0, else 05
//                                    mma_pipeline), whose B operand is b^T row-major (a linear
//                                    layer's weight as it is stored) and whose float32 result is
//                                    rounded to bfloat16; M, N and K multiples of 8 there (the
//                                    solution calls gemm_bf16_epilogue instead where the build
//                                    defines it, wgmma_gemm's fast reference: the same product,
//                                    bf16 out, each operand read as it lies)
#pragma once

#include <torch/library.h>

// The schemas, as TORCH_LIBRARY(course, m) { define_course_ops(m); } registers them.
inline void define_course_ops(torch::Library& m) {
    m.def("softmax(Tensor x) -> Tensor");
    m.def("layernorm(Tensor x, Tensor weight, Tensor bias) -> (Tensor, Tensor, Tensor)");
    m.def(
        "layernorm_backward(Tensor dy, Tensor x, Tensor weight, Tensor mean, Tensor rstd) -> "
        "(Tensor, Tensor, Tensor)");
    m.def("cross_entropy(Tensor logits, Tensor targets) -> (Tensor, Tensor)");
    m.def("gelu(Tensor x) -> Tensor");
    m.def("gelu_backward(Tensor dy, Tensor x) -> Tensor");
    m.def("attention(Tensor q, Tensor k, Tensor v, bool causal) -> (Tensor, Tensor)");
    m.def(
        "attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
        "bool causal) -> (Tensor, Tensor, Tensor)");
    m.def("mm(Tensor a, Tensor b) -> Tensor");
}
