"""grader report and the roofline: the roofs measured by the course's own runs, each exercise's
place and % of roofline, the page in Markdown and HTML, the picture, and a module's ladder
plugging in. Results recorded on an H100 (fixtures/results/)."""
import json
import types
from pathlib import Path

import pytest

from grader import learner_report, roofline
from grader.course import load_course
from grader.results import PerfCase

from .conftest import REPO, invoke

RESULTS = Path(__file__).parent / "fixtures" / "results"


@pytest.fixture(scope="module")
def course():
    return load_course(REPO)


@pytest.fixture(scope="module")
def entries():
    return json.loads((RESULTS / "results.json").read_text())["solution"]


def exercise(course, key):
    return next(e for e in course.exercises if e.key == key)


def case(metric, value, baseline="copy", baseline_value=3000.0):
    return PerfCase("c", metric, value, baseline, baseline_value, value / baseline_value)


def test_the_roofs_are_the_best_copy_and_cublas_figures_of_the_runs(entries):
    roofs = roofline.measured_roofs([c for e in entries.values()
                                     for c in learner_report.cases_of(e)])
    assert roofs.copy_gb_s == pytest.approx(3068.25)
    assert roofs.sgemm_tflop_s == pytest.approx(51.6241)
    assert roofs.ridge == pytest.approx(51.6241e12 / 3068.25e9)  # about 16.8 FLOP/byte


def test_grader_gpus_figures_add_the_peak_on_paper_and_stand_in_for_a_missing_copy():
    from grader import gpu_table
    h100 = gpu_table.parse((Path(__file__).parent / "data/gpu_table_h100.txt").read_text())
    sgemm_only = [case("TFLOP/s", 17.0, "cublas_sgemm", 50.0)]
    roofs = roofline.measured_roofs(sgemm_only, h100)
    assert roofs.paper_tflop_s == pytest.approx(66.9, abs=0.05)  # 132 x 128 x 2 x 1.98 GHz
    assert roofs.copy_gb_s == pytest.approx(2932.8, abs=0.1)  # grader gpu's own copy
    assert roofline.measured_roofs([case("GB/s", 2800.0)], h100).copy_gb_s == 3000.0  # results first


def test_a_memory_bound_case_is_judged_against_the_copy_bandwidth():
    roofs = roofline.Roofs(copy_gb_s=300.0, sgemm_tflop_s=4.0)  # a T4-like GPU
    assert roofline.percent_of_roofline(case("GB/s", 270.0), 0.083, roofs) == pytest.approx(90)
    # No intensity in the manifest: a GB/s figure is still judged against the copy.
    assert roofline.percent_of_roofline(case("GB/s", 150.0), None, roofs) == pytest.approx(50)


def test_a_compute_bound_case_is_judged_against_cublas():
    roofs = roofline.Roofs(copy_gb_s=300.0, sgemm_tflop_s=4.0)
    sgemm = case("TFLOP/s", 2.0, "cublas_sgemm", 4.0)
    assert roofline.percent_of_roofline(sgemm, 683, roofs) == pytest.approx(50)
    # Below the ridge (13.3 FLOP/byte here) the memory roof is the lower one.
    assert roofline.percent_of_roofline(sgemm, 4.0, roofs) == pytest.approx(
        100 * 2e12 / (4.0 * 300e9))
    assert roofline.percent_of_roofline(sgemm, None, roofline.Roofs(None, None)) is None


def test_a_tensor_core_case_is_judged_against_cublas_bf16():
    cases = [case("TFLOP/s", 40.0, "cublas_sgemm", 50.0),
             case("TFLOP/s", 500.0, "cublas_gemm_bf16", 700.0),
             case("TFLOP/s", 200.0, "cublas_gemm_bf16_sweep", 400.0)]
    roofs = roofline.measured_roofs(cases)
    assert (roofs.sgemm_tflop_s, roofs.tensor_tflop_s) == (50.0, 700.0)
    assert roofline.percent_of_roofline(cases[1], 1024, roofs) == pytest.approx(500 / 7)
    assert roofline.percent_of_roofline(cases[0], 683, roofs) == pytest.approx(80)
    # Any bf16 library's case is tensor-core work (module 07's attention against cuDNN).
    attention = case("TFLOP/s", 350.0, "cudnn_attention_bf16", 680.0)
    assert roofline.percent_of_roofline(attention, 2048, roofs) == pytest.approx(50)
    # Without a tensor roof measured, a tensor-core case has none (not the SGEMM one).
    assert roofline.percent_of_roofline(cases[1], None, roofline.Roofs(3000.0, 50.0)) is None


def test_on_a_t4_the_tensor_roof_is_cublas_fp16():
    # A build for sm_75 times the tensor-core rungs against cuBLAS in fp16 (a T4 has no bf16).
    cases = [case("TFLOP/s", 20.0, "cublas_gemm_fp16", 40.0),
             case("TFLOP/s", 10.0, "cublas_attention_fp16", 30.0)]
    roofs = roofline.measured_roofs(cases)
    assert (roofs.tensor_tflop_s, roofs.tensor_label) == (40.0, "cuBLAS fp16")
    assert roofline.is_tensor_core(cases[1])
    assert roofline.percent_of_roofline(cases[0], 1024, roofs) == pytest.approx(50)
    assert roofline.measured_roofs(cases[:0]).tensor_label == "cuBLAS bf16"


