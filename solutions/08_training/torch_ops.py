"""08_training/torch_ops: your kernels as PyTorch operators, the Python half: what torch.compile
and autograd need to know about each op of torch_ops.h that its CUDA implementation
(torch_ops.cpp) cannot tell them. Reference solution.

Teaches: a fake function per op (torch.library.register_fake: the outputs' shapes, dtypes and
layout computed from the inputs' alone, so that torch.compile can trace a model through an op it
cannot look into), a backward per differentiable op (torch.library.register_autograd: what the
forward saves, and which kernel turns the output's gradient into the inputs'), and the dtype each
op takes under autocast (torch.library.register_autocast).

Run:  grader run 08/torch_ops --solutions
Contract: torch_ops.h                Notes:  notes/08_training.md
"""
import torch

# ---- fake functions: the outputs' metadata, no data ----
#
# The CUDA implementations return new dense row-major tensors, so the fakes do too: new_empty
# (not empty_like, which would copy a transposed input's strides).


@torch.library.register_fake("course::softmax")
def _(x):
    return x.new_empty(x.shape)


@torch.library.register_fake("course::layernorm")
def _(x, weight, bias):
    rows = x.shape[:-1]
    return x.new_empty(x.shape), x.new_empty(rows), x.new_empty(rows)


@torch.library.register_fake("course::layernorm_backward")
def _(dy, x, weight, mean, rstd):
    channels = x.shape[-1:]
    return x.new_empty(x.shape), x.new_empty(channels), x.new_empty(channels)


@torch.library.register_fake("course::cross_entropy")
def _(logits, targets):
    return logits.new_empty(()), logits.new_empty(logits.shape)


@torch.library.register_fake("course::gelu")
def _(x):
    return x.new_empty(x.shape)


@torch.library.register_fake("course::gelu_backward")
def _(dy, x):
    return x.new_empty(x.shape)


@torch.library.register_fake("course::attention")
def _(q, k, v, causal):
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


@torch.library.register_fake("course::attention_backward")
def _(dout, q, k, v, out, lse, causal):
    return q.new_empty(q.shape), q.new_empty(q.shape), q.new_empty(q.shape)


@torch.library.register_fake("course::mm")
def _(a, b):
    return a.new_empty((a.shape[0], b.shape[1]))


# ---- backwards: setup_context saves what the backward needs, backward returns one gradient per
# input (None for an input that has none: an index, a flag) ----


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_backward(ctx, dy):
    # No kernel of the course computes it: y (dy - sum(dy y)) in PyTorch's own ops.
    (y,) = ctx.saved_tensors
    return y * (dy - (dy * y).sum(dim=-1, keepdim=True))


torch.library.register_autograd("course::softmax", _softmax_backward, setup_context=_softmax_setup)


def _layernorm_setup(ctx, inputs, output):
    x, weight, _ = inputs
    _, mean, rstd = output
    ctx.save_for_backward(x, weight, mean, rstd)
    ctx.mark_non_differentiable(mean, rstd)  # saved statistics, not results to train through


def _layernorm_backward(ctx, dy, _dmean, _drstd):
    x, weight, mean, rstd = ctx.saved_tensors
    return torch.ops.course.layernorm_backward(dy, x, weight, mean, rstd)


torch.library.register_autograd("course::layernorm", _layernorm_backward,
                                setup_context=_layernorm_setup)


def _cross_entropy_setup(ctx, inputs, output):
    _, dlogits = output
    ctx.save_for_backward(dlogits)
    ctx.mark_non_differentiable(dlogits)


def _cross_entropy_backward(ctx, dloss, _ddlogits):
    # The kernel computed the gradient of the mean loss with the loss: scale it by the loss's own.
    (dlogits,) = ctx.saved_tensors
    return dlogits * dloss, None


torch.library.register_autograd("course::cross_entropy", _cross_entropy_backward,
                                setup_context=_cross_entropy_setup)


def _gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _gelu_backward(ctx, dy):
    (x,) = ctx.saved_tensors
    return torch.ops.course.gelu_backward(dy, x)


torch.library.register_autograd("course::gelu", _gelu_backward, setup_context=_gelu_setup)


def _attention_setup(ctx, inputs, output):
    q, k, v, causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal = causal
    ctx.mark_non_differentiable(lse)


def _attention_backward(ctx, dout, _dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = torch.ops.course.attention_backward(dout, q, k, v, out, lse, ctx.causal)
    return dq, dk, dv, None


torch.library.register_autograd("course::attention", _attention_backward,
                                setup_context=_attention_setup)


def _mm_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


def _mm_backward(ctx, dc):
    a, b = ctx.saved_tensors
    da = torch.ops.course.mm(dc, b.t()) if ctx.needs_input_grad[0] else None
    db = torch.ops.course.mm(a.t(), dc) if ctx.needs_input_grad[1] else None
    return da, db


torch.library.register_autograd("course::mm", _mm_backward, setup_context=_mm_setup)

# ---- autocast: inside torch.autocast("cuda", dtype=torch.bfloat16) a model's float32 tensors
# reach the products in bf16 (the tensor cores' type) and the reductions in float32 (their
# kernels' type), as PyTorch's own ops do there ----

for _op in ("mm", "attention"):
    torch.library.register_autocast(f"course::{_op}", "cuda", torch.bfloat16)
for _op in ("softmax", "layernorm", "cross_entropy"):
    torch.library.register_autocast(f"course::{_op}", "cuda", torch.float32)
