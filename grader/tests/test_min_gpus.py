"""Exercises that need several GPUs of one machine (`min_gpus`, module 11's collectives): read
from the manifest, passed to CMake, skipped unrun with the reason where the machine has fewer."""
import os

from grader import grading, tools
from grader.build import BuildTree
from grader.course import load_course
from grader.results import SOLUTION
from grader.tests.conftest import invoke, make_course
from grader.tests.test_check import ONLY_TODO_MANIFEST
from grader.tests.test_manifest import EXERCISE, HEADER, problems_of


def needing_two_gpus(course):
    """The fixture's `passes` exercise, made to need 2 GPUs."""
    manifest = course / "modules/01_fixture/module.toml"
    text = manifest.read_text()
    manifest.write_text(text.replace("min_sm = 75", "min_sm = 75\nmin_gpus = 2", 1))
    loaded = load_course(course)
    [exercise] = [exercise for exercise in loaded.exercises if exercise.id == "passes"]
    assert exercise.min_gpus == 2
    return loaded, exercise


def test_min_gpus_defaults_to_one_and_must_be_positive(tmp_path):
    assert problems_of(tmp_path, HEADER + EXERCISE.format(id="ring").replace(
        "min_sm = 75", "min_sm = 75\nmin_gpus = 0")) == [
        "modules/01_basics/module.toml: exercise 'ring': min_gpus must be >= 1"]


def test_min_gpus_must_stand_on_one_line_for_cmake(tmp_path):
    problems = problems_of(tmp_path, HEADER + EXERCISE.format(id="ring").replace(
        "min_sm = 75", "min_sm = 75\n  min_gpus = 2"))
    assert problems == ["modules/01_basics/module.toml: exercise 'ring': write min_gpus on one "
                        "line at column 0 as `min_gpus = 2` (CMake reads it with a regex)"]


def test_an_exercise_needing_more_gpus_than_the_machine_has_is_skipped_unrun(course, monkeypatch):
    loaded, exercise = needing_two_gpus(course)
    monkeypatch.setattr(grading, "gpu_count", lambda: 1)
    [result] = grading.grade(BuildTree.standard(loaded, SOLUTION), [exercise], log=lambda _: None)
    assert result.outcome.status == "skipped"
    assert result.outcome.detail == ["needs 2 GPUs, this machine has 1"]
    assert result.duration_s is None  # the checker never ran


def test_with_enough_gpus_it_runs_and_cmake_passes_the_count_to_the_checker(course, monkeypatch):
    loaded, exercise = needing_two_gpus(course)
    monkeypatch.setattr(grading, "gpu_count", lambda: 2)
    tree = BuildTree.standard(loaded, SOLUTION)
    [result] = grading.grade(tree, [exercise], log=lambda _: None)
    assert result.outcome.status == "pass"
    commands = (tree.path / "build.ninja").read_text()
    assert "COURSE_MIN_GPUS=2" in commands and "COURSE_MIN_GPUS=1" in commands


def test_check_leaves_out_what_this_machine_cannot_run_with_a_note(tmp_path, gpu, monkeypatch):
    root = make_course(tmp_path / "course")
    (root / "modules/01_fixture/module.toml").write_text(
        ONLY_TODO_MANIFEST.replace("min_sm = 75", "min_sm = 75\nmin_gpus = 2"))
    monkeypatch.setattr(grading, "gpu_count", lambda: 1)
    result = invoke(root, "check")
    assert result.exit_code == 0, result.stdout
    assert result.stdout == "course OK: 1 exercise checked\n"
    assert ("note: 01_fixture/todo (learner) not run: needs 2 GPUs, this machine has 1"
            in result.stderr)


def test_the_planted_bugs_of_an_exercise_this_machine_cannot_run_are_left_out(course, gpu,
                                                                              monkeypatch):
    manifest = course / "modules/01_fixture/module.toml"
    text = manifest.read_text()
    start = text.index('id = "mismatch"')
    manifest.write_text(text[:start] + text[start:].replace("min_sm = 75",
                                                            "min_sm = 75\nmin_gpus = 2", 1))
    monkeypatch.setattr(grading, "gpu_count", lambda: 1)
    result = invoke(course, "check", "--mutants", "--no-build", "01_fixture/mismatch")
    assert ("the planted bugs of 01_fixture/mismatch are not run: needs 2 GPUs, this machine "
            "has 1") in result.stderr
    assert "plus_instead_of_times" not in result.stdout


def test_the_gpus_are_counted_from_nvidia_smi_and_cuda_visible_devices(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-a)'\n"
                   "echo 'GPU 1: NVIDIA H200 (UUID: GPU-b)'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert tools.gpu_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert tools.gpu_count() == 1
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert tools.gpu_count() == 0
