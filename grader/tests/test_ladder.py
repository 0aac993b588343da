"""The ladders of modules 04 and 05 (grader/ladder.py, shown by `grader report 04` and `05`) from
recorded results: no build, no GPU."""
import importlib.util
import io
import json
import shutil

import pytest
from rich.console import Console

from grader.course import load_course
from grader.ladder import baseline_curve, ladder_table, plot_ladder, read_ladder
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
# Module 05: a sixth SGEMM rung (compared with cuBLAS SGEMM, on module 04's ladder) and the
# tensor-core rungs (compared with cuBLAS bf16, on module 05's).
RESULTS_05 = {
    "05_gemm_advanced/sgemm_warptile": entry(
        "pass", case(4096, 41.0, 50.0, "cublas_sgemm"), case(2048, 38.0, 48.0, "cublas_sgemm_sweep")),
    "05_gemm_advanced/wmma_gemm": entry(
        "pass", case(4096, 150.0, 600.0, "cublas_gemm_bf16"),
        case(1024, 100.0, 400.0, "cublas_gemm_bf16_sweep")),
    "05_gemm_advanced/wgmma_gemm": entry(
        "pass", case(4096, 570.0, 600.0, "cublas_gemm_bf16"),
        case(8192, 620.0, 650.0, "cublas_gemm_bf16")),
}


def make_course(root, modules, results):
    """A course holding the real manifests of `modules`, and saved results; nothing built."""
    for module in modules:
        (root / "modules" / module).mkdir(parents=True)
        shutil.copy(REPO / "modules" / module / "module.toml", root / "modules" / module)
    (root / "CMakeLists.txt").write_text("# a course root\n")
    (root / ".grader").mkdir()
    (root / ".grader" / "results.json").write_text(json.dumps(results))
    return root


@pytest.fixture
def sgemm_course(tmp_path):
    return make_course(tmp_path / "course", ("01_basics", "04_sgemm"), RESULTS)


@pytest.fixture
def gemm_course(tmp_path):
    results = {"learner": {**RESULTS["learner"], **RESULTS_05}, "solution": RESULTS["solution"]}
    return make_course(tmp_path / "course", ("01_basics", "04_sgemm", "05_gemm_advanced"), results)


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


def table_lines(rungs) -> list[str]:
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(ladder_table("04_sgemm", rungs))
    return console.export_text().splitlines()


def test_the_table_has_a_row_per_rung_and_cublas_and_a_column_per_size(sgemm_course):
    rungs = read_ladder(load_course(sgemm_course), "04_sgemm", RESULTS["learner"])
    lines = table_lines(rungs)
    assert lines[0].startswith("04_sgemm: TFLOP/s (% of cuBLAS in the same run)")
    assert lines[1].split() == ["04_sgemm", "status", "256", "2048", "4096"]
    assert lines[2].split() == ["01_basics/naive_matmul", "pass", "-", "6.8", "(14%)", "-"]
    assert lines[3].split() == ["04_sgemm/sgemm_coalesced", "pass", "1.0", "(25%)", "6.5",
                                "(12%)", "6.0", "(12%)"]
    assert lines[5].split() == ["04_sgemm/sgemm_blocktile_1d", "fail", "-", "-", "-"]
    assert lines[8].split() == ["cuBLAS", "5.0", "50.0", "49.0"]


def test_the_plot_is_a_png(sgemm_course, tmp_path):
    pytest.importorskip("matplotlib")
    rungs = read_ladder(load_course(sgemm_course), "04_sgemm", RESULTS["learner"])
    plot_ladder("04_sgemm", rungs, tmp_path / "ladder.png")
    assert (tmp_path / "ladder.png").read_bytes().startswith(PNG_MAGIC)


def test_grader_report_shows_the_ladder_and_writes_its_plot(sgemm_course):
    result = invoke(sgemm_course, "report", "04")
    assert result.exit_code == 0, result.stderr
    assert "04_sgemm: TFLOP/s (% of cuBLAS in the same run), M = N = K" in result.stdout
    rung = next(line for line in result.stdout.splitlines() if "04_sgemm/sgemm_smem" in line)
    assert rung.split() == ["04_sgemm/sgemm_smem", "pass", "1.5", "(25%)", "9.5", "(19%)", "9.0",
                            "(18%)"]
    if importlib.util.find_spec("matplotlib"):
        plot = sgemm_course / "build" / "report" / "04_sgemm_ladder.png"
        assert plot.read_bytes().startswith(PNG_MAGIC)


def test_the_solutions_ladder_reads_their_results(sgemm_course):
    result = invoke(sgemm_course, "report", "04", "--solutions")
    vectorized = next(line for line in result.stdout.splitlines()
                      if line.startswith("04_sgemm/sgemm_vectorized"))
    assert vectorized.split() == ["04_sgemm/sgemm_vectorized", "pass", "30.0", "(61%)"]


def test_module_05s_sgemm_rung_tops_module_04s_ladder(gemm_course):
    rungs = read_ladder(load_course(gemm_course), "04_sgemm", RESULTS["learner"] | RESULTS_05)
    assert [rung.key for rung in rungs][-2:] == ["04_sgemm/sgemm_vectorized",
                                                 "05_gemm_advanced/sgemm_warptile"]
    assert [(p.size, p.value) for p in rungs[-1].points] == [(2048, 38.0), (4096, 41.0)]


def test_module_05s_ladder_is_its_tensor_core_rungs_against_cublas_bf16(gemm_course):
    rungs = read_ladder(load_course(gemm_course), "05_gemm_advanced", RESULTS_05)
    assert [rung.key for rung in rungs] == [
        "05_gemm_advanced/wmma_gemm", "05_gemm_advanced/mma_gemm",
        "05_gemm_advanced/mma_pipeline", "05_gemm_advanced/wgmma_gemm"]
    assert [(p.size, p.ratio) for p in rungs[0].points] == [(1024, 0.25), (4096, 0.25)]
    assert baseline_curve(rungs) == {1024: 400.0, 4096: 600.0, 8192: 650.0}
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(ladder_table("05_gemm_advanced", rungs))
    lines = console.export_text().splitlines()
    assert lines[0].startswith("05_gemm_advanced: TFLOP/s (% of cuBLAS bf16 in the same run)")
    assert lines[-1].split() == ["cuBLAS", "bf16", "400.0", "600.0", "650.0"]


def test_on_a_t4_module_05s_ladder_is_against_cublas_fp16(gemm_course):
    # A build for sm_75 records the tensor-core rungs against cuBLAS fp16 (a T4 has no bf16).
    results = {"05_gemm_advanced/mma_gemm": entry(
        "pass", case(4096, 10.0, 40.0, "cublas_gemm_fp16"),
        case(1024, 5.0, 20.0, "cublas_gemm_fp16_sweep"))}
    rungs = read_ladder(load_course(gemm_course), "05_gemm_advanced", results)
    assert [(p.size, p.ratio) for p in rungs[1].points] == [(1024, 0.25), (4096, 0.25)]
    console = Console(width=120, record=True, file=io.StringIO())
    console.print(ladder_table("05_gemm_advanced", rungs))
    text = console.export_text()
    assert "(% of cuBLAS fp16 in the same run)" in " ".join(text.split())  # the title may wrap
    assert text.splitlines()[-1].split() == ["cuBLAS", "fp16", "20.0", "40.0"]
