"""notebooks/free_gpu.ipynb and its runner, dev/run_notebook.py. The committed notebook is stripped
and keeps to what the runner supports; the runner runs a notebook's cells in one namespace, shell
lines with their {expressions} through the shell, each cell's output under its header, and stops
at the first failing cell, naming it. (The notebook itself runs on a GPU machine, through the
runner: CONTRIBUTING.md, "The notebook".)"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

NOTEBOOK = REPO / "notebooks" / "free_gpu.ipynb"
RUNNER = REPO / "dev" / "run_notebook.py"
_spec = importlib.util.spec_from_file_location("run_notebook", RUNNER)
run_notebook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_notebook)


def write_notebook(folder: Path, *cells: tuple[str, str]) -> Path:
    """A notebook of (cell_type, source) cells, as Jupyter writes them."""
    path = folder / "fixture.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": kind, "metadata": {}, "source": source.splitlines(True),
         **({"execution_count": None, "outputs": []} if kind == "code" else {})}
        for kind, source in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def execute(notebook: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUNNER), str(notebook), *args],
                          capture_output=True, text=True, cwd=notebook.parent,
                          env={**os.environ, **(env or {})}, timeout=60)


def in_order(text: str, *parts: str) -> bool:
    at = 0
    for part in parts:
        at = text.find(part, at)
        if at < 0:
            return False
        at += len(part)
    return True


# ---- the committed notebook ----

def test_the_notebook_is_valid_and_asks_for_a_gpu():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    assert notebook.metadata["accelerator"] == "GPU"
    assert "T4" in notebook.cells[0].source


def test_the_committed_notebook_is_stripped():
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert code
    for cell in code:
        assert cell["outputs"] == [] and cell["execution_count"] is None, (
            f"{cell['source'][:1]}: clear the notebook's outputs before committing (Jupyter's "
            "Clear all outputs)")


def test_every_cell_of_the_notebook_parses_for_the_runner():
    cells = run_notebook.read_cells(NOTEBOOK)
    shell_lines = [line for cell in cells for line in cell.source.splitlines()
                   if line.lstrip().startswith("!")]
    assert len(shell_lines) >= 10
    for cell in cells:
        run_notebook.compile_cell(cell)  # raises NotebookError where the runner would refuse it


def test_it_sets_up_the_course_grades_profiles_runs_the_tensor_cores_and_trains():
    source = "\n".join(cell.source for cell in run_notebook.read_cells(NOTEBOOK))
    for command in ('"git", "clone"', "-m grader doctor", "-m grader run 01 ",
                    "-m grader profile 02/transpose --solutions", "-m grader report 01",
                    "-m grader run 05 ", "-m grader run 05/mma_gemm --solutions",
                    "-m grader run 07 ", "-m grader run 07/flash_tc --solutions",
                    "trainer/prepare_data.py", "ninja -C build/learner train_gpt",
                    "train_gpt -m small"):
        assert command in source, command
    assert 'os.environ.get("COURSE_DIR"' in source  # a course already there is not cloned



def test_the_acceptance_scripts_cell_numbers_are_the_notebooks_sections():
    """dev/accept_notebook.sh selects cells by number: 2 and 3 set up, 5 configures the grader's
    tree, 1-8 end with the report, 9-11 are modules 05 and 07 and the trainer."""
    script = (REPO / "dev" / "accept_notebook.sh").read_text()
    for selection in ("a) cells=1-8 ", "b) cells=2,3,9-10 ", "c) cells=2,3,11 ", "cells=2,3,5,11"):
        assert selection in script, selection
    titles = {cell.number: cell.title for cell in run_notebook.read_cells(NOTEBOOK)}
    assert len(titles) == 11
    for number, words in {2: "The course", 3: "Install", 5: "Grade module 01", 8: "report",
                          9: "module 05", 10: "module 07", 11: "Train"}.items():
        assert words in titles[number], (number, titles[number])

# ---- the runner ----

def test_cells_share_a_namespace_and_their_output_comes_in_order(tmp_path):
    notebook = write_notebook(
        tmp_path,
        ("markdown", "# Setup\n\nsome text"),
        ("code", 'import sys\nname = "world"\nprint("python first")\n'
                 '!echo "hello {name}" {{braces}} {len(name) + 1}\nprint("python after")'),
        ("markdown", "## 2. Second"),
        ("code", "if name:\n    !echo indented\n"
                 "!{sys.executable} -c \"print('from a child python')\""))
    run = execute(notebook)
    assert run.returncode == 0, run.stderr
    assert in_order(run.stdout, "=== cell 1/2: Setup", "python first",
                    '$ echo "hello world" {braces} 6', "hello world {braces} 6", "python after",
                    "--- cell 1 done in", "=== cell 2/2: 2. Second", "$ echo indented",
                    "indented", "from a child python", "--- cell 2 done in",
                    "run_notebook: 2 cells ran in")


def test_a_failing_command_stops_the_run_and_is_named(tmp_path):
    notebook = write_notebook(
        tmp_path,
        ("code", "print('first cell')"),
        ("markdown", "## 3. Grade"),
        ("code", "print('before the failure')\n!sh -c 'exit 1' || test $? -eq 1\n"
                 "!sh -c 'exit 3'\nprint('after the failure')"),
        ("code", "print('never reached')"))
    run = execute(notebook)
    assert run.returncode == 1
    assert in_order(run.stdout, "first cell", "before the failure", "$ sh -c 'exit 1' || test")
    assert "after the failure" not in run.stdout and "never reached" not in run.stdout
    assert run.stderr.strip().splitlines()[-1] == (
        "run_notebook: cell 2 (3. Grade) failed: `sh -c 'exit 3'` exited with status 3")


def test_an_exception_is_shown_with_the_cells_line(tmp_path):
    notebook = write_notebook(tmp_path, ("code", "x = 1\nraise ValueError('bad input')"))
    run = execute(notebook)
    assert run.returncode == 1
    assert in_order(run.stderr, 'File "<cell 1>", line 2', "raise ValueError('bad input')",
                    "run_notebook: cell 1 (x = 1) failed: ValueError: bad input")


def test_an_expression_that_fails_names_its_shell_line(tmp_path):
    notebook = write_notebook(tmp_path, ("code", "!echo {undefined_name}"))
    run = execute(notebook)
    assert run.returncode == 1 and "$ echo" not in run.stdout
    assert run.stderr.strip().splitlines()[-1] == (
        "run_notebook: cell 1 (!echo {undefined_name}) failed: `echo {undefined_name}`: "
        "NameError: name 'undefined_name' is not defined")


def test_the_cells_see_the_environment_the_folder_and_each_others_changes(tmp_path):
    (tmp_path / "inner").mkdir()
    notebook = write_notebook(
        tmp_path,
        ("code", "import os\nprint('given', os.environ['NOTEBOOK_VALUE'])\n"
                 "os.environ['NOTEBOOK_SET'] = 'set by a cell'\nos.chdir('inner')"),
        ("code", "!printenv NOTEBOOK_SET\n!pwd"))
    run = execute(notebook, env={"NOTEBOOK_VALUE": "42"})
    assert run.returncode == 0, run.stderr
    assert in_order(run.stdout, "given 42", "set by a cell", str((tmp_path / "inner").resolve()))


def test_cells_selects_and_lists(tmp_path):
    notebook = write_notebook(tmp_path, *[("code", f"print('cell {n} ran')") for n in range(1, 6)])
    run = execute(notebook, "--cells", "2,4-")
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stdout.splitlines() if line.endswith(" ran")] == [
        "cell 2 ran", "cell 4 ran", "cell 5 ran"]
    assert execute(notebook, "--list").stdout.splitlines()[0] == "cell 1: print('cell 1 ran')"
    wrong = execute(notebook, "--cells", "3-9")
    assert wrong.returncode == 2 and "the notebook has code cells 1 to 5" in wrong.stderr


@pytest.mark.parametrize("source, message", [
    ("%pip install numpy", "cell 2, line 1: IPython magics are not supported"),
    ("!!ls", "cell 2, line 1: a shell line is `!command` on one line"),
    ("!echo $HOME", "`$H` (IPython expands it from Python variables)"),
    ("!echo {", "an unclosed or empty {expression}"),
    ("files = !ls", "cell 2, line 1: invalid syntax"),
])
def test_what_the_runner_does_not_support_is_refused_before_anything_runs(tmp_path, source,
                                                                          message):
    notebook = write_notebook(tmp_path, ("code", "print('ran')"), ("code", source))
    run = execute(notebook)
    assert run.returncode == 2 and message in run.stderr, run.stderr
    assert "ran" not in run.stdout


def test_expand_evaluates_expressions_and_leaves_the_shell_its_own():
    assert run_notebook.expand("a {x * 2} {{b}} $? $(date) {y}", {"x": 5}, {"y": "z"}) == \
        "a 10 {b} $? $(date) z"

