"""`grader run` on the fixture course: every status, table, JSON, saved results, learner files."""
import json
import re
import shutil

import pytest

from grader.build import BuildTree
from grader.cli import NO_GPU_NOTE
from grader.course import load_course
from grader.grading import grade
from grader.progress import STATUS_MARKERS
from grader.report import make_console, print_results
from grader.results import EMULATED, Outcome, Result
from grader.tests.conftest import SKIP_ENV, SKIP_REASON, invoke

# exercise: (status, a line of its detail)
EXPECTED = {
    "passes": ("pass", None),
    "mismatch": ("fail", "Which is: 23"),
    "todo": ("todo", "twice: return 2 * x, then delete this line (modules/01_fixture/todo.cpp:7)"),
    "syntax_error": ("build error", "modules/01_fixture/syntax_error.cpp:4:32: error: expected"),
    "segfault": ("crash", "killed by SIGSEGV"),
    "cuda_error": ("crash", "cudaErrorIllegalAddress: an illegal memory access was encountered"),
    "hangs": ("timeout", "killed after 2 s"),
    "no_gpu": ("skipped", SKIP_REASON),
}


def rows(table: str) -> dict[str, list[str]]:
    """exercise -> the cells of its row, and the detail lines under it."""
    found, current = {}, None
    for line in table.splitlines()[1:]:
        if line.startswith("    "):
            found[current].append(line.strip())
        elif not line.startswith("  "):
            current = line.split()[0]
            found[current] = [re.split(r"\s{2,}", line.strip())]
    return found


@pytest.mark.parametrize("exercise", EXPECTED)
def test_every_status_with_its_detail(built_course, exercise):
    status, detail = EXPECTED[exercise]
    row, *details = rows(built_course.learner.stdout)[exercise]
    assert row[1] == status
    if detail:
        assert any(line.startswith(detail) for line in details), details
    else:
        assert details == []


def test_crashes_name_the_sanitizer_command(built_course):
    table = rows(built_course.learner.stdout)
    for exercise in ("segfault", "cuda_error"):
        assert (f"investigate: compute-sanitizer build/learner/bin/01_fixture.{exercise}.learner"
                in table[exercise])


def test_messages_carry_no_tags_and_no_absolute_paths(built_course):
    output = built_course.learner.stdout
    assert "[course:" not in output and str(built_course.root) not in output


def test_timed_cases_get_a_row_each_with_metric_baseline_and_target(built_course):
    lines = built_course.learner.stdout.splitlines()
    assert lines[0].split() == ["01_fixture", "status", "metric", "baseline", "%", "of",
                                "baseline", "target"]
    passes = lines.index(next(line for line in lines if line.startswith("passes")))
    # The target met, the fast reference's stretch shown beside it (and met by one case).
    assert lines[passes].split()[-5:] == ["met", "(>=", "80%;", "stretch", "88%)"]
    assert lines[passes + 1].split() == ["n=2^10", "900.0", "GB/s", "copy", "1000.0", "GB/s",
                                         "90.0%", "stretch", "met"]
    assert lines[passes + 2].split()[0] == "n=2^20" and lines[passes + 2].split()[-2:] == [
        "85.0%", "met"]


def test_build_progress_goes_to_stderr_with_the_no_gpu_note(built_course):
    stderr = built_course.learner.stderr
    assert stderr.splitlines()[0] == NO_GPU_NOTE
    assert "notebooks/free_gpu.ipynb" in NO_GPU_NOTE and "grader doctor" in NO_GPU_NOTE
    # Issue 11, item 9: the quiet steps say what they are doing (a spinner on a terminal); issue
    # 28: the build is one of them, not a line per compiled file.
    assert "configuring build/learner (once; CMake takes 10-30 s)\n" in stderr
    assert "building 8 targets in build/learner\n" in stderr
    assert "Linking CXX executable" not in stderr
    assert "collecting the errors of the targets that did not build\n" in stderr


