"""Module 08's torch_ops (kind "torch"): its manifest rules, `grader check`'s file rules, and the
run where PyTorch is missing (CI): skipped with the reason, unrun. (The checks themselves:
course_torch/tests/; on a GPU: dev/accept_torch_ops.sh.)"""
import importlib.util
import sys

from grader import torch_ops
from grader.build import BuildTree
from grader.course import load_course, select, select_one
from grader.manifest import manifest_problems
from grader.results import LEARNER, SKIPPED, SOLUTION
from grader.tests.conftest import REPO

ENTRY = {"id": "torch_ops", "title": "t", "kind": "torch", "file": "torch_ops.py", "min_sm": 75,
         "metric": "", "baseline": "", "target": 0, "hints": ["a", "b"]}


def problems(entry: dict) -> list[str]:
    return manifest_problems("08_training", {"module": {"title": "t", "week": 1},
                                             "exercise": [entry]}, "")


def test_a_torch_exercise_has_a_python_file_and_no_checker():
    assert [p for p in problems(ENTRY) if "CMake" not in p] == []
    assert any("a torch exercise has no 'checker'" in p
               for p in problems({**ENTRY, "checker": "tests/x.cu"}))
    assert any("the binding's Python half, a .py file" in p
               for p in problems({**ENTRY, "file": "torch_ops.cpp"}))


def test_the_course_exercise_and_its_files():
    course = load_course(REPO)
    exercise = select_one(course, "08/torch_ops")
    assert exercise.is_torch and not exercise.has_checker
    assert torch_ops.file_problems(course, exercise) == []


def test_a_path_to_either_half_of_the_binding_names_the_exercise():
    course = load_course(REPO)
    for path in ("modules/08_training/torch_ops.py", "modules/08_training/torch_ops.cpp",
                 "solutions/08_training/torch_ops.cpp"):
        assert [exercise.key for exercise in select(course, path, REPO)] == ["08_training/torch_ops"]
    assert [e.key for e in select(course, "torch_ops.cpp", REPO / "modules" / "08_training")] == [
        "08_training/torch_ops"]


def test_without_pytorch_it_is_skipped_with_the_reason_unrun(monkeypatch, tmp_path):
    course = load_course(REPO)
    exercise = select_one(course, "08/torch_ops")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torch" else real(name, *args))
    monkeypatch.setattr(torch_ops, "run_program", lambda *args: (_ for _ in ()).throw(
        AssertionError("ran without PyTorch")))
    result = torch_ops.grade_torch(BuildTree(course, LEARNER, tmp_path), exercise, print, 60)
    assert result.status == SKIPPED
    assert "PyTorch is not installed" in result.outcome.detail[0]


def test_the_check_reads_the_solutions_from_the_trees_folder(tmp_path):
    course = load_course(REPO)
    tree = BuildTree(course, SOLUTION, tmp_path / "tree",
                     defines=(f"-DCOURSE_SOLUTIONS_DIR={tmp_path}/src",))
    command = torch_ops.check_command(tree, tmp_path / "report.json")
    assert command[:4] == [sys.executable, "-m", "course_torch", "check"]
    assert command[command.index("--solutions-dir") + 1] == f"{tmp_path}/src"
    assert command[command.index("--variant") + 1] == SOLUTION
    assert torch_ops.solutions_dir(BuildTree.standard(course, SOLUTION)) == REPO / "solutions"


def test_the_report_round_trips(tmp_path):
    report = torch_ops.Report("fail", ("course::mm (float32): the fake function",))
    report.write(tmp_path / "r.json")
    assert torch_ops.Report.read(tmp_path / "r.json") == report
