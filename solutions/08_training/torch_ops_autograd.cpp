// 08_training/torch_ops: the ops' backwards registered in C++, beside torch_ops.py's. Fast
// reference of the binding (a stretch no hint teaches): the fast variant of course_torch compiles
// it into its extension; the readable binding, stubs and solution alike, has none.
//
// Teaches: what a custom op's Python autograd layer costs per call, and where that matters. An op
// whose backward is registered from Python (torch.library.register_autograd) leaves C++ on every
// call: the dispatcher hands its arguments to Python, an autograd.Function is applied (its
// arguments flattened, its defaults filled in from the schema), the op is dispatched again below
// autograd, and its outputs go back to C++; its backward is a Python call from the autograd
// engine. Tens of microseconds of CPU per op, while a kernel at the small GPT's shapes takes a few:
// a model whose step is bound by its calls (B 8 x T 195: a few hundred ops per step) pays them in
// its step time. The same backwards as torch_ops.py's, as torch::autograd::Function, registered
// for the AutogradCUDA key: a kernel registered for a backend's own autograd key takes precedence
// over one registered for the Autograd alias (torch_ops.py's), so on CUDA tensors these run and
// the Python ones stay for every other device. Each backward calls the ops through the dispatcher
// (autograd included), as torch_ops.py's do. The autocast rules stay torch_ops.py's (a Python call
// per op inside torch.autocast): register_autocast refuses an op that already has a kernel for
// AutocastCUDA (PyTorch 2.11: a KeyError), and this file is loaded before torch_ops.py runs.
//
// Run:  python3 -m course_torch check --variant fast      (opcheck, gradcheck, torch.compile)
//       python3 -m course_torch profile                    (a step's time, op by op)
// Contract: torch_ops.h                Notes:  notes/08_training.md
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

namespace {

using at::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The op `name` of torch_ops.h, called through the dispatcher.
template <class Signature>
c10::TypedOperatorHandle<Signature> course_op(const char* name) {
    return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Signature>();
}

using Triple = std::tuple<Tensor, Tensor, Tensor>;
using Pair = std::tuple<Tensor, Tensor>;

Tensor softmax_call(const Tensor& x) {
    static const auto op = course_op<Tensor(const Tensor&)>("course::softmax");
    return op.call(x);
}
Triple layernorm_call(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    static const auto op =
        course_op<Triple(const Tensor&, const Tensor&, const Tensor&)>("course::layernorm");
    return op.call(x, weight, bias);
}
Triple layernorm_backward_call(const Tensor& dy, const Tensor& x, const Tensor& weight,
                               const Tensor& mean, const Tensor& rstd) {
    static const auto op =
        course_op<Triple(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&)>("course::layernorm_backward");
    return op.call(dy, x, weight, mean, rstd);
}
Pair cross_entropy_call(const Tensor& logits, const Tensor& targets) {
    static const auto op = course_op<Pair(const Tensor&, const Tensor&)>("course::cross_entropy");
    return op.call(logits, targets);
}
Tensor gelu_call(const Tensor& x) {
    static const auto op = course_op<Tensor(const Tensor&)>("course::gelu");
    return op.call(x);
}
Tensor gelu_backward_call(const Tensor& dy, const Tensor& x) {
    static const auto op = course_op<Tensor(const Tensor&, const Tensor&)>("course::gelu_backward");
    return op.call(dy, x);
}
Pair attention_call(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
    static const auto op =
        course_op<Pair(const Tensor&, const Tensor&, const Tensor&, bool)>("course::attention");
    return op.call(q, k, v, causal);
}
Triple attention_backward_call(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse, bool causal) {
    static const auto op =
        course_op<Triple(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const Tensor&, bool)>("course::attention_backward");
    return op.call(dout, q, k, v, out, lse, causal);
}
Tensor mm_call(const Tensor& a, const Tensor& b) {
    static const auto op = course_op<Tensor(const Tensor&, const Tensor&)>("course::mm");
    return op.call(a, b);
}

// Each forward runs the op's CUDA implementation (torch_ops.cpp) below the autograd keys, as
// register_autograd's generated function does, and saves what torch_ops.py's setup_context saves.
// The ops with outputs that have no gradient (layernorm's mean and rstd, attention's lse,
// cross_entropy's dlogits) turn off the zeros autograd would otherwise make for them before
// every backward (set_materialize_grads: dlogits's are N x V floats, 313 MB at the GPT's
// shapes, written each step), and take an undefined gradient as no gradient.

struct Softmax : torch::autograd::Function<Softmax> {
    static Tensor forward(AutogradContext* ctx, const Tensor& x) {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        Tensor y = softmax_call(x);
        ctx->save_for_backward({y});
        return y;
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const Tensor y = ctx->get_saved_variables()[0];
        const Tensor& dy = grads[0];
        return {y * (dy - (dy * y).sum(-1, /*keepdim=*/true))};
    }
};

struct LayerNorm : torch::autograd::Function<LayerNorm> {
    static variable_list forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight,
                                 const Tensor& bias) {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        auto [y, mean, rstd] = layernorm_call(x, weight, bias);
        ctx->save_for_backward({x, weight, mean, rstd});
        ctx->mark_non_differentiable({mean, rstd});
        ctx->set_materialize_grads(false);
        return {y, mean, rstd};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor()};
        const variable_list saved = ctx->get_saved_variables();
        auto [dx, dweight, dbias] =
            layernorm_backward_call(grads[0], saved[0], saved[1], saved[2], saved[3]);
        return {dx, dweight, dbias};
    }
};