def test_without_a_gpu_the_untouched_stubs_are_todo_with_the_line_to_edit(course, no_gpu):
    # A checker that skips for want of a GPU, on a stub that still calls COURSE_TODO.
    stub = course / "modules/01_fixture/no_gpu.cpp"
    stub.write_text(stub.read_text().replace(
        "int twice(int x) { return 2 * x; }",
        '#include "course/todo.h"\n\nint twice(int x) {\n'
        '    COURSE_TODO("twice: return 2 * x, then delete this line");\n}'))
    result = invoke(course, "run", "01/no_gpu", env=SKIP_ENV)
    table = rows(result.stdout)
    assert table["no_gpu"][0][1] == "todo"
    assert table["no_gpu"][1:] == [
        "twice: return 2 * x, then delete this line (modules/01_fixture/no_gpu.cpp:7)"]


def test_a_skip_reason_shared_by_several_exercises_is_said_once(built_course):
    shared = [Result(exercise, "learner", Outcome("skipped", [SKIP_REASON]), "exe")
              for exercise in load_course(built_course.root).exercises[:3]]
    console = make_console()
    with console.capture() as captured:
        print_results(console, shared)
    text = captured.get()
    assert text.count(SKIP_REASON) == 1
    assert f"    skipped (3 exercises): {SKIP_REASON}" in text.splitlines()


def test_exit_status_is_1_unless_everything_passes(built_course):
    assert built_course.learner.exit_code == 1
    assert built_course.solutions.exit_code == 0
    assert invoke(built_course.root, "run", "01/passes").exit_code == 0


def test_solutions_all_pass_in_their_own_tree(built_course):
    table = rows(built_course.solutions.stdout)
    assert {cells[0][1] for cells in table.values()} == {"pass"}
    assert (built_course.root / "build/solutions/bin/01_fixture.hangs.solution").is_file()


def test_solutions_judge_the_readable_on_the_target_and_the_fast_on_the_stretch(built_course):
    lines = built_course.solutions.stdout.splitlines()
    readable = lines.index(next(line for line in lines if line.startswith("passes (readable)")))
    assert lines[readable].split()[-5:] == ["met", "(>=", "80%;", "stretch", "88%)"]
    assert lines[readable + 2].split()[-2:] == ["85.0%", "met"]
    fast = lines.index(next(line for line in lines if line.startswith("passes (fast)")))
    assert fast == readable + 3  # its own row and cases, right after the readable ones
    assert lines[fast].split()[-4:] == ["stretch", "met", "(>=", "88%)"]
    assert lines[fast + 2].split()[-3:] == ["93.5%", "stretch", "met"]
    assert (built_course.root / "build/fast/bin/01_fixture.passes.fast").is_file()
    assert not (built_course.root / "build/fast/bin/01_fixture.hangs.fast").exists()
    saved = json.loads((built_course.root / ".grader/results.json").read_text())
    readable_saved, fast_saved = (saved[variant]["01_fixture/passes"]
                                  for variant in ("solution", "fast"))
    assert (readable_saved["target_met"], readable_saved["stretch_met"]) == (True, False)
    assert (fast_saved["target_met"], fast_saved["stretch_met"]) == (True, True)
    assert readable_saved["stretch"] == 0.88


def test_json_lists_every_result(built_course):
    results = {entry["exercise"]: entry for entry in json.loads(built_course.learner_json.stdout)}
    assert {key.split("/")[1]: entry["status"] for key, entry in results.items()} == \
        {exercise: status for exercise, (status, _) in EXPECTED.items()}
    passes = results["01_fixture/passes"]
    assert passes["target_met"] is True and passes["variant"] == "learner"
    assert [case["ratio"] for case in passes["perf"]] == [0.9, 0.85]
    assert passes["exe"] == "build/learner/bin/01_fixture.passes.learner"
    assert passes["duration_s"] >= 0 and results["01_fixture/hangs"]["duration_s"] >= 2
    assert results["01_fixture/mismatch"]["target_met"] is None


