"""The target and the stretch: a target is judged on what the readable solution reaches (and on
the learner's file); the fast reference's figure is the stretch, shown beside it, and the fast
reference is judged on it (CONTRIBUTING.md, "Targets and stretch goals"). The run on the fixture
course is in test_run.py (test_solutions_judge_the_readable_on_the_target_...)."""
from dataclasses import replace

import pytest

from grader.check import _result_problems
from grader.manifest import Exercise, read_module
from grader.report import make_console, print_results
from grader.results import FAST, LEARNER, PASS, SOLUTION, Outcome, PerfCase, Result
from grader.tests.test_manifest import EXERCISE, HEADER

MMA_PIPELINE = Exercise("05_gemm_advanced", "mma_pipeline", "bf16 GEMM", "mma_pipeline.cu",
                        "tests/gemm_bf16_test.cu", 80, "TFLOP/s", "cublas_gemm_bf16", 0.40, 120.0,
                        ("a", "b"), fast_solution="mma_pipeline_fast.cu", stretch=0.45)


def timed(label: str, ratio: float, baseline: str = "cublas_gemm_bf16") -> PerfCase:
    return PerfCase(label, "TFLOP/s", 750 * ratio, baseline, 750.0, ratio)


def result(variant: str, *ratios: float, exercise: Exercise = MMA_PIPELINE) -> Result:
    cases = [timed(f"{n}^3", ratio) for n, ratio in zip((4096, 8192), ratios)]
    return Result(exercise, variant, Outcome(PASS, perf=cases), "bin/x")


def table(capsys, *results) -> list[str]:
    print_results(make_console(), list(results))
    return capsys.readouterr().out.splitlines()


def manifest_problems(tmp_path, extra: str) -> list[str]:
    module_dir = tmp_path / "01_basics"
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(HEADER + EXERCISE.format(id="a") + extra)
    return read_module(module_dir)[1]


def test_a_stretch_reads_beside_its_fast_reference(tmp_path):
    module_dir = tmp_path / "01_basics"
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(
        HEADER + EXERCISE.format(id="a") + 'fast_solution = "a_fast.cu"\nstretch = 0.95\n'
        + EXERCISE.format(id="b"))
    module, problems = read_module(module_dir)
    assert problems == []
    a, b = module.exercises
    assert (a.stretch, a.stretch_text, b.stretch) == (0.95, ">= 95%", 0.0)


@pytest.mark.parametrize("extra, problem", [
    ("stretch = 0.95\n", "a 'stretch' is the fast reference's figure: it needs a 'fast_solution'"),
    ('fast_solution = "a_fast.cu"\nstretch = 0.9\n', "'stretch' must be above the target (0.9)"),
    ('fast_solution = "a_fast.cu"\nstretch = 0.95\ncase_targets = { "x" = 0.9, "y" = 0.96 }\n',
     "'stretch' must be above the target (0.96)"),
    ('fast_solution = "a_fast.cu"\nstretch = 0.9\ncase_targets = { "x" = 0.9, "y" = 0.9 }\n',
     "'stretch' must be above the target (0.9)"),
    ('fast_solution = "a_fast.cu"\nstretch = "high"\n', "'stretch' must be a number"),
])
def test_stretch_problems_are_found(tmp_path, extra, problem):
    problems = manifest_problems(tmp_path, extra)
    assert any(problem in line for line in problems), problems


def test_a_stretch_may_equal_the_higher_of_two_case_targets(tmp_path):
    # Module 06: 90% on the short rows is the readable solution's target already; the stretch is
    # 90% on both shapes.
    text = (HEADER + EXERCISE.format(id="a").replace("target = 0.9", "target = 0.7")
            + 'fast_solution = "a_fast.cu"\nstretch = 0.9\n'
            'case_targets = { "short" = 0.9, "long" = 0.7 }\n')
    module_dir = tmp_path / "02_memory"
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(text)
    assert read_module(module_dir)[1] == []


def test_a_stretch_goes_beside_a_target(tmp_path):
    text = (HEADER + EXERCISE.format(id="a").replace("target = 0.9", "target = 0")
            + 'fast_solution = "a_fast.cu"\nstretch = 0.5\n')
    module_dir = tmp_path / "01_basics"
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(text)
    assert any("a 'stretch' goes beside a 'target'" in line for line in read_module(module_dir)[1])


def test_the_readable_solution_is_judged_on_the_target_the_stretch_beside_it(capsys):
    readable = result(SOLUTION, 0.431, 0.411)
    _, row, first, second = table(capsys, readable)
    assert row.split()[:2] == ["mma_pipeline", "(readable)"]
    assert row.split()[-5:] == ["met", "(>=", "40%;", "stretch", "45%)"]
    assert first.split()[-2:] == ["43.1%", "met"] and second.split()[-2:] == ["41.1%", "met"]
    assert (readable.target_met, readable.stretch_met, readable.goal_met) == (True, False, True)
    assert readable.to_json()["stretch"] == 0.45 and readable.to_json()["stretch_met"] is False