struct CrossEntropy : torch::autograd::Function<CrossEntropy> {
    static variable_list forward(AutogradContext* ctx, const Tensor& logits,
                                 const Tensor& targets) {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        auto [loss, dlogits] = cross_entropy_call(logits, targets);
        ctx->save_for_backward({dlogits});
        ctx->mark_non_differentiable({dlogits});
        ctx->set_materialize_grads(false);
        return {loss, dlogits};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        if (!grads[0].defined()) return {Tensor(), Tensor()};
        // The kernel computed the mean loss's gradient with the loss: scaled by the loss's own.
        return {ctx->get_saved_variables()[0] * grads[0], Tensor()};
    }
};

struct Gelu : torch::autograd::Function<Gelu> {
    static Tensor forward(AutogradContext* ctx, const Tensor& x) {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        ctx->save_for_backward({x});
        return gelu_call(x);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        return {gelu_backward_call(grads[0], ctx->get_saved_variables()[0])};
    }
};

struct Attention : torch::autograd::Function<Attention> {
    static variable_list forward(AutogradContext* ctx, const Tensor& q, const Tensor& k,
                                 const Tensor& v, bool causal) {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        auto [out, lse] = attention_call(q, k, v, causal);
        ctx->save_for_backward({q, k, v, out, lse});
        ctx->saved_data["causal"] = causal;
        ctx->mark_non_differentiable({lse});
        ctx->set_materialize_grads(false);
        return {out, lse};
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        if (!grads[0].defined()) return {Tensor(), Tensor(), Tensor(), Tensor()};
        const variable_list s = ctx->get_saved_variables();
        auto [dq, dk, dv] = attention_backward_call(grads[0], s[0], s[1], s[2], s[3], s[4],
                                                    ctx->saved_data["causal"].toBool());
        return {dq, dk, dv, Tensor()};  // none for the flag
    }
};

struct Mm : torch::autograd::Function<Mm> {
    static Tensor forward(AutogradContext* ctx, const Tensor& a, const Tensor& b) {
        const at::AutoDispatchBelowADInplaceOrView below_autograd;
        ctx->save_for_backward({a, b});
        return mm_call(a, b);
    }
    static variable_list backward(AutogradContext* ctx, variable_list grads) {
        const variable_list s = ctx->get_saved_variables();
        const Tensor& dc = grads[0];
        // Transposed views, not copies: the op reads them as they lie (or copies them itself).
        return {ctx->needs_input_grad(0) ? mm_call(dc, s[1].t()) : Tensor(),
                ctx->needs_input_grad(1) ? mm_call(s[0].t(), dc) : Tensor()};
    }
};

Tensor softmax_autograd(const Tensor& x) { return Softmax::apply(x); }

Triple layernorm_autograd(const Tensor& x, const Tensor& weight, const Tensor& bias) {
    const variable_list out = LayerNorm::apply(x, weight, bias);
    return {out[0], out[1], out[2]};
}

Pair cross_entropy_autograd(const Tensor& logits, const Tensor& targets) {
    const variable_list out = CrossEntropy::apply(logits, targets);
    return {out[0], out[1]};
}

Tensor gelu_autograd(const Tensor& x) { return Gelu::apply(x); }

Pair attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
    const variable_list out = Attention::apply(q, k, v, causal);
    return {out[0], out[1]};
}

Tensor mm_autograd(const Tensor& a, const Tensor& b) { return Mm::apply(a, b); }

}  // namespace

// AutogradCUDA; the package's CPU tests compile this file for AutogradCPU, over CPU stand-ins of
// torch_ops.cpp (course_torch/tests/cpu_ops.py).
#ifndef COURSE_AUTOGRAD_KEY
#define COURSE_AUTOGRAD_KEY AutogradCUDA
#endif

TORCH_LIBRARY_IMPL(course, COURSE_AUTOGRAD_KEY, m) {
    m.impl("softmax", &softmax_autograd);
    m.impl("layernorm", &layernorm_autograd);
    m.impl("cross_entropy", &cross_entropy_autograd);
    m.impl("gelu", &gelu_autograd);
    m.impl("attention", &attention_autograd);
    m.impl("mm", &mm_autograd);
}
