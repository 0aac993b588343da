"""Shared fixtures: copies of the fixture mini-course, built once per session, and a CLI runner."""
import inspect
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader import cli

FIXTURE_COURSE = Path(__file__).parent / "fixture_course"
REPO = Path(__file__).resolve().parents[2]
# The real course's files the fixture course builds with.
REAL_FILES = (Path("cmake/Course.cmake"), Path("common/include/course/todo.h"),
              Path("common/src/report_channel.h"), Path("common/src/missing_library_test.cpp"))
SKIP_REASON = "no usable CUDA device (simulated by the fixture)"
# The no_gpu checker skips when this is in the grader's environment.
SKIP_ENV = {"FIXTURE_SKIP_REASON": SKIP_REASON}


@dataclass(frozen=True)
class Invocation:
    exit_code: int
    stdout: str
    stderr: str


def invoke(root: Path | None, *args: str, env: dict | None = None) -> Invocation:
    """Runs `grader [--root root] args...` in this process."""
    # click < 8.2 mixes stderr into stdout unless told not to; 8.2 keeps them apart by itself.
    old_click = "mix_stderr" in inspect.signature(CliRunner).parameters
    separate = {"mix_stderr": False} if old_click else {}
    options = ["--root", str(root)] if root else []
    result = CliRunner(**separate).invoke(cli.main, [*options, *args], env=env,
                                           catch_exceptions=False)
    return Invocation(result.exit_code, result.stdout, result.stderr)


def make_course(destination: Path) -> Path:
    """A fresh copy of the fixture course, with the real course's files it builds with."""
    shutil.copytree(FIXTURE_COURSE, destination)
    for path in REAL_FILES:
        (destination / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / path, destination / path)
    return destination


@pytest.fixture
def course(tmp_path) -> Path:
    """An unbuilt copy of the fixture course, private to the test."""
    return make_course(tmp_path / "course")


@dataclass(frozen=True)
class BuiltCourse:
    root: Path
    learner: Invocation  # `grader run all` (learner variant, FIXTURE_SKIP_REASON set)
    learner_json: Invocation  # the same with --json
    solutions: Invocation  # `grader run all --solutions`


@pytest.fixture(scope="session")
def built_course(tmp_path_factory) -> BuiltCourse:
    """The fixture course, built and graded once for the session (both variants, no GPU)."""
    root = make_course(tmp_path_factory.mktemp("built") / "course")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "gpu_visible", lambda: False)
        learner = invoke(root, "run", "all", env=SKIP_ENV)
        learner_json = invoke(root, "run", "all", "--json", env=SKIP_ENV)
        solutions = invoke(root, "run", "all", "--solutions")
    return BuiltCourse(root, learner, learner_json, solutions)


@pytest.fixture
def gpu(monkeypatch):
    """Makes the grader believe a GPU is visible (the fixture's checkers need none)."""
    monkeypatch.setattr(cli, "gpu_visible", lambda: True)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(cli, "gpu_visible", lambda: False)