def test_results_are_saved_for_both_variants(built_course):
    saved = json.loads((built_course.root / ".grader/results.json").read_text())
    assert saved["solution"]["01_fixture/segfault"]["status"] == "pass"
    assert saved["learner"]["01_fixture/segfault"]["status"] == "crash"
    assert saved["learner"]["01_fixture/passes"]["best"]["perf"][0]["label"] == "n=2^10"


def test_the_environment_reaches_the_checker(built_course):
    # The session's learner run had FIXTURE_SKIP_REASON; without it, no_gpu's checker runs.
    assert invoke(built_course.root, "run", "01/no_gpu").exit_code == 0


def test_timeout_option_overrides_the_manifest(built_course):
    result = invoke(built_course.root, "run", "01/hangs", "--timeout", "0.5")
    assert result.exit_code == 1 and "killed after 0.5 s" in result.stdout


def test_verbose_shows_the_full_checker_output(built_course):
    result = invoke(built_course.root, "run", "01/mismatch", "--verbose")
    assert "01_fixture/mismatch (learner): full output" in result.stdout
    assert "[  FAILED  ] Twice.DoublesItsInput" in result.stdout


def test_a_stub_including_its_baseline_library_is_refused(built_course):
    # A header-only library (here a stand-in CUB beside the stub), included behind a macro: the
    # compiler's dependency list names it, whatever the text of the include looks like.
    module = built_course.root / "modules/01_fixture"
    stub = module / "mismatch.cpp"
    original = stub.read_text()
    (module / "cub").mkdir()
    (module / "cub/cub.cuh").write_text("inline int cub_stand_in() { return 1; }\n")
    stub.write_text('#define LIBRARY "cub/cub.cuh"\n#include LIBRARY\n' + original)
    try:
        result = invoke(built_course.root, "run", "01/mismatch")
    finally:
        stub.write_text(original)
        shutil.rmtree(module / "cub")
    assert result.exit_code == 1
    assert ("refused: modules/01_fixture/mismatch.cpp includes <cub/cub.cuh>; an exercise may "
            "not call the library it is measured against") in result.stdout
    assert "Twice.DoublesItsInput" not in result.stdout  # built, never run


def test_progress_md_keeps_the_learners_text_outside_the_block(built_course):
    progress = built_course.root / "progress.md"
    begin, end = STATUS_MARKERS
    mine_before, mine_after = "# Mine\n\nnotes  \n\n", "\n## Log\n\n### Day 1\nmy day\n"
    progress.write_text(f"{mine_before}{begin}\nstale\n{end}{mine_after}")
    assert invoke(built_course.root, "run", "01/passes").exit_code == 0
    text = progress.read_text()
    assert text.startswith(f"{mine_before}{begin}\n") and text.endswith(f"{end}{mine_after}")
    assert "stale" not in text and "| `passes` | pass | 900.0 GB/s | 90.0% |" in text


def test_progress_md_without_markers_gets_the_block_appended(built_course):
    progress = built_course.root / "progress.md"
    progress.write_text("my own log\n")
    invoke(built_course.root, "run", "01/passes")
    text = progress.read_text()
    assert text.startswith("my own log\n\n" + STATUS_MARKERS[0]) and text.endswith(
        STATUS_MARKERS[1] + "\n")


def test_roadmap_ticks_what_passed_and_keeps_the_rest(built_course):
    roadmap = built_course.root / "ROADMAP.md"
    roadmap.write_text(roadmap.read_text() + "my check-in\n")
    invoke(built_course.root, "run", "01/passes")
    invoke(built_course.root, "run", "01/mismatch")
    text = roadmap.read_text()
    assert "- [x] `01_fixture/passes`" in text and "- [ ] `01_fixture/mismatch`" in text
    assert text.endswith("my check-in\n")


def test_solutions_runs_leave_the_learner_files_alone(built_course):
    progress = built_course.root / "progress.md"
    progress.write_text("untouched\n")
    invoke(built_course.root, "run", "01/passes", "--solutions")
    assert progress.read_text() == "untouched\n"


