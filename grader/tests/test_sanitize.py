"""grader sanitize: compute-sanitizer's output recorded on an H100 (fixtures/sanitizer/, see
fixtures/README.md) summarized per tool, and the command on the fixture course with a stand-in
compute-sanitizer."""
import os
import stat
from pathlib import Path

import pytest

from grader import sanitize, tools_cli
from grader.course import load_course

from .conftest import REPO, invoke

LOGS = Path(__file__).parent / "fixtures" / "sanitizer"


def summary(tool: str, log: str) -> sanitize.ToolSummary:
    return sanitize.summarize_output(tool, (LOGS / log).read_text())


def test_the_planted_race_is_found_with_both_accesses():
    race = summary("racecheck", "racecheck_race.log")
    assert race.errors == 28  # "21 hazards displayed (28 errors, 1 warning)"
    assert race.first == "Race reported between Write access and Read access"
    assert race.where == ["transpose.cu:43", "transpose.cu:58"]


def test_the_planted_out_of_bounds_write_is_found_with_its_thread():
    write = summary("memcheck", "memcheck_out_of_bounds.log")
    # The first summary line counts; the second says how many were not printed.
    assert write.errors == 35
    assert write.first == ("Invalid __global__ write of size 4 bytes (by thread (1,0,0) in block "
                           "(0,0,0); 1 bytes after the nearest allocation of size 4 bytes)")
    assert write.where == ["transpose.cu:59"]


@pytest.mark.parametrize("tool", sanitize.TOOLS)
def test_the_solution_is_clean_under_every_tool(tool):
    clean = summary(tool, f"{tool}_clean.log")
    assert (clean.errors, clean.first, clean.where) == (0, "", [])
    assert sanitize.describe(clean) == "0 errors"


def test_with_redzones_memcheck_cannot_see_the_write_the_canaries_catch():
    # Why grader sanitize asks for exact allocations: the same planted write, redzones on.
    text = (LOGS / "memcheck_with_redzones.log").read_text()
    assert summary("memcheck", "memcheck_with_redzones.log").errors == 0
    assert "wrote past the end of `out`" in text


def test_output_without_a_summary_means_the_checker_did_not_finish():
    broken = sanitize.summarize_output("memcheck", "========= COMPUTE-SANITIZER\nSegmentation fault\n")
    assert broken.errors is None
    assert "did the checker crash" in sanitize.describe(broken)


def test_places_are_made_repo_relative_for_the_exercises_files():
    course = load_course(REPO)
    [exercise] = [e for e in course.exercises if e.key == "02_memory/transpose"]
    relative = sanitize.source_locator(course, [course.solution(exercise),
                                                course.checker(exercise)])
    described = sanitize.describe(summary("racecheck", "racecheck_race.log"), relative)
    assert described == ("28 errors; first: Race reported between Write access and Read access, "
                         "at solutions/02_memory/transpose.cu:43 and "
                         "solutions/02_memory/transpose.cu:58")
    assert relative("bench.cu:12") == "bench.cu:12"  # not an exercise file: as printed


def test_the_filter_leaves_out_the_timed_tests():
    assert sanitize.gtest_filter(["A.Big", "A.Huge"]) == "--gtest_filter=-A.Big:A.Huge"
    assert sanitize.gtest_filter([]) == "--gtest_filter=*"


# --- the command, on the fixture course, with a stand-in compute-sanitizer -----------------------


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    """A compute-sanitizer that records its arguments and environment and prints a recorded log:
    the race for racecheck, a clean run for the others."""
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "compute-sanitizer"
    script.write_text(f"""#!/bin/sh
echo "$@" >> "{folder}/arguments"
echo "exact=$COURSE_EXACT_ALLOCATIONS" >> "{folder}/arguments"
if [ "$2" = racecheck ]; then cat "{LOGS}/racecheck_race.log"; else cat "{LOGS}/$2_clean.log"; fi
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: True)
    return folder


def test_sanitize_runs_each_tool_on_the_correctness_cases(course, fake_sanitizer):
    run = invoke(course, "sanitize", "01/passes")
    assert run.exit_code == 1  # racecheck found something
    assert "left out: the timed Twice.SmallCase, Twice.LargeCase" in run.stdout
    assert "  memcheck   0 errors" in run.stdout
    assert "  racecheck  28 errors; first: Race reported" in run.stdout
    arguments = (fake_sanitizer / "arguments").read_text().splitlines()
    assert [line.split()[1] for line in arguments[::2]] == list(sanitize.TOOLS)
    assert all(line == "exact=1" for line in arguments[1::2])
    assert arguments[0].endswith("--gtest_filter=-Twice.SmallCase:Twice.LargeCase --gtest_color=no")
    logs = course / "build/learner/sanitize"
    assert sorted(path.name for path in logs.iterdir()) == sorted(
        f"01_fixture.passes.learner.{tool}.log" for tool in sanitize.TOOLS)


def test_one_tool_and_a_clean_result_exit_zero(course, fake_sanitizer):
    run = invoke(course, "sanitize", "01/passes", "--solutions", "--tool", "memcheck")
    assert run.exit_code == 0, run.stderr
    assert "(solution)" in run.stdout and "racecheck" not in run.stdout
