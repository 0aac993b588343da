"""The checker protocol on hand-written GoogleTest JSON reports (CONTRIBUTING.md's table)."""
import pytest

from grader.classify import classify, clean_message
from grader.results import CRASH, FAIL, PASS, SKIPPED, TIMEOUT, TODO
from grader.runner import CheckerRun

ROOT = "/home/learner/course"
EXE = "build/learner/bin/01_basics.vector_add.learner"
PERF = {"perf_label": "n=2^25", "perf_metric": "GB/s", "perf_value": "2712.5",
        "perf_baseline": "copy", "perf_baseline_value": "3001", "perf_ratio": "0.903865",
        "perf_median_ms": "0.148", "perf_min_ms": "0.147", "perf_spread_pct": "1.2",
        "perf_samples": "40", "perf_baseline_median_ms": "0.0894"}


def case(name="Edge", result="COMPLETED", failures=(), status="RUN", **properties) -> dict:
    """One test object of a GoogleTest JSON report."""
    test = {"name": name, "status": status, "result": result, **properties}
    if failures:
        test["failures"] = [{"failure": text, "type": ""} for text in failures]
    return test


def report(*tests) -> dict:
    return {"tests": len(tests), "testsuites": [{"name": "VectorAdd", "testsuite": list(tests)}]}


def grade(report_json=None, returncode=0, timed_out=False, output="") -> object:
    run = CheckerRun(returncode, timed_out, report_json, output, duration_s=0.5)
    return classify(run, exe=EXE, timeout_s=120,
                    strip_root=lambda text: text.replace(f"{ROOT}/", ""))


def exception(text: str) -> str:
    return f'unknown file\nC++ exception with description "{text}" thrown in the test body.'


def test_a_clean_run_passes_with_its_timed_case_parsed():
    outcome = grade(report(case(), case("Bandwidth", **PERF)))
    assert outcome.status == PASS and outcome.detail == []
    [timed] = outcome.perf
    assert (timed.label, timed.metric, timed.baseline) == ("n=2^25", "GB/s", "copy")
    assert timed.value == 2712.5 and timed.baseline_value == 3001.0
    assert timed.ratio == pytest.approx(0.903865) and timed.samples == 40
    assert timed.baseline_median_ms == pytest.approx(0.0894)
    assert (timed.value_text(), timed.baseline_text(), timed.percent_text()) == \
        ("2712.5 GB/s", "copy 3001.0 GB/s", "90.4%")


def test_every_test_skipped_is_skipped_with_its_reason():
    reason = "GPU sm_70 is below this exercise's sm_75"
    outcome = grade(report(case(result="SKIPPED", skip_reason=reason),
                           case("Bandwidth", result="SKIPPED", skip_reason=reason)))
    assert outcome.status == SKIPPED and outcome.detail == [reason]


def test_a_skipped_large_case_beside_a_passing_one_is_a_pass_without_timing():
    outcome = grade(report(case(), case("Bandwidth", result="SKIPPED", skip_reason="memory",
                                          **PERF)))
    assert outcome.status == PASS and outcome.perf == []


def test_disabled_tests_do_not_count():
    outcome = grade(report(case(), case("DISABLED_Slow", status="NOTRUN", result="SUPPRESSED")))
    assert outcome.status == PASS


def test_a_todo_exception_is_todo_without_tag_and_root():
    message = exception(f"[course:todo] launch it ({ROOT}/modules/01_basics/vector_add.cu:22)")
    outcome = grade(report(case(failures=[message])), returncode=1)
    assert outcome.status == TODO
    assert outcome.detail == ["launch it (modules/01_basics/vector_add.cu:22)"]


