"""The checker protocol: a checker run -> its status and detail (table in CONTRIBUTING.md)."""
import re
import signal
from dataclasses import replace
from typing import Callable

from grader.results import CRASH, FAIL, PASS, SKIPPED, TIMEOUT, TODO, Outcome, PerfCase
from grader.runner import KEPT_OUTPUT_BYTES, byte_count

TODO_TAG = "[course:todo]"
CUDA_ERROR_TAG = "[course:cuda-error]"
# First match wins: a CUDA error poisons the context, so the todo or fail after it means nothing.
TAGGED_STATUSES = ((CUDA_ERROR_TAG, CRASH), (TODO_TAG, TODO))
MAX_DETAIL_LINES = 8
OUTPUT_TAIL_LINES = 3
# How GoogleTest reports an exception that escaped a test; the harness's tagged errors arrive so.
GTEST_EXCEPTION = re.compile(r'C\+\+ exception with description "(.*)" thrown in [^"]*$', re.S)
# How it reports EXPECT_TRUE(predicate) when the predicate explains itself (course::expect_close,
# redzones_intact): the explanation is all a learner needs.
GTEST_PREDICATE = re.compile(r"^Value of: [^\n]*\n  Actual: false \((.*)\)\nExpected: true$",
                             re.S | re.M)
GTEST_BANNERS = ("[----------]", "[==========]")
# The SCOPED_TRACE lines GoogleTest appends to a failure ("file:line: n = 1009"): which case
# failed. They go up front, where the grader's first lines show them.
GTEST_TRACE = re.compile(r"\nGoogle Test trace:\n(.*)$", re.S)
TRACE_LINE = re.compile(r"^\S+:\d+: ")
FORGED = ("its report did not come from the harness (it lacks this run's nonce): the exercise's "
          "code wrote or replaced the checker's report, which is never a pass")
# The line every checker prints first (common/src/main.cpp): "[course] seed 123 (replay:
# GRADER_SEED=123); device: NVIDIA H100 80GB HBM3, sm_90".
DEVICE_LINE = re.compile(r"^\[course\] seed \d+ .*; device: (.+), sm_\d+$", re.M)
PERF_NUMBERS = ("value", "baseline_value", "ratio", "median_ms", "min_ms", "spread_pct",
                "baseline_median_ms")


def classify(run, *, exe: str, timeout_s: float, strip_root: Callable[[str], str]) -> Outcome:
    """`run` is a runner.CheckerRun; `exe` the repo-relative executable, for the sanitizer hint."""
    outcome = _classify(run, exe, timeout_s, strip_root)
    device = DEVICE_LINE.search(run.output)
    if device:
        outcome = replace(outcome, device=device[1])
    if run.cut_bytes and outcome.status != PASS:
        outcome = replace(outcome, detail=[
            *outcome.detail, f"{byte_count(run.cut_bytes)} of the checker's output were left "
            f"out: --verbose shows its first and its last {byte_count(KEPT_OUTPUT_BYTES)}"])
    return outcome


def _classify(run, exe: str, timeout_s: float, strip_root: Callable[[str], str]) -> Outcome:
    output = strip_root(run.output)
    sanitizer = f"investigate: compute-sanitizer {exe}"
    if run.timed_out:
        return Outcome(TIMEOUT, [f"killed after {timeout_s:g} s (the manifest's timeout_s; "
                                 "--timeout overrides it)", *_tail(output)], output=output)
    if run.returncode < 0:
        return Outcome(CRASH, [f"killed by {_signal_name(-run.returncode)}", *_tail(output),
                               sanitizer], output=output)
    if run.forged:
        return Outcome(FAIL, [FORGED], output=output)
    if run.report is None:
        return Outcome(CRASH, [f"exited with status {run.returncode} without writing its report",
                               *_tail(output), sanitizer], output=output)
    return _from_report(run, output, sanitizer, strip_root)


def _from_report(run, output: str, sanitizer: str, strip_root) -> Outcome:
    tests = tests_run(run.report)
    perf = [perf_case(test) for test in tests if is_timed(test)]
    messages = [strip_root(failure.get("failure", "")) for test in tests
                for failure in test.get("failures", [])]
    failures = [clean_message(message) for message in messages]
    for tag, status in TAGGED_STATUSES:
        tagged = [failure for message, failure in zip(messages, failures) if tag in message]
        if tagged:
            hint = [sanitizer] if status == CRASH else []
            return Outcome(status, first_lines(tagged[0]) + hint, perf, failures, output)
    if failures:
        return Outcome(FAIL, first_lines(failures[0]), perf, failures, output)
    if run.returncode != 0:
        return Outcome(FAIL, [f"the checker exited with status {run.returncode} but reported no "
                              "failure", *_tail(output)], output=output)
    if not tests:
        return Outcome(FAIL, ["the checker ran no tests"], output=output)
    if all(test.get("result") == "SKIPPED" for test in tests):
        return Outcome(SKIPPED, _skip_reasons(tests), output=output)
    return Outcome(PASS, perf=perf, output=output)


def tests_run(report: dict) -> list[dict]:
    """The test objects of a GoogleTest JSON report that ran (not the DISABLED_ ones)."""
    return [test for suite in report.get("testsuites", []) for test in suite.get("testsuite", [])
            if test.get("status", "RUN") == "RUN"]


def is_timed(test: dict) -> bool:
    return test.get("result") != "SKIPPED" and ("perf_label" in test or "perf_value" in test)


def perf_case(test: dict) -> PerfCase:
    # GoogleTest writes every property as a string.
    numbers = {name: _number(test.get(f"perf_{name}")) for name in PERF_NUMBERS}
    samples = _number(test.get("perf_samples"))
    return PerfCase(label=test.get("perf_label", test.get("name", "")),
                    metric=test.get("perf_metric", ""), baseline=test.get("perf_baseline", ""),
                    samples=None if samples is None else int(samples),
                    test=f"{test.get('classname', '')}.{test.get('name', '')}", **numbers)


def clean_message(message: str) -> str:
    """The failure text a learner should read: the harness's own words, without the tags, the
    failed case first."""
    match = GTEST_EXCEPTION.search(message)
    text = match.group(1) if match else GTEST_PREDICATE.sub(r"\1", message)
    for tag, _ in TAGGED_STATUSES:
        text = text.replace(f"{tag} ", "").replace(tag, "")
    return _case_first(text.strip())


def _case_first(text: str) -> str:
    """`text` with its GoogleTest trace (the case that failed) moved after the location line."""
    trace = GTEST_TRACE.search(text)
    if not trace:
        return text
    cases = [TRACE_LINE.sub("", line).strip() for line in trace[1].splitlines() if line.strip()]
    location, _, rest = text[:trace.start()].partition("\n")
    return "\n".join([location, f"case: {'; '.join(cases)}", rest]).strip()


def first_lines(text: str, limit: int = MAX_DETAIL_LINES) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    if len(lines) <= limit:
        return lines
    return lines[:limit] + [f"... ({len(lines) - limit} more lines with --verbose)"]


def _tail(output: str) -> list[str]:
    """The checker's last words (its last `[ RUN ]` line names the test that died)."""
    lines = [line.rstrip() for line in output.splitlines()
             if line.strip() and not line.startswith(GTEST_BANNERS)]
    tail = lines[-OUTPUT_TAIL_LINES:]
    return [f"last output: {tail[0]}", *tail[1:]] if tail else []


def _skip_reasons(tests: list[dict]) -> list[str]:
    reasons = dict.fromkeys(test.get("skip_reason", "skipped (no reason given)") for test in tests)
    return list(reasons)


def _number(text: str | None) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
