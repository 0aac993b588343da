"""08_training/torch_ops: your kernels as PyTorch operators, the Python half: what torch.compile
and autograd need to know about each op of torch_ops.h that its CUDA implementation
(torch_ops.cpp) cannot tell them.

Teaches: a fake function per op (torch.library.register_fake: the outputs' shapes, dtypes and
layout computed from the inputs' alone, so that torch.compile can trace a model through an op it
cannot look into), a backward per differentiable op (torch.library.register_autograd: what the
forward saves, and which kernel turns the output's gradient into the inputs'), and the dtype each
op takes under autocast (torch.library.register_autocast).

Run:  grader run 08/torch_ops         Stuck:  grader hint 08/torch_ops
Contract: torch_ops.h                Notes:  notes/08_training.md

course::gelu and course::gelu_backward are written out: the pattern of every op. Each TODO below
raises until you replace it.
"""
import torch


def todo(what):
    """The stub's marker: the check reports the exercise as todo. Delete the call when you write
    the code."""
    raise NotImplementedError(f"[course:todo] {what} in torch_ops.py")


# ---- fake functions: the outputs' metadata, no data ----
#
# The CUDA implementations return new dense row-major tensors, so the fakes do too: new_empty
# (not empty_like, which would copy a transposed input's strides).


@torch.library.register_fake("course::softmax")
def _(x):
    todo("the fake of course::softmax: an empty dense tensor of x's shape and dtype")


@torch.library.register_fake("course::layernorm")
def _(x, weight, bias):
    todo("the fake of course::layernorm: y like x, mean and rstd of x's shape without its last "
         "dimension")


@torch.library.register_fake("course::layernorm_backward")
def _(dy, x, weight, mean, rstd):
    todo("the fake of course::layernorm_backward")


@torch.library.register_fake("course::cross_entropy")
def _(logits, targets):
    todo("the fake of course::cross_entropy: a 0-dimensional loss, dlogits like logits")


@torch.library.register_fake("course::gelu")
def _(x):
    return x.new_empty(x.shape)


@torch.library.register_fake("course::gelu_backward")
def _(dy, x):
    return x.new_empty(x.shape)


@torch.library.register_fake("course::attention")
def _(q, k, v, causal):
    todo("the fake of course::attention: out like q, lse [B, H, T] float32")


@torch.library.register_fake("course::attention_backward")
def _(dout, q, k, v, out, lse, causal):
    todo("the fake of course::attention_backward")


@torch.library.register_fake("course::mm")
def _(a, b):
    todo("the fake of course::mm")


# ---- backwards: setup_context saves what the backward needs, backward returns one gradient per
# input (None for an input that has none: an index, a flag) ----


def _softmax_setup(ctx, inputs, output):
    todo("what course::softmax's backward needs (its output)")


def _softmax_backward(ctx, dy):
    # No kernel of the course computes it: write it with PyTorch's own ops.
    todo("course::softmax's backward: dx = y (dy - sum over the row of dy y)")


torch.library.register_autograd("course::softmax", _softmax_backward, setup_context=_softmax_setup)


def _layernorm_setup(ctx, inputs, output):
    todo("what course::layernorm's backward needs (x, weight, mean, rstd); mean and rstd are "
         "not differentiable (ctx.mark_non_differentiable)")


def _layernorm_backward(ctx, dy, _dmean, _drstd):
    todo("course::layernorm's backward: one gradient per input, from course::layernorm_backward")


torch.library.register_autograd("course::layernorm", _layernorm_backward,
                                setup_context=_layernorm_setup)


def _cross_entropy_setup(ctx, inputs, output):
    todo("what course::cross_entropy's backward needs (dlogits, not differentiable)")


def _cross_entropy_backward(ctx, dloss, _ddlogits):
    todo("course::cross_entropy's backward: dlogits times the loss's gradient; none for targets")


torch.library.register_autograd("course::cross_entropy", _cross_entropy_backward,
                                setup_context=_cross_entropy_setup)


def _gelu_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _gelu_backward(ctx, dy):
    (x,) = ctx.saved_tensors
    return torch.ops.course.gelu_backward(dy, x)


torch.library.register_autograd("course::gelu", _gelu_backward, setup_context=_gelu_setup)


def _attention_setup(ctx, inputs, output):
    todo("what course::attention's backward needs (q, k, v, out, lse and the flag)")


def _attention_backward(ctx, dout, _dlse):
    todo("course::attention's backward, through course::attention_backward")


torch.library.register_autograd("course::attention", _attention_backward,
                                setup_context=_attention_setup)


def _mm_setup(ctx, inputs, output):
    todo("what course::mm's backward needs")


def _mm_backward(ctx, dc):
    todo("course::mm's backward: da = dc b^T, db = a^T dc, each through course::mm (only "
         "where ctx.needs_input_grad says so)")


torch.library.register_autograd("course::mm", _mm_backward, setup_context=_mm_setup)

# ---- autocast: inside torch.autocast("cuda", dtype=torch.bfloat16) a model's float32 tensors
# reach the products in bf16 (the tensor cores' type) and the reductions in float32 (their
# kernels' type), as PyTorch's own ops do there ----

for _op in ("mm", "attention"):
    torch.library.register_autocast(f"course::{_op}", "cuda", torch.bfloat16)
for _op in ("softmax", "layernorm", "cross_entropy"):
    torch.library.register_autocast(f"course::{_op}", "cuda", torch.float32)