def test_a_cuda_error_is_a_crash_even_after_a_todo_with_the_sanitizer_command():
    cuda = exception("[course:cuda-error] cudaErrorIllegalAddress: an illegal memory access")
    outcome = grade(report(case(failures=[exception("[course:todo] x")]),
                           case("Bandwidth", failures=[cuda])), returncode=1)
    assert outcome.status == CRASH
    assert outcome.detail == ["cudaErrorIllegalAddress: an illegal memory access",
                              f"investigate: compute-sanitizer {EXE}"]


def test_any_other_failure_is_a_fail_showing_the_first_message():
    first = f"{ROOT}/modules/01_basics/tests/vector_add_test.cu:30\nc[1000]: got 0, expected 1.5"
    outcome = grade(report(case(failures=[first]), case("Bandwidth", failures=["second"])),
                    returncode=1)
    assert outcome.status == FAIL
    assert outcome.detail == ["modules/01_basics/tests/vector_add_test.cu:30",
                              "c[1000]: got 0, expected 1.5"]
    assert outcome.failures[1] == "second"


def test_a_long_failure_is_cut_to_a_few_lines():
    outcome = grade(report(case(failures=["\n".join(f"line {i}" for i in range(40))])),
                    returncode=1)
    assert len(outcome.detail) == 9 and "32 more lines" in outcome.detail[-1]


def test_a_timeout_wins_over_everything():
    outcome = grade(report(case()), returncode=-9, timed_out=True, output="[ RUN      ] X.Slow")
    assert outcome.status == TIMEOUT
    assert outcome.detail[0].startswith("killed after 120 s")
    assert outcome.detail[1] == "last output: [ RUN      ] X.Slow"


def test_a_signal_is_a_crash_naming_it():
    outcome = grade(None, returncode=-11, output="[----------] banner\n[ RUN      ] X.Edge\n")
    assert outcome.status == CRASH
    assert outcome.detail == ["killed by SIGSEGV", "last output: [ RUN      ] X.Edge",
                              f"investigate: compute-sanitizer {EXE}"]


def test_exiting_without_a_report_is_a_crash():
    outcome = grade(None, returncode=3)
    assert outcome.status == CRASH and "without writing its report" in outcome.detail[0]


def test_a_failing_exit_status_without_failures_is_a_fail():
    outcome = grade(report(case()), returncode=1)
    assert outcome.status == FAIL and "status 1" in outcome.detail[0]


def test_a_checker_without_tests_fails():
    assert grade(report()).status == FAIL


def test_clean_message_keeps_quotes_inside_the_exception_text():
    message = exception('[course:todo] call "launch" first')
    assert clean_message(message) == 'call "launch" first'


def test_a_self_explaining_predicate_shows_its_explanation_only():
    message = (f"{ROOT}/modules/01_basics/tests/vector_add_test.cu:30\n"
               "Value of: course::expect_close(d_c.download(), add_on_host(a, b), {\"c\"})\n"
               "  Actual: false (`c`: 3 of 1009 elements are wrong (float32)\n"
               "  [1006] got NaN/poison (never written), want 1.5)\n"
               "Expected: true\n"
               "Google Test trace:\n"
               f"{ROOT}/modules/01_basics/tests/vector_add_test.cu:20: n = 1009\n")
    outcome = grade(report(case(failures=[message])), returncode=1)
    assert outcome.detail == ["modules/01_basics/tests/vector_add_test.cu:30",
                              "case: n = 1009",
                              "`c`: 3 of 1009 elements are wrong (float32)",
                              "  [1006] got NaN/poison (never written), want 1.5"]


def test_the_device_the_checker_named_is_kept_with_the_outcome():
    output = ("[course] seed 123 (replay: GRADER_SEED=123); device: NVIDIA H100 80GB HBM3, sm_90\n"
              "[==========] Running 2 tests\n")
    assert grade(report(case()), output=output).device == "NVIDIA H100 80GB HBM3"
    without = "[course] seed 1 (replay: GRADER_SEED=1); device: no NVIDIA GPU found\n"
    assert grade(report(case(result="SKIPPED")), output=without).device == ""