def test_list_shows_the_last_learner_status(built_course):
    invoke(built_course.root, "run", "01/todo")
    listing = invoke(built_course.root, "list").stdout
    assert re.search(r"^\s+todo\s+An untouched stub\s+todo\s+\d{4}-\d\d-\d\d\s*$", listing, re.M)
    assert listing.index("passes") < listing.index("no_gpu")


def test_emulate_grades_the_solutions_in_their_own_tree_without_the_gpu_note(course, no_gpu):
    # The fixture builds its plain C++ solution for any variant but learner, so the emulated
    # variant grades as the solutions do, in build/emulated.
    result = invoke(course, "run", "01/passes", "--emulate")
    assert result.exit_code == 0, result.stdout
    assert rows(result.stdout)["passes"][0][1] == "pass"
    # The table says whose code passed: the reference solutions, not the learner's.
    assert result.stdout.splitlines()[0].startswith(
        "01_fixture (reference solutions on the CPU emulator)")
    assert "no NVIDIA GPU visible" not in result.stderr
    assert (course / "build/emulated/bin/01_fixture.passes.emulated").is_file()


def test_modules_the_emulator_does_not_run_are_skipped_with_the_reason(course):
    tree = BuildTree(load_course(course), EMULATED, course / "build/emulated",
                     defines=("-DCOURSE_EMULATED_MODULES=06_softmax_norms",))
    [result] = grade(tree, [load_course(course).exercises[0]], log=lambda line: None)
    assert result.outcome.status == "skipped"
    assert result.outcome.detail == [
        "not emulated: the CPU emulator runs 06_softmax_norms (COURSE_EMULATED_MODULES in "
        "dev/emu/Emulate.cmake)"]


def test_a_quiet_step_shows_a_spinner_with_its_latest_line_on_a_terminal(monkeypatch, capsys):
    # Issue 11, item 9: on a terminal, a configure shows what CMake is doing while it runs.
    from grader.activity import StderrLog, activity
    monkeypatch.setenv("FORCE_COLOR", "1")
    with activity(StderrLog(), "configuring build/learner") as step:
        step("-- Detecting CXX compiler ABI info")
    stderr = capsys.readouterr().err
    assert "Detecting CXX compiler ABI info" in stderr
    assert stderr.endswith("configuring build/learner: done\n")


def test_a_failure_of_code_that_can_race_says_how_to_find_a_race(course):
    # A race whose wrong bits are the same every run looks like any mismatch: where the code uses
    # shared memory, atomics or barriers, the failure says that racecheck sees it.
    stub = course / "modules/01_fixture/mismatch.cpp"
    stub.write_text(stub.read_text() + "// one block: no __syncthreads() needed\n")
    result = invoke(course, "run", "01/mismatch")
    assert rows(result.stdout)["mismatch"][-1] == (
        "a wrong result that is the same on every run can still be a race: `grader sanitize "
        "01_fixture/mismatch` runs racecheck (shared memory) and the other sanitizers on the "
        "correctness cases")


def test_a_failed_promise_of_speed_gets_no_hint_about_races():
    # flash_causal's "the causal run takes 90% of the non-causal run's time" is no wrong value:
    # the racecheck hint under it pointed the learner at the wrong mistake (seen on the H100).
    from grader.grading import only_speed_failed

    def report(*tests):
        return {"testsuites": [{"testsuite": list(tests)}]}
    speed = {"name": "SkipsMaskedTiles", "speed_failure": "1", "failures": [{"failure": "slow"}]}
    values = {"name": "Correctness", "failures": [{"failure": "`O`: 3 elements are wrong"}]}
    both = {**speed, "failures": [{"failure": "`O` is wrong"}, {"failure": "slow"}]}
    assert only_speed_failed(report(speed))
    assert not only_speed_failed(report(speed, values))
    assert not only_speed_failed(report(both))
    assert not only_speed_failed(report(values))
    assert not only_speed_failed(None)
