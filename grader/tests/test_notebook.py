"""notebooks/free_gpu.ipynb: a valid notebook whose cells run the course's commands, and (opt-in,
GRADER_NOTEBOOK_TEST=1, a few minutes) a run top to bottom on a copy of the course."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

nbformat = pytest.importorskip("nbformat")
NOTEBOOK = REPO / "notebooks" / "free_gpu.ipynb"
sys.path.insert(0, str(Path(__file__).parent))
import run_notebook  # noqa: E402


@pytest.fixture(scope="module")
def notebook():
    return nbformat.read(NOTEBOOK, as_version=4)


def code(notebook) -> str:
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")


def test_the_notebook_is_valid_and_asks_for_a_gpu(notebook):
    nbformat.validate(notebook)
    assert notebook.metadata["accelerator"] == "GPU"
    assert "T4" in notebook.cells[0].source


def test_it_clones_installs_checks_grades_and_profiles(notebook):
    source = code(notebook)
    for command in ("git\", \"clone", "pip\", \"install", "-m grader doctor",
                    "-m grader run 01", "-m grader profile 02/transpose --solutions",
                    "-m grader report 01"):
        assert command in source
    assert 'os.environ.get("COURSE_DIR"' in source  # a course already there is not cloned


def test_as_a_script_the_shell_lines_become_calls(notebook):
    script = run_notebook.as_script(notebook)
    compile(script, "notebook", "exec")
    assert "_shell(f'{sys.executable} -m grader run 01')" in script


@pytest.mark.skipif(os.environ.get("GRADER_NOTEBOOK_TEST") != "1",
                    reason="runs the notebook for minutes: GRADER_NOTEBOOK_TEST=1 to run it")
def test_the_notebook_runs_top_to_bottom(tmp_path):
    pytest.importorskip("nbclient")
    course = tmp_path / "course"
    shutil.copytree(REPO, course, ignore=shutil.ignore_patterns("build", ".git", ".grader"))
    run = subprocess.run([sys.executable, str(Path(__file__).parent / "run_notebook.py"),
                          str(course / "notebooks/free_gpu.ipynb")], capture_output=True,
                         text=True, env={**os.environ, "COURSE_DIR": str(course)}, timeout=1800)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "the notebook ran top to bottom" in run.stdout
    # Without a GPU the table says skipped; with one, the untouched stubs say todo.
    assert "hello_threads" in run.stdout and ("skipped" in run.stdout or "todo" in run.stdout)
