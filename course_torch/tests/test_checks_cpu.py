"""The checks' logic on the CPU (needs PyTorch, not a GPU; skipped without PyTorch, as on CI):
the solutions' Python half over CPU stand-ins of the C++ half passes; the stub is todo; each
planted bug of solutions/08_training/mutants.toml that lives in the Python half, and a stand-in of
each that lives in the C++ half or a kernel, fails with its message."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from grader.course import load_course, select  # noqa: E402
from grader.mutants import apply_mutant, read_mutants  # noqa: E402
from grader.results import FAIL, PASS, TODO  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).with_name("cpu_ops.py")
SOLUTION = ROOT / "solutions" / "08_training" / "torch_ops.py"


def run_checks(binding: Path, bugs: str = "", *more: str) -> dict:
    result = subprocess.run([sys.executable, str(RUNNER), str(binding), bugs, *more],
                            capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def mutants() -> dict:
    course = load_course(ROOT)
    found, problems = read_mutants(course, select(course, "08/torch_ops"))
    assert not problems
    return {mutant.name: mutant for mutant in found}


def test_the_solution_passes_every_check_and_the_compiled_model():
    report = run_checks(SOLUTION)
    assert report["status"] == PASS, report["lines"]
    assert any(line.startswith("torch.compile:") for line in report["lines"])


def test_the_fast_bindings_cpp_backwards_pass_every_check():
    # torch_ops_autograd.cpp, built for AutogradCPU, takes precedence over torch_ops.py's
    # backwards (the Autograd alias): the checks run through the C++ ones
    if not (shutil.which("c++") and shutil.which("ninja")):
        pytest.skip("needs a C++ compiler and ninja (the extension's build)")
    report = run_checks(SOLUTION, "", str(SOLUTION.with_name("torch_ops_autograd.cpp")))
    assert report["status"] == PASS, report["lines"]
    # a C++ autograd::Function's node (torch_ops.py's: GeneratedBackwardFor_course_mm_default...)
    assert report["mm_backward"] == "CppFunction", report["mm_backward"]


def test_the_stub_is_todo():
    report = run_checks(ROOT / "modules" / "08_training" / "torch_ops.py")
    assert report["status"] == TODO
    assert "[course:todo]" in report["lines"][0]


@pytest.mark.parametrize("name", ["mm_fake_of_the_wrong_shape",
                                  "softmax_registered_without_its_backward",
                                  "gelu_backward_arguments_swapped"])
def test_a_planted_bug_of_the_python_half_fails_with_its_message(tmp_path, name):
    mutant = mutants()[name]
    binding = tmp_path / "torch_ops.py"
    binding.write_text(apply_mutant(SOLUTION.read_text(encoding="utf-8"), mutant), encoding="utf-8")
    report = run_checks(binding)
    assert report["status"] == mutant.expect == FAIL
    assert mutant.message in report["lines"][0], report["lines"][0]


@pytest.mark.parametrize("bug, name", [("softmax_ignores_strides", "softmax_ignores_the_strides"),
                                       ("layernorm_backward_drops_the_mean_term",
                                        "layernorm_backward_drops_the_mean_term")])
def test_a_stand_in_of_a_cpp_planted_bug_fails_with_its_message(bug, name):
    report = run_checks(SOLUTION, bug)
    assert report["status"] == FAIL
    assert mutants()[name].message in report["lines"][0], report["lines"][0]