def test_a_learner_who_reaches_the_stretch_is_told_so(capsys):
    learner = result(LEARNER, 0.47, 0.44)
    _, row, first, second = table(capsys, learner)
    assert row.split()[-5:] == ["met", "(>=", "40%;", "stretch", "45%)"]  # one case short of it
    assert first.split()[-3:] == ["47.0%", "stretch", "met"]
    assert second.split()[-2:] == ["44.0%", "met"]
    _, row, *_ = table(capsys, result(LEARNER, 0.47, 0.46))
    assert row.split()[-4:] == ["stretch", "met", "(>=", "45%)"]
    _, row, *_ = table(capsys, result(LEARNER, 0.39, 0.46))
    assert row.split()[-6:] == ["not", "met", "(>=", "40%;", "stretch", "45%)"]


def test_the_fast_reference_is_judged_on_the_stretch(capsys):
    fast = result(FAST, 0.497, 0.476)
    _, row, first, second = table(capsys, fast)
    assert row.split()[:2] == ["mma_pipeline", "(fast)"]
    assert row.split()[-4:] == ["stretch", "met", "(>=", "45%)"]
    assert first.split()[-3:] == ["49.7%", "stretch", "met"]
    short = result(FAST, 0.497, 0.43)
    _, row, _, second = table(capsys, short)
    assert row.split()[-5:] == ["stretch", "not", "met", "(>=", "45%)"]
    assert second.split()[-4:] == ["43.0%", "stretch", "not", "met"]
    assert (short.target_met, short.goal_met) == (True, False)


def test_without_a_stretch_the_fast_reference_meets_the_target(capsys):
    exercise = replace(MMA_PIPELINE, stretch=0.0)
    fast = result(FAST, 0.497, 0.476, exercise=exercise)
    _, row, *_ = table(capsys, fast)
    assert row.split()[-3:] == ["met", "(>=", "40%)"]
    assert fast.stretch_met is None and fast.goal_met is True


def test_check_asks_the_target_of_the_readable_and_the_stretch_of_the_fast():
    assert _result_problems(result(SOLUTION, 0.431, 0.411)) == []
    assert _result_problems(result(FAST, 0.497, 0.476)) == []
    assert _result_problems(result(SOLUTION, 0.431, 0.39)) == [
        "05_gemm_advanced/mma_pipeline: the solution reaches 43.1%, 39.0% of cublas_gemm_bf16, "
        "below its target (>= 40%)"]
    assert _result_problems(result(FAST, 0.497, 0.43)) == [
        "05_gemm_advanced/mma_pipeline: the fast solution reaches 49.7%, 43.0% of "
        "cublas_gemm_bf16, below its stretch (>= 45%)"]


def test_per_case_targets_and_one_stretch(capsys):
    # flash_tc's way: the D128 cases judged, each against its own target; one stretch for both.
    exercise = replace(MMA_PIPELINE, target=0.40, case_targets=(("D128", 0.40),
                                                                ("D128 causal", 0.45)),
                       stretch=0.50)
    cases = [timed("D64", 0.54), timed("D128", 0.434), timed("D128 causal", 0.474)]
    readable = Result(exercise, SOLUTION, Outcome(PASS, perf=cases), "bin/x")
    _, row, d64, d128, causal = table(capsys, readable)
    assert row.split()[-5:] == ["met", "(per", "case;", "stretch", "50%)"]
    assert d64.split()[-1] == "54.0%"  # shown, not judged
    assert d128.split()[-3:] == ["met", "(>=", "40%)"]
    assert causal.split()[-3:] == ["met", "(>=", "45%)"]
    fast_cases = [timed("D64", 0.74), timed("D128", 0.553), timed("D128 causal", 0.569)]
    fast = Result(exercise, FAST, Outcome(PASS, perf=fast_cases), "bin/x")
    _, row, d64, d128, causal = table(capsys, fast)
    assert row.split()[-4:] == ["stretch", "met", "(>=", "50%)"]
    assert d64.split()[-1] == "74.0%" and causal.split()[-2:] == ["stretch", "met"]


def test_the_widest_rows_of_the_course_fit_a_log_line(capsys):
    # Logs have no terminal: rows must not be cut ("…") with the stretch beside the target. The
    # longest names of the course: module 07's labels, baseline and target column.
    from grader.course import load_course
    from grader.tests.conftest import REPO
    course = load_course(REPO)
    for exercise in course.exercises:
        if not exercise.stretch:
            continue
        labels = [label for label, _ in exercise.case_targets] or ["4096^3"]
        cases = [PerfCase(label, exercise.metric, 1234.5, exercise.baseline, 5678.9, 0.217)
                 for label in labels]
        for variant in (SOLUTION, FAST):
            lines = table(capsys, Result(exercise, variant, Outcome(PASS, perf=cases), "bin/x"))
            assert not any("…" in line for line in lines), lines
