"""The results file and atomic writes."""
from datetime import datetime, timezone

import pytest

from grader.course import load_course
from grader.errors import UserError
from grader.results import FAIL, PASS, LEARNER, Outcome, PerfCase, Result
from grader.state import atomic_write_text, load_results, record_results

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def result(course_root, status, ratio=None) -> Result:
    exercise = load_course(course_root).exercises[0]
    perf = [PerfCase("n", "GB/s", 100 * ratio, "copy", 100.0, ratio)] if ratio else []
    return Result(exercise, LEARNER, Outcome(status, perf=perf), "build/learner/bin/x", 0.1)


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "file.md"
    atomic_write_text(path, "one")
    atomic_write_text(path, "two")
    assert path.read_text() == "two" and [p.name for p in path.parent.iterdir()] == ["file.md"]


def test_results_keep_the_last_run_and_the_best_pass(course):
    record_results(course, [result(course, PASS, ratio=0.9)], NOW)
    record_results(course, [result(course, PASS, ratio=0.7)], NOW)
    stored = record_results(course, [result(course, FAIL)], NOW)
    entry = stored[LEARNER]["01_fixture/passes"]
    assert entry["status"] == FAIL and entry["timestamp"] == "2026-03-01T12:00:00+00:00"
    assert entry["best"]["perf"][0]["ratio"] == 0.9
    assert load_results(course) == stored


def test_a_corrupt_results_file_is_one_clear_error(course):
    (course / ".grader").mkdir()
    (course / ".grader/results.json").write_text("{not json")
    with pytest.raises(UserError, match="results.json is not valid JSON: delete it"):
        load_results(course)
