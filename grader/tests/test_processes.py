"""Checker processes (issue 11, items 6-7; issue 12, item 5): the report comes through the
harness's channel only, output is bounded, and every way out stops the checker."""
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.runner import KEPT_OUTPUT_BYTES, run_checker
from grader.tests.conftest import REPO, invoke
from grader.tests.test_build_tree import status_of

# The trick of issue 12, item 5: write a passing report where the command line says (the old
# protocol passed --gtest_output=json:<path>), else where GoogleTest's own flag says, and exit 0
# before any test can fail.
FORGING_STUB = r'''// 01_fixture/passes, forging its checker's report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "passes.h"

namespace {

std::string report_path() {
    std::ifstream command_line("/proc/self/cmdline");
    for (std::string argument; std::getline(command_line, argument, '\0');)
        if (argument.rfind("--gtest_output=json:", 0) == 0) return argument.substr(20);
    const std::string flag = testing::GTEST_FLAG(output);
    return flag.rfind("json:", 0) == 0 ? flag.substr(5) : "report.json";
}

}  // namespace

int twice(int) {
    std::ofstream(report_path()) << R"({"tests": 1, "failures": 0, "testsuites": [{"name": "Twice",
        "testsuite": [{"name": "DoublesItsInput", "status": "RUN", "result": "COMPLETED",
        "perf_case": "n=2^25", "perf_metric": "GB/s", "perf_value": "3000", "perf_baseline":
        "copy", "perf_baseline_value": "3000", "perf_ratio": "1.0"}]}]})";
    _exit(0);
}
'''
CHATTY_STUB = r'''// 01_fixture/passes, printing without end.
#include <cstdio>

#include "passes.h"

int twice(int) {
    for (;;) std::fputs("a line the learner left in a loop, printed again and again\n", stdout);
}
'''


# --- issue 12, item 5: the report cannot be forged with a one-line trick ---------------------

def test_a_forged_report_fails_clearly_and_is_never_recorded_as_a_pass(course):
    (course / "modules/01_fixture/passes.cpp").write_text(FORGING_STUB)
    result = invoke(course, "run", "01/passes")
    assert result.exit_code == 1
    assert status_of(result, "passes") == "fail"
    assert ("    its report did not come from the harness (it lacks this run's nonce): the "
            "exercise's code wrote or replaced the checker's report, which is never a pass"
            in result.stdout)
    entry = json.loads((course / ".grader/results.json").read_text())["learner"][
        "01_fixture/passes"]
    assert entry["status"] == "fail" and entry["best"] is None
    assert "- [ ] `01_fixture/passes`" in (course / "ROADMAP.md").read_text()


def test_an_exercise_whose_library_the_build_lacks_is_skipped_with_the_reason(course):
    # Module 11's data_parallel_step on a machine without NCCL: its checker is the harness's
    # stand-in (common/src/missing_library_test.cpp), which must still report through the
    # channel, else the grader calls the run a crash.
    module = course / "modules/02_library"
    (module / "tests").mkdir(parents=True)
    (module / "module.toml").write_text(
        '[module]\ntitle = "Fixture: a library this build lacks"\nweek = 2\n\n[[exercise]]\n'
        'id = "calls_nccl"\ntitle = "Calls NCCL"\nfile = "calls_nccl.cpp"\n'
        'checker = "tests/calls_nccl_test.cpp"\nmin_sm = 75\nmetric = ""\nbaseline = ""\n'
        'target = 0\nlibrary = "nccl"\nhints = ["a nudge", "the last hint"]\n')
    (module / "calls_nccl.cpp").write_text("// TODO: call NCCL\n")
    (module / "calls_nccl.h").write_text("#pragma once\n")
    (module / "tests/calls_nccl_test.cpp").write_text('#error "never compiled here"\n')
    (course / "solutions/02_library").mkdir(parents=True)
    (course / "solutions/02_library/calls_nccl.cpp").write_text("// calls NCCL\n")
    result = invoke(course, "run", "02/calls_nccl")
    assert status_of(result, "calls_nccl") == "skipped", result.stdout + result.stderr
    assert "NCCL is missing from this build" in result.stdout