def test_an_exercise_is_placed_by_its_manifests_intensity(course):
    roofs = roofline.Roofs(3000.0, 50.0)
    warp = roofline.place(exercise(course, "02_memory/reduce_warp"), case("GB/s", 3000.0), roofs)
    assert (warp.intensity, warp.flop_s) == (0.25, pytest.approx(750e9))
    matmul = roofline.place(exercise(course, "02_memory/tiled_matmul"),
                            case("TFLOP/s", 17.0, "cublas_sgemm", 50.0), roofs)
    assert matmul.flop_s == pytest.approx(17e12) and matmul.percent_of_roofline == pytest.approx(34)
    transpose = roofline.place(exercise(course, "02_memory/transpose"), case("GB/s", 2800.0), roofs)
    assert transpose.flop_s == 0  # no arithmetic: judged, not drawn


def test_the_report_has_the_module_table_and_the_roofline(course, entries, tmp_path):
    modules = [m for m in course.modules if m.name == "02_memory"]
    sections = learner_report.build_report(course, modules, entries, "NVIDIA H100 80GB HBM3",
                                           tmp_path, plots=False)
    table, roof = sections
    rows = {row[0]: row for row in table.rows if row[0]}
    assert rows["transpose"][1:5] == ["pass", "16384x16384", "2802.0 GB/s", "copy 92.5%"]
    assert rows["transpose"][5] == "91%"  # 2802 of the best copy, 3068 GB/s
    assert rows["tiled_matmul"][5] == "34%"
    assert "cuBLAS SGEMM at 51.6 TFLOP/s" in roof.paragraphs[0]
    assert learner_report.INSTALL_PLOTS in roof.paragraphs and roof.images == []
    markdown = learner_report.render(sections, "Results", html=False)
    assert "| transpose | pass | 16384x16384 | 2802.0 GB/s | copy 92.5% | 91% | met (>= 90%) |" \
        in markdown
    html = learner_report.render(sections, "Results", html=True)
    assert "<td>tiled_matmul</td>" in html and "<h2>Roofline of NVIDIA H100 80GB HBM3</h2>" in html


def test_the_roofline_picture_is_drawn_with_matplotlib(course, entries, tmp_path):
    pytest.importorskip("matplotlib")
    modules = [m for m in course.modules if m.name == "02_memory"]
    sections = learner_report.build_report(course, modules, entries, "H100", tmp_path,
                                           plots=True)
    assert sections[1].images == [learner_report.ROOFLINE_IMAGE]
    assert (tmp_path / learner_report.ROOFLINE_IMAGE).read_bytes()[:4] == b"\x89PNG"


def fake_ladder(calls: list):
    """grader.ladder's interface (module 04's SGEMM ladder): the modules that have one, their
    rungs from the results, the table, the plot."""
    from rich.table import Table

    def read_ladder(course_, module, entries_):
        calls.append(("read", module))
        return [types.SimpleNamespace(points=(1,))]

    def ladder_table(module, rungs):
        table = Table("rung", "4096")
        table.add_row("sgemm_naive", "6.8 (14%)")
        return table

    def plot_ladder(module, rungs, path):
        calls.append(("plot", path.name))
        path.write_bytes(b"\x89PNG")
    return types.SimpleNamespace(LADDERS={"02_memory": ()}, read_ladder=read_ladder,
                                 ladder_table=ladder_table, plot_ladder=plot_ladder)


def test_a_modules_ladder_plugs_in(course, entries, tmp_path, monkeypatch):
    calls = []
    fake = fake_ladder(calls)
    monkeypatch.setattr(learner_report, "ladder", fake)
    modules = [m for m in course.modules if m.name in ("01_basics", "02_memory")]
    sections = learner_report.build_report(course, modules, entries, "H100", tmp_path,
                                           plots=True)
    ladder = sections[-1]
    assert calls == [("read", "02_memory"), ("plot", "02_memory_ladder.png")]
    assert ladder.title == "02_memory: the ladder" and ladder.images == ["02_memory_ladder.png"]
    assert "sgemm_naive" in ladder.preformatted and "6.8 (14%)" in ladder.preformatted
    markdown = learner_report.render(sections, "t", html=False)
    assert "```\n" + ladder.preformatted + "\n```" in markdown
    assert "![02_memory: the ladder](02_memory_ladder.png)" in markdown


def test_the_command_writes_the_report_beside_its_picture(tmp_path):
    root = tmp_path / "course"
    (root / ".grader").mkdir(parents=True)
    (root / "modules").symlink_to(REPO / "modules")
    (root / "CMakeLists.txt").write_text("")
    (root / ".grader/results.json").write_text((RESULTS / "results.json").read_text())
    run = invoke(root, "report", "02", "--solutions", "--html")
    assert run.exit_code == 0, run.stderr
    page = (root / "build/report/report.html").read_text()
    assert "02_memory: Memory" in page
    run = invoke(root, "report", "01")
    assert run.exit_code == 2 and "no learner results yet" in run.stderr


def test_the_report_names_the_gpu_the_results_were_measured_on():
    # Without the GPU at hand (a report made later, elsewhere), the checkers' own words name it.
    entries = {"01_basics/vector_add": {"device": "NVIDIA H100 80GB HBM3"},
               "01_basics/saxpy_vec4": {"device": "", "best": {"device": "NVIDIA H100 80GB HBM3"}},
               "01_basics/hello_threads": {"device": "Tesla T4"}}
    assert learner_report.measured_on(entries) == "NVIDIA H100 80GB HBM3"
    assert learner_report.measured_on({}) == "the GPU these results were measured on"
