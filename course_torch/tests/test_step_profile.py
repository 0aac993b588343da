"""The profile's breakdown of a step (course_torch/step_profile.py) on a CPU profile (needs
PyTorch, not a GPU; skipped without it, as on CI): the model's ops' forwards under their ranges,
the backward nodes by name, each counted per step."""
import pytest

torch = pytest.importorskip("torch")

from torch.profiler import ProfilerActivity, profile, schedule  # noqa: E402

from course_torch import step_profile  # noqa: E402
from course_torch.model import torch_check  # noqa: E402


def test_a_step_breaks_down_into_the_ops_forwards_and_the_backward_nodes():
    ops = step_profile.Labelled(torch_check.TorchOps)
    x = torch.randn(16, 32, requires_grad=True)
    weight = torch.randn(64, 32, requires_grad=True)
    captured = []
    marks = step_profile._StepMarks()  # as train_torch appends each step's time
    with profile(activities=[ProfilerActivity.CPU],
                 schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda done: captured.append(done.events())) as profiler:
        marks.profiler = profiler
        for _ in range(3):
            ops.gelu(ops.linear(x, weight)).sum().backward()
            marks.append(0.0)
    assert len(captured) == 1
    groups, gpu_busy = step_profile.breakdown(captured[0], steps=2)
    assert groups["model.linear"][0] == 1 and groups["model.gelu"][0] == 1  # calls per step
    assert groups["model.linear"][1] > 0  # CPU time
    assert groups["GeluBackward0"][0] == 1  # a backward node, its engine prefix left out
    assert gpu_busy == 0  # no GPU here
    # nothing counted twice: the children's time is inside their top-level call's
    assert "aten::mm" not in groups and "aten::gelu" not in groups


def test_a_cpp_nodes_name_loses_its_namespaces():
    name = step_profile.BACKWARD + "torch::autograd::CppNode<(anonymous namespace)::Mm>"
    assert step_profile._short(name) == "CppNode<Mm>"
    assert step_profile._short(step_profile.BACKWARD + "torch::autograd::AccumulateGrad") == \
        "AccumulateGrad"


def test_each_model_op_gets_its_backward_nodes_stock_and_swapped():
    groups = {"model.linear": [4, 100.0, 30.0], "AddmmBackward0": [3, 50.0, 20.0],
              "MmBackward0": [1, 10.0, 5.0], "CppNode<Mm>": [4, 40.0, 60.0],
              "GeneratedBackwardFor_course_mm_defaultBackward": [4, 80.0, 60.0],
              "ToCopyBackward0": [8, 99.0, 9.0], "CppNode<LayerNorm>": [2, 7.0, 1.0]}
    calls, forward_cpu, backward_cpu, gpu = step_profile._op_share(groups, "linear")
    assert calls == 4 and forward_cpu == 0.1
    assert backward_cpu == (50 + 10 + 40 + 80) / 1e3  # not the casts' nodes, not layernorm's
    assert gpu == (30 + 20 + 5 + 60 + 60) / 1e3
    assert step_profile._op_share(groups, "layer_norm")[2] == 7 / 1e3
