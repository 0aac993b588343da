"""The results table: one timed case on the exercise's row, the target judged on every case
timed against the manifest's baseline (or, with case_targets, on the cases named there)."""
from dataclasses import replace

from grader.manifest import Exercise
from grader.report import make_console, print_results
from grader.results import (FAIL, PASS, LEARNER, Outcome, PerfCase, Result, judged_cases,
                            target_met)

EXERCISE = Exercise("01_basics", "vector_add", "Vector add", "vector_add.cu",
                    "tests/vector_add_test.cu", 75, "GB/s", "copy", 0.9, 120.0, ("a", "b"))


def table(capsys, *results) -> list[str]:
    print_results(make_console(), list(results))
    return capsys.readouterr().out.splitlines()


def timed(ratio: float, baseline: str = "copy") -> PerfCase:
    return PerfCase("n=2^25", "GB/s", 3000 * ratio, baseline, 3000.0, ratio)


def test_one_timed_case_sits_on_the_exercise_row(capsys):
    result = Result(EXERCISE, LEARNER, Outcome(PASS, perf=[timed(0.95)]), "bin/x")
    header, row = table(capsys, result)
    assert header.split()[0] == "01_basics"
    assert row.split() == ["vector_add", "pass", "2850.0", "GB/s", "copy", "3000.0", "GB/s",
                           "95.0%", "met", "(>=", "90%)"]


def test_the_target_is_not_met_when_one_case_falls_short(capsys):
    result = Result(EXERCISE, LEARNER, Outcome(PASS, perf=[timed(0.95), timed(0.5)]), "bin/x")
    _, row, first, second = table(capsys, result)
    assert row.split()[-4:] == ["not", "met", "(>=", "90%)"]
    assert first.split()[-2:] == ["95.0%", "met"]
    assert second.split()[-3:] == ["50.0%", "not", "met"]
    assert result.target_met is False


def test_cases_against_another_reference_are_shown_but_not_judged(capsys):
    beside = timed(0.5, baseline="naive_transpose")
    result = Result(EXERCISE, LEARNER, Outcome(PASS, perf=[timed(0.95), beside]), "bin/x")
    _, row, first, second = table(capsys, result)
    assert row.split()[-3:] == ["met", "(>=", "90%)"]
    assert first.split()[-2:] == ["95.0%", "met"]
    assert second.split()[-1] == "50.0%"
    assert result.target_met is True


def test_case_targets_judge_only_the_cases_they_name(capsys):
    # flash_tc's way: the D128 cases judged, each against its own ratio; D64 shown, not judged;
    # a case timed against the fallback library (cuDNN missing) neither.
    exercise = replace(EXERCISE, target=0.45,
                       case_targets=(("D128", 0.5), ("D128 causal", 0.45)))
    cases = [replace(timed(0.3), label="D64"), replace(timed(0.55), label="D128"),
             replace(timed(0.46), label="D128 causal")]
    result = Result(exercise, LEARNER, Outcome(PASS, perf=cases), "bin/x")
    _, row, d64, d128, causal = table(capsys, result)
    assert row.split()[-3:] == ["met", "(per", "case)"]
    assert d64.split()[-1] == "30.0%"
    assert d128.split()[-3:] == ["met", "(>=", "50%)"]
    assert causal.split()[-3:] == ["met", "(>=", "45%)"]
    assert result.target_met is True
    short = [cases[0], replace(cases[1], ratio=0.47), cases[2]]
    assert target_met(exercise, short) is False  # 47% passes 45% but not D128's own 50%
    fallback = [replace(case, baseline="cublas") for case in cases]
    assert target_met(exercise, fallback) is None
    assert [case.label for case in judged_cases(exercise, cases)] == ["D128", "D128 causal"]


def test_a_failure_shows_no_numbers_and_its_detail_below(capsys):
    result = Result(EXERCISE, LEARNER, Outcome(FAIL, ["c[7]: got 0", "seed 42"], [timed(2.0)]),
                    "bin/x")
    _, row, *details = table(capsys, result)
    assert row.split() == ["vector_add", "fail", "-", "-", "-", "-"]
    assert details == ["    c[7]: got 0", "    seed 42"]
    assert result.target_met is None
