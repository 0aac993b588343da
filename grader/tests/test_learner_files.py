"""The learner's files and the grader's state (issue 11, items 8, 10, 11): never lost, never
rewritten for nothing, consistent under concurrent runs, and bad input is one line."""
import json
import re
import shutil
import stat
import subprocess
import sys

import pytest
from filelock import FileLock

from grader.progress import STATUS_MARKERS
from grader.tests.conftest import REPO, invoke

BEGIN, END = STATUS_MARKERS


def run_passes(root):
    result = invoke(root, "run", "01/passes")
    assert result.exit_code == 0, result.stdout + result.stderr
    return result


# --- item 10: mode, symlinks, line endings, unchanged files, text inside the markers ---------

def test_the_files_mode_is_kept(built_course):
    progress = built_course.root / "progress.md"
    progress.chmod(0o640)
    run_passes(built_course.root)
    assert stat.S_IMODE(progress.stat().st_mode) == 0o640


def test_a_read_only_file_is_left_alone_with_a_note(built_course):
    progress = built_course.root / "progress.md"
    before = progress.read_text()
    progress.chmod(0o444)
    try:
        result = run_passes(built_course.root)
        assert progress.read_text() == before
        assert "note: progress.md was not updated: it is read-only" in result.stderr
    finally:
        progress.chmod(0o644)


def test_a_symlink_is_followed_and_stays_a_symlink(built_course, tmp_path):
    root = built_course.root
    target = tmp_path / "my-notes" / "progress.md"
    target.parent.mkdir()
    target.write_text(f"# Mine\n{BEGIN}\nold\n{END}\nkept\n")
    progress = root / "progress.md"
    progress.unlink()
    progress.symlink_to(target)
    try:
        run_passes(root)
        assert progress.is_symlink() and progress.resolve() == target
        assert "| `passes` | pass |" in target.read_text()
        assert target.read_text().startswith("# Mine\n") and target.read_text().endswith("kept\n")
    finally:
        progress.unlink()


def test_crlf_line_endings_are_kept(built_course):
    progress = built_course.root / "progress.md"
    progress.write_bytes(f"# Mine\r\n\r\n{BEGIN}\r\nold\r\n{END}\r\n## Log\r\nday 1\r\n".encode())
    run_passes(built_course.root)
    data = progress.read_bytes()
    assert b"| `passes` | pass |" in data
    assert data.count(b"\n") == data.count(b"\r\n")  # no line lost its CR
    assert data.endswith(b"## Log\r\nday 1\r\n")


def test_an_unchanged_file_is_not_rewritten(built_course):
    run_passes(built_course.root)
    roadmap = built_course.root / "ROADMAP.md"
    before = roadmap.stat()
    run_passes(built_course.root)
    after = roadmap.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_text_typed_inside_the_markers_is_kept_with_a_note(built_course):
    root = built_course.root
    run_passes(root)
    progress = root / "progress.md"
    text = progress.read_text()
    progress.write_text(text.replace(END, f"my note: ceil_div, not n / threads\n{END}"))
    result = run_passes(root)
    assert "my note" not in progress.read_text()
    assert re.search(r"note: progress\.md: the text between the grader's markers was not what the "
                     r"grader wrote there; .* a copy of what was there is in "
                     r"\.grader/kept-progress\.md", result.stderr), result.stderr
    assert "my note: ceil_div, not n / threads" in (root / ".grader/kept-progress.md").read_text()
    # Once kept, the next run has nothing more to say.
    assert "kept-progress.md" not in run_passes(root).stderr


# --- item 11: concurrent runs ----------------------------------------------------------------

def test_a_second_grader_waits_for_the_results_and_the_learner_files(built_course):
    root = built_course.root
    results = root / ".grader/results.json"
    before = results.read_bytes()
    with FileLock(root / ".grader/lock"):
        process = subprocess.Popen([sys.executable, "-m", "grader", "--root", str(root), "run",
                                    "01/passes"], cwd=REPO, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=4)
        assert results.read_bytes() == before
    assert process.wait(timeout=60) == 0
    assert results.read_bytes() != before


# --- item 8: bad input is one line, exit 2, nothing recorded ---------------------------------

def assert_one_line(result, *fragments):
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    for fragment in fragments:
        assert fragment in line, line


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-3"])
def test_a_timeout_that_is_not_a_positive_number_is_one_line(course, value):
    assert_one_line(invoke(course, "run", "01/passes", "--timeout", value),
                    "--timeout must be a number of seconds above 0", value)
    assert not (course / "build").exists()


def test_a_hint_for_a_module_with_a_slash_is_one_line(course):
    assert_one_line(invoke(course, "hint", "01/"), "'01/' is not one exercise")
    assert not (course / ".grader/hints.json").exists()


def test_an_empty_course_is_one_line(course):
    shutil.rmtree(course / "modules/01_fixture")
    assert_one_line(invoke(course, "run", "all"), "has no exercises")
    assert_one_line(invoke(course, "run", "01"), "has no exercises")


def test_a_progress_md_that_is_not_utf8_is_one_line_before_anything_is_built(course):
    (course / "progress.md").write_bytes("# Journal de l'\xe9t\xe9\n".encode("latin-1"))
    assert_one_line(invoke(course, "run", "01/passes"), "progress.md is not UTF-8 text")
    assert not (course / "build").exists() and not (course / ".grader/results.json").exists()


@pytest.mark.parametrize("content", [
    '[]', '{"learner": 5}', '{"learner": {"01_fixture/passes": 3}}',
    '{"learner": {"01_fixture/passes": {"status": "pass"}}}', '"\xff"'])
def test_a_results_file_of_the_wrong_shape_is_one_line(course, content):
    (course / ".grader").mkdir()
    (course / ".grader/results.json").write_text(content, encoding="latin-1")
    for command in (["run", "01/passes"], ["list"]):
        assert_one_line(invoke(course, *command), ".grader/results.json",
                        "delete it to start over")
    assert not (course / "build").exists()


@pytest.mark.parametrize("content", ['[1]', '{"01_fixture/passes": "2"}'])
def test_a_hints_file_of_the_wrong_shape_is_one_line(course, content):
    (course / ".grader").mkdir()
    (course / ".grader/hints.json").write_text(content)
    assert_one_line(invoke(course, "hint", "01/passes"), ".grader/hints.json",
                    "delete it to start over")


def test_a_stub_that_is_not_utf8_still_builds(course):
    stub = course / "modules/01_fixture/passes.cpp"
    stub.write_bytes(stub.read_bytes() + "// \xe9t\xe9\n".encode("latin-1"))
    assert invoke(course, "run", "01/passes").exit_code == 0

