"""grader compare: a learner's results next to the solutions', and the gradebook, on results
recorded on an H100 (fixtures/results/: `grader run 02 --solutions --json` and the results file
of that session)."""
import csv
import io
import json
from pathlib import Path

import pytest

from grader.compare import (compare, gradebook, gradebook_csv, gradebook_markdown, headline,
                            read_results)
from grader.course import load_course
from grader.errors import UserError

from .conftest import REPO, invoke

RESULTS = Path(__file__).parent / "fixtures" / "results"
SOLUTIONS_JSON = RESULTS / "run_02_solutions.json"


@pytest.fixture(scope="module")
def course():
    return load_course(REPO)


def learner_entries(tmp_path: Path) -> Path:
    """A learner: transpose at 60% of the solution's bandwidth, tiled_matmul failing, the rest
    not run."""
    entries = json.loads(SOLUTIONS_JSON.read_text())
    transpose = next(e for e in entries if e["exercise"] == "02_memory/transpose")
    for case in transpose["perf"]:
        case["value"] *= 0.6
        case["ratio"] *= 0.6
    transpose["target_met"] = False
    matmul = next(e for e in entries if e["exercise"] == "02_memory/tiled_matmul")
    matmul.update(status="fail", perf=[], target_met=None)
    path = tmp_path / "ada.json"
    path.write_text(json.dumps([transpose, matmul]))
    return path


def test_both_result_formats_are_read():
    from_json = read_results(SOLUTIONS_JSON)
    from_state = read_results(RESULTS / "results.json", "solution")
    assert set(from_json) == set(from_state) == {
        "02_memory/reduce_shared", "02_memory/reduce_warp", "02_memory/transpose",
        "02_memory/tiled_matmul"}


def test_a_file_of_another_shape_is_one_line(tmp_path):
    other = tmp_path / "x.json"
    other.write_text('{"a": 1}')
    with pytest.raises(UserError, match="neither `grader run --json` output"):
        read_results(other)


def test_the_headline_is_the_case_timed_against_the_manifests_baseline(course):
    [transpose] = [e for e in course.exercises if e.key == "02_memory/transpose"]
    entry = read_results(SOLUTIONS_JSON)["02_memory/transpose"]
    entry["perf"].reverse()  # the naive case first: still the copy case is the headline
    assert headline(entry, transpose).baseline == "copy"


def test_the_learner_is_shown_against_the_solution(course, tmp_path):
    rows = {row.exercise: row for row in compare(course, read_results(learner_entries(tmp_path)),
                                                 read_results(SOLUTIONS_JSON))}
    transpose = rows["02_memory/transpose"]
    assert (transpose.learner_value, transpose.solution_value) == ("1681.2 GB/s", "2802.0 GB/s")
    assert transpose.percent_of_solution == "60%"
    matmul = rows["02_memory/tiled_matmul"]
    assert (matmul.learner_status, matmul.percent_of_solution) == ("fail", "-")
    assert rows["02_memory/reduce_warp"].learner_status == "not run"
    assert "01_basics/vector_add" not in rows  # run by neither


def test_the_gradebook_has_a_row_per_learner_in_csv_and_markdown(course, tmp_path):
    learners = {"ada": read_results(learner_entries(tmp_path)),
                "solutions": read_results(SOLUTIONS_JSON)}
    exercises, book = gradebook(course, learners)
    assert [e.id for e in exercises] == ["reduce_shared", "reduce_warp", "transpose",
                                        "tiled_matmul"]
    rows = list(csv.DictReader(io.StringIO(gradebook_csv(exercises, book))))
    ada, solutions = rows
    assert (ada["learner"], ada["passed"], ada["targets met"]) == ("ada", "1", "0")
    assert ada["02_memory/transpose % of baseline"] == "55.5"
    assert ada["02_memory/tiled_matmul status"] == "fail"
    assert ada["02_memory/reduce_warp status"] == "not run"
    assert (solutions["passed"], solutions["targets met"]) == ("4", "1")
    markdown = gradebook_markdown(exercises, book)
    assert "| ada | 1/4 | 0 | not run | not run | pass 55.5% | fail |" in markdown
    assert "| solutions | 4/4 | 1 | pass 56.6% | pass 99.2% | pass 92.5% ✓ | pass 34.2% |" \
        in markdown


def test_the_commands(tmp_path):
    ada = learner_entries(tmp_path)
    run = invoke(REPO, "compare", str(ada), "--against", str(SOLUTIONS_JSON))
    assert run.exit_code == 0, run.stderr
    assert "02_memory/transpose" in run.stdout and "60%" in run.stdout
    out = tmp_path / "book"
    run = invoke(REPO, "compare", "--gradebook", str(ada), "--gradebook", str(SOLUTIONS_JSON),
                 "--out", str(out))
    assert run.exit_code == 0, run.stderr
    assert "gradebook of 2 learners, 4 exercises" in run.stdout
    assert (out / "gradebook.csv").is_file() and (out / "gradebook.md").is_file()


def test_compare_without_solution_results_says_how_to_make_them(course_copy):
    run = invoke(course_copy, "compare", str(SOLUTIONS_JSON))
    assert run.exit_code == 2
    assert "grader run all --solutions" in run.stderr


@pytest.fixture
def course_copy(course, tmp_path):
    """An empty folder that is a course root (no results of its own)."""
    root = tmp_path / "course"
    (root / "modules").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("")
    return root
