"""The extension's plan (which files, which flags), the build errors' lines and the binding's
completeness: pure Python, run on CI without PyTorch."""
import re
from pathlib import Path

import pytest

from course_torch.plan import KERNELS, arch_flags, first_errors, make_plan, missing_files, schemas
from grader.course import load_course

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def course():
    return load_course(ROOT)


def files(plan):
    return {key: path.relative_to(ROOT).as_posix() for key, path in plan.kernels}


def test_each_variant_compiles_one_file_per_kernel_and_every_file_exists(course):
    for variant in ("learner", "solution", "fast"):
        for sm in (75, 80, 90):
            plan = make_plan(course, variant, sm)
            assert len(plan.kernels) == len(KERNELS)
            assert missing_files(plan) == []


def test_the_extension_compiles_the_harness_source_that_wgmma_gemm_reaches(course):
    # wgmma_gemm's TMA descriptors call course::tensor_map_encoder(), defined in the harness's
    # sources, which the checkers link: without it the extension fails to load (undefined symbol)
    for variant in ("learner", "solution", "fast"):
        sources = make_plan(course, variant, 90).sources
        assert str(ROOT / "common/src/tensor_map.cpp") in sources


def test_the_learner_builds_the_stubs_and_the_fast_variant_the_fast_references(course):
    assert files(make_plan(course, "learner", 90))["06_softmax_norms/layernorm"] == \
        "modules/06_softmax_norms/layernorm.cu"
    fast = files(make_plan(course, "fast", 90))
    assert fast["06_softmax_norms/layernorm"] == "solutions/06_softmax_norms/layernorm_fast.cu"
    assert fast["06_softmax_norms/layernorm_backward"] == \
        "solutions/06_softmax_norms/layernorm_backward_fast.cu"
    # no fast reference: the readable one
    assert fast["08_training/gelu"] == "solutions/08_training/gelu.cu"
    # the fast binding: the solutions' and its backwards in C++
    assert make_plan(course, "fast", 90).binding_sources == (
        ROOT / "solutions/08_training/torch_ops.cpp",
        ROOT / "solutions/08_training/torch_ops_autograd.cpp")
    assert make_plan(course, "solution", 90).binding_sources == (
        ROOT / "solutions/08_training/torch_ops.cpp",)
    plan = make_plan(course, "solution", 90, ROOT / "build/mutants/src")
    assert plan.binding_py == ROOT / "build/mutants/src/08_training/torch_ops.py"
    assert make_plan(course, "learner", 90).binding_cpp == ROOT / "modules/08_training/torch_ops.cpp"


def test_the_bf16_product_is_wgmma_on_hopper_and_mma_pipeline_elsewhere(course):
    assert "05_gemm_advanced/wgmma_gemm" in files(make_plan(course, "solution", 90))
    for sm in (75, 80, 89):
        plan = make_plan(course, "solution", sm)
        assert "05_gemm_advanced/mma_pipeline" in files(plan)
        assert any("wgmma_gemm needs compute capability 9.0" in note for note in plan.notes)
    assert arch_flags(90) == ("-gencode=arch=compute_90a,code=sm_90a",)
    assert arch_flags(80) == ("-gencode=arch=compute_80,code=sm_80",)


def test_an_unknown_variant_is_refused(course):
    with pytest.raises(ValueError, match="variant"):
        make_plan(course, "emulated", 90)


def test_the_first_compiler_errors_come_back_relative_to_the_course():
    output = (f"[1/3] c++ ...\n{ROOT}/modules/08_training/torch_ops.cpp:12:5: error: 'x' was not "
              f"declared\n{ROOT}/modules/06_softmax_norms/layernorm.cu(40): error: identifier\n"
              "ninja: build stopped")
    assert first_errors(output, ROOT) == [
        "modules/08_training/torch_ops.cpp:12:5: error: 'x' was not declared",
        "modules/06_softmax_norms/layernorm.cu(40): error: identifier"]
    assert first_errors("something else\nlast words", ROOT) == ["something else", "last words"]


@pytest.mark.parametrize("folder", ["modules", "solutions"])
def test_both_halves_of_the_binding_cover_every_op_of_the_contract(folder):
    names = [schema.split("(")[0] for schema in schemas(ROOT)]
    assert names == ["softmax", "layernorm", "layernorm_backward", "cross_entropy", "gelu",
                     "gelu_backward", "attention", "attention_backward", "mm"]
    cpp = (ROOT / folder / "08_training/torch_ops.cpp").read_text(encoding="utf-8")
    py = (ROOT / folder / "08_training/torch_ops.py").read_text(encoding="utf-8")
    assert sorted(re.findall(r'm\.impl\("(\w+)"', cpp)) == sorted(names)
    assert sorted(re.findall(r'register_fake\("course::(\w+)"\)', py)) == sorted(names)
    differentiable = {"softmax", "layernorm", "cross_entropy", "gelu", "attention", "mm"}
    assert set(re.findall(r'register_autograd\("course::(\w+)"', py)) == differentiable
