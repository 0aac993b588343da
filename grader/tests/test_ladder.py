"""`grader report 04`: the SGEMM ladder from recorded results (no build, no GPU)."""
import json
import shutil
import sys

import pytest

from grader.course import load_course
from grader.ladder import baseline_curve, read_ladder
from grader.tests.conftest import REPO, invoke

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def case(size: int, value: float, baseline_value: float, baseline: str,
         name_key: str = "case") -> dict:
    """A timed case as `grader run` saves it (its name under "case", or "label" in newer
    results)."""
    return {name_key: f"{size}x{size}x{size}", "metric": "TFLOP/s", "value": value,
            "baseline": baseline, "baseline_value": baseline_value,
            "ratio": value / baseline_value}


def entry(status: str, *perf: dict) -> dict:
    return {"status": status, "perf": list(perf), "timestamp": "2026-11-24T10:00:00+00:00"}


RESULTS = {
    "learner": {
        "01_basics/naive_matmul": entry("pass", case(2048, 6.8, 50.0, "cublas_sgemm")),
        "04_sgemm/sgemm_coalesced": entry(
            "pass", case(4096, 6.0, 48.0, "cublas_sgemm"),
            case(256, 1.0, 4.0, "cublas_sgemm_sweep"), case(2048, 6.5, 52.0, "cublas_sgemm_sweep"),
            {**case(64, 9.0, 9.0, "cublas_sgemm"), "case": "4096x64x4096"}),
        "04_sgemm/sgemm_smem": entry(
            "pass", case(4096, 9.0, 50.0, "cublas_sgemm", "label"),
            case(256, 1.5, 6.0, "cublas_sgemm_sweep", "label"),
            case(2048, 9.5, 50.0, "cublas_sgemm_sweep", "label")),
        "04_sgemm/sgemm_blocktile_1d": entry("fail", case(4096, 99.0, 50.0, "cublas_sgemm")),
    },
    "solution": {
        "04_sgemm/sgemm_vectorized": entry("pass", case(4096, 30.0, 49.0, "cublas_sgemm")),
    },
}


@pytest.fixture
def sgemm_course(tmp_path):
    """A course holding the real manifests of 01 and 04, and saved results; nothing built."""
    root = tmp_path / "course"
    for module in ("01_basics", "04_sgemm"):
        (root / "modules" / module).mkdir(parents=True)
        shutil.copy(REPO / "modules" / module / "module.toml", root / "modules" / module)
    (root / "CMakeLists.txt").write_text("# a course root\n")
    (root / ".grader").mkdir()
    (root / ".grader" / "results.json").write_text(json.dumps(RESULTS))
    return root


def test_the_ladder_starts_at_01s_naive_kernel_and_keeps_the_square_sizes(sgemm_course):
    rungs = read_ladder(load_course(sgemm_course), "04_sgemm", RESULTS["learner"])
    assert [rung.key for rung in rungs] == [
        "01_basics/naive_matmul", "04_sgemm/sgemm_coalesced", "04_sgemm/sgemm_smem",
        "04_sgemm/sgemm_blocktile_1d", "04_sgemm/sgemm_blocktile_2d", "04_sgemm/sgemm_vectorized"]
    naive, coalesced, smem, blocktile_1d, blocktile_2d, _ = rungs
    assert [point.size for point in naive.points] == [2048]
    # The tall-skinny 4096x64x4096 case is not a point of the ladder; sizes come out in order.
    assert [(p.size, p.value) for p in coalesced.points] == [(256, 1.0), (2048, 6.5), (4096, 6.0)]
    assert smem.points[-1].ratio == pytest.approx(0.18)
    # A rung whose last run did not pass has no figures; one that never ran says so.
    assert (blocktile_1d.status, blocktile_1d.points) == ("fail", ())
    assert (blocktile_2d.status, blocktile_2d.points) == ("-", ())


def test_the_baseline_at_each_size_is_the_median_of_the_runs_beside_the_rungs(sgemm_course):
    rungs = read_ladder(load_course(sgemm_course), "04_sgemm", RESULTS["learner"])
    assert baseline_curve(rungs) == {256: 5.0, 2048: 50.0, 4096: 49.0}


def test_report_prints_the_table_and_writes_the_plot(sgemm_course):
    pytest.importorskip("matplotlib")
    result = invoke(sgemm_course, "report", "04")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].startswith("04_sgemm: TFLOP/s (% of cuBLAS in the same run)")
    assert lines[1].split() == ["04_sgemm", "status", "256", "2048", "4096"]
    assert lines[2].split() == ["01_basics/naive_matmul", "pass", "-", "6.8", "(14%)", "-"]
    assert lines[3].split() == ["04_sgemm/sgemm_coalesced", "pass", "1.0", "(25%)", "6.5",
                                "(12%)", "6.0", "(12%)"]
    assert lines[5].split() == ["04_sgemm/sgemm_blocktile_1d", "fail", "-", "-", "-"]
    assert lines[8].split() == ["cuBLAS", "5.0", "50.0", "49.0"]
    plot = sgemm_course / ".grader" / "04_sgemm_ladder.png"
    assert lines[-1] == f"plot: {plot}"
    assert plot.read_bytes().startswith(PNG_MAGIC)


def test_report_of_the_solutions_reads_their_results(sgemm_course, tmp_path):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "elsewhere" / "ladder.png"
    result = invoke(sgemm_course, "report", "04_sgemm", "--solutions", "--plot", str(plot))
    vectorized = next(line for line in result.stdout.splitlines() if "sgemm_vectorized" in line)
    assert vectorized.split() == ["04_sgemm/sgemm_vectorized", "pass", "30.0", "(61%)"]
    assert plot.read_bytes().startswith(PNG_MAGIC)


def test_without_matplotlib_the_table_and_what_to_install(sgemm_course, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib... raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    result = invoke(sgemm_course, "report", "04")
    assert result.exit_code == 0
    assert "04_sgemm/sgemm_coalesced" in result.stdout
    assert result.stdout.splitlines()[-1] == (
        "no plot: matplotlib is not installed (python3 -m pip install -e '.[plot]')")
    assert not (sgemm_course / ".grader" / "04_sgemm_ladder.png").exists()


def test_before_any_timed_run_the_report_says_how_to_get_one(sgemm_course):
    (sgemm_course / ".grader" / "results.json").unlink()
    result = invoke(sgemm_course, "report", "04")
    assert result.stdout.splitlines()[-1] == "no timed results yet: `grader run 04_sgemm` saves them"


def test_a_module_without_a_ladder_or_an_exercise_is_a_usage_error(sgemm_course):
    no_ladder = invoke(sgemm_course, "report", "01")
    assert no_ladder.exit_code == 2
    assert "01_basics has no ladder report: the modules with one are 04_sgemm" in no_ladder.stderr
    exercise = invoke(sgemm_course, "report", "04/sgemm_smem")
    assert exercise.exit_code == 2
    assert "a report is of a module" in exercise.stderr