def test_the_report_path_is_on_no_command_line(built_course):
    exe = built_course.root / "build/learner/bin/01_fixture.passes.learner"
    script = built_course.root / "show-arguments"
    script.write_text(f'#!/bin/sh\necho "$@"\nenv | grep -c COURSE_REPORT\nexec {exe} "$@"\n')
    script.chmod(0o755)
    run = run_checker(script, built_course.root, timeout_s=30)
    arguments = run.output.splitlines()[0]
    assert arguments == "--gtest_color=no" and "gtest_output" not in run.output
    assert run.report is not None and not run.forged  # the harness still reports


def test_a_checker_run_by_hand_keeps_googletests_own_flags(built_course, tmp_path):
    exe = built_course.root / "build/learner/bin/01_fixture.passes.learner"
    report = tmp_path / "by-hand.json"
    subprocess.run([exe, f"--gtest_output=json:{report}"], check=True, capture_output=True)
    assert json.loads(report.read_text())["tests"] == 3


# --- item 6: output is bounded ----------------------------------------------------------------

def test_long_output_keeps_a_bounded_head_and_tail_and_says_how_much_was_cut(tmp_path):
    script = tmp_path / "chatty"
    script.write_text("#!/bin/sh\necho first line\nyes 'the same line' | head -c 20000000\n"
                      "echo; echo last line\n")
    script.chmod(0o755)
    run = run_checker(script, tmp_path, timeout_s=60)
    assert not run.timed_out and run.returncode == 0
    assert run.output.startswith("first line\n") and run.output.endswith("last line\n")
    assert len(run.output) < 2 * KEPT_OUTPUT_BYTES + 200
    assert run.cut_bytes > 19_000_000
    assert "MB of output cut here; the first and the last 64 KB are kept]" in run.output


def test_a_stub_printing_forever_costs_no_memory(course):
    (course / "modules/01_fixture/passes.cpp").write_text(CHATTY_STUB)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = invoke(course, "run", "01/passes", "--timeout", "3")
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert status_of(result, "passes") == "timeout"
    assert grown_mb < 50, f"the grader grew by {grown_mb:.0f} MB"
    assert re.search(r"\n    [0-9.]+ [MG]B of the checker's output were left out: --verbose "
                     r"shows its first and its last 64 KB\n", result.stdout), result.stdout


# --- item 7: Ctrl-C and SIGTERM stop the checker, clean up, record nothing --------------------

def processes_running(exe: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(
                    bytes(exe)):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("signal_number", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_run_stops_its_checker_and_records_nothing(built_course, tmp_path,
                                                                  signal_number):
    root = built_course.root
    exe = root / "build/learner/bin/01_fixture.hangs.learner"
    results_before = (root / ".grader/results.json").read_bytes()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    grader = subprocess.Popen([sys.executable, "-m", "grader", "--root", str(root), "run",
                               "01/hangs", "--timeout", "120"], cwd=REPO,
                              env={**os.environ, "TMPDIR": str(scratch)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not processes_running(exe):
            assert time.monotonic() < deadline and grader.poll() is None, grader.stderr.read()
            time.sleep(0.1)
        grader.send_signal(signal_number)
        _, stderr = grader.communicate(timeout=30)
    finally:
        if grader.poll() is None:
            grader.kill()
    assert grader.returncode == 130
    assert stderr.splitlines()[-1] == ("Error: interrupted: the build or checker that was "
                                       "running is stopped, and nothing was recorded")
    time.sleep(0.2)
    assert processes_running(exe) == []
    assert list(scratch.iterdir()) == []  # no scratch folder left behind
    assert (root / ".grader/results.json").read_bytes() == results_before


def test_a_process_left_behind_holding_the_output_does_not_make_a_timeout(tmp_path):
    script = tmp_path / "leaves-a-child"
    script.write_text("#!/bin/sh\n(sleep 30) &\necho done\n")
    script.chmod(0o755)
    run = run_checker(script, tmp_path, timeout_s=20)
    assert not run.timed_out and run.returncode == 0 and run.duration_s < 10
    assert run.output == "done\n"
