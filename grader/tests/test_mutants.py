"""Planted bugs: applying them, restoring the solution, and a whole run on the fixture."""
import os
import stat
from pathlib import Path

import pytest

from grader import mutants
from grader.course import load_course
from grader.mutants import BrokenMutant, Mutant, apply_mutant, mutated, read_mutants
from grader.results import FAIL, Outcome, Result
from grader.tests.conftest import invoke

MUTANTS = '''
[[mutant]]
exercise = "mismatch"
name = "plus_instead_of_times"
replace = ["2 * x", "2 + x"]
expect = "fail"
message = "Which is: 23"

[[mutant]]
exercise = "passes"
name = "trap"
replace = ["return 2 * x;", "__builtin_trap();"]
expect = "crash"
message = "SIGILL"

[[mutant]]
exercise = "todo"
name = "expects_the_wrong_message"
replace = ["2 * x", "3 * x"]
expect = "fail"
message = "this text is nowhere"

[[mutant]]
exercise = "hangs"
name = "text_not_in_the_solution"
replace = ["no such text", "x"]
expect = "fail"
message = "x"

[[mutant]]
exercise = "hangs"
name = "never_returns"
replace = ["return 2 * x;", "for (volatile int spin = 0;;) spin = 1;"]
expect = "timeout"
message = "killed after"

[[mutant]]
exercise = "passes"
name = "shifts_too_far"
fast = true
replace = ["x<<1", "x << 2"]
expect = "fail"
message = "Which is: 84"
'''


@pytest.fixture
def mutant(course) -> Mutant:
    exercise = load_course(course).exercises[0]
    return Mutant(exercise, "off", old="i < n", new="i <= n", expect="fail", message="last")


def test_a_replacement_found_once_is_applied(mutant):
    assert apply_mutant("for (i = 0; i < n; ++i)", mutant) == "for (i = 0; i <= n; ++i)"


@pytest.mark.parametrize("source", ["for (i = 0; i<n; ++i)", "for (i = 0; i <\n      n; ++i)"])
def test_white_space_does_not_count_in_a_replacement(mutant, source):
    assert apply_mutant(source, mutant) == "for (i = 0; i <= n; ++i)"


def test_words_apart_stay_apart_and_words_stay_whole(mutant):
    spaced = Mutant(mutant.exercise, "x", old="int i", new="long i", expect="fail", message="")
    assert apply_mutant("int  i = 0;", spaced) == "long i = 0;"
    with pytest.raises(BrokenMutant, match="occurs 0 times"):
        apply_mutant("inti = 0; in t i;", spaced)


@pytest.mark.parametrize("source, count", [("no loop", 0), ("i < n && i < n", 2)])
def test_a_replacement_not_found_exactly_once_is_a_broken_mutant(mutant, source, count):
    with pytest.raises(BrokenMutant, match=f"occurs {count} times"):
        apply_mutant(source, mutant)


def test_the_solution_is_restored_even_when_the_build_fails(mutant, tmp_path):
    path = tmp_path / "solution.cu"
    path.write_text("if (i < n) c[i] = a[i];\n")
    with pytest.raises(RuntimeError):
        with mutated(path, mutant):
            assert path.read_text() == "if (i <= n) c[i] = a[i];\n"
            raise RuntimeError("the build broke")
    assert path.read_text() == "if (i < n) c[i] = a[i];\n"


def test_a_broken_mutant_leaves_the_file_untouched(mutant, tmp_path):
    path = tmp_path / "solution.cu"
    path.write_text("nothing to replace\n")
    with pytest.raises(BrokenMutant):
        with mutated(path, mutant):
            pass
    assert path.read_text() == "nothing to replace\n"


def test_mutants_files_are_validated(course):
    (course / "solutions/01_fixture/mutants.toml").write_text(
        '[[mutant]]\nexercise = "nope"\nname = "a"\nreplace = ["x", "y"]\nexpect = "fail"\n'
        'message = ""\n[[mutant]]\nexercise = "todo"\nname = "b"\nreplace = ["x"]\n'
        'expect = "pass"\nmessage = ""\n[[mutant]]\nname = "c"\n')
    mutants, problems = read_mutants(load_course(course), load_course(course).exercises)
    assert mutants == []
    assert problems == [
        "solutions/01_fixture/mutants.toml: mutant 'a': no exercise 'nope' in this module",
        "solutions/01_fixture/mutants.toml: mutant 'b': expect must be one of fail, crash, timeout",
        "solutions/01_fixture/mutants.toml: mutant 'c': missing exercise, replace, expect, message",
    ]


def test_a_mutant_may_delete_text_but_must_find_some(course):
    mutants_file = course / "solutions/01_fixture/mutants.toml"
    mutants_file.write_text('[[mutant]]\nexercise = "todo"\nname = "deleted"\n'
                            'replace = ["return 2 * x;", ""]\nexpect = "fail"\nmessage = ""\n'
                            '[[mutant]]\nexercise = "todo"\nname = "from_nothing"\n'
                            'replace = ["", "x"]\nexpect = "fail"\nmessage = ""\n')
    exercises = load_course(course).exercises
    mutants, problems = read_mutants(load_course(course), exercises)
    assert [mutant.name for mutant in mutants] == ["deleted"]
    assert problems == ["solutions/01_fixture/mutants.toml: mutant 'from_nothing': replace must "
                        "be [old, new] (old not empty), message a string"]
    # Only the selected exercises' modules are read.
    assert read_mutants(load_course(course), []) == ([], [])


def test_a_fast_mutant_needs_a_fast_solution(course):
    (course / "solutions/01_fixture/mutants.toml").write_text(
        '[[mutant]]\nexercise = "todo"\nname = "a"\nfast = true\nreplace = ["x", "y"]\n'
        'expect = "fail"\nmessage = ""\n[[mutant]]\nexercise = "passes"\nname = "b"\n'
        'fast = "yes"\nreplace = ["x", "y"]\nexpect = "fail"\nmessage = ""\n[[mutant]]\n'
        'exercise = "passes"\nname = "c"\nfast = true\nsolution = "x"\nreplace = ["x", "y"]\n'
        'expect = "fail"\nmessage = ""\n')
    mutants, problems = read_mutants(load_course(course), load_course(course).exercises)
    assert mutants == []
    assert problems == [
        "solutions/01_fixture/mutants.toml: mutant 'a': fast = true, but 'todo' has no "
        "fast_solution in its manifest",
        "solutions/01_fixture/mutants.toml: mutant 'b': fast must be true or false",
        "solutions/01_fixture/mutants.toml: mutant 'c': unknown key solution"]


def test_a_planted_bug_is_caught_only_by_what_the_learner_is_shown(course, monkeypatch, tmp_path):
    # The message in the full failure text but beyond the detail lines under the table: not
    # caught, since a learner would not see it without --verbose.
    exercise = load_course(course).exercises[0]
    hidden = Outcome(FAIL, detail=["`c`: 3 of 10 elements are wrong"],
                     failures=["`c`: 3 of 10 elements are wrong\n  ...\n  check the ceil_div"])
    monkeypatch.setattr(mutants, "grade", lambda *args: [Result(exercise, "solution", hidden, "x")])
    (tmp_path / exercise.module).mkdir()
    (tmp_path / exercise.module / exercise.file).write_text("i < n")
    planted = Mutant(exercise, "tail", old="i < n", new="i < n - 1", expect="fail",
                     message="ceil_div")
    outcome = mutants._run_one(None, tmp_path, planted, lambda line: None)
    assert not outcome.ok and outcome.got == "fail: `c`: 3 of 10 elements are wrong"
    shown = Outcome(FAIL, detail=hidden.failures[0].splitlines())
    monkeypatch.setattr(mutants, "grade", lambda *args: [Result(exercise, "solution", shown, "x")])
    assert mutants._run_one(None, tmp_path, planted, lambda line: None).ok


def test_a_longer_timeout_reaches_every_planted_bug_but_a_hang(course, monkeypatch, tmp_path):
    # `grader check --mutants --timeout` (copies sharing a GPU): a planted bug expected to fail
    # gets it; a planted hang keeps the manifest's timeout (None: grade reads the manifest's).
    exercise = load_course(course).exercises[0]
    timeouts = []

    def grade(tree, exercises, log, timeout_s=None):
        timeouts.append(timeout_s)
        return [Result(exercise, "solution", Outcome(FAIL, detail=["wrong"]), "x")]

    monkeypatch.setattr(mutants, "grade", grade)
    (tmp_path / exercise.module).mkdir()
    (tmp_path / exercise.module / exercise.file).write_text("i < n")
    for expect in ("fail", "timeout"):
        planted = Mutant(exercise, expect, old="i < n", new="i <= n", expect=expect,
                         message="wrong")
        mutants._run_one(None, tmp_path, planted, lambda line: None, 300.0)
    assert timeouts == [300.0, None]


def test_a_memcheck_mutant_that_passes_its_checker_is_caught_by_memcheck(course, gpu,
                                                                          monkeypatch, tmp_path):
    # A stand-in compute-sanitizer with memcheck's report of an out-of-bounds write (recorded on
    # a GPU): the planted bug passes its checker and is caught by what memcheck shows.
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "compute-sanitizer"
    logs = Path(__file__).parent / "fixtures" / "sanitizer"
    script.write_text(f'#!/bin/sh\ncat "{logs}/memcheck_out_of_bounds.log"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    (course / "solutions/01_fixture/mutants.toml").write_text(
        '[[mutant]]\nexercise = "passes"\nname = "reads_past_the_end"\nmemcheck = true\n'
        'replace = ["return 2 * x;", "return x + x;"]\nexpect = "fail"\n'
        'message = "Invalid __global__ write"\n')
    result = invoke(course, "check", "--no-build", "--mutants", "01/passes")
    assert result.exit_code == 0, result.stdout
    assert "compute-sanitizer --tool memcheck: 01_fixture/passes" in result.stderr
    assert "fail: memcheck: 35 errors" in result.stdout


def test_memcheck_is_true_or_false_and_gpu_only_a_text(course):
    (course / "solutions/01_fixture/mutants.toml").write_text(
        '[[mutant]]\nexercise = "todo"\nname = "a"\nmemcheck = 1\nreplace = ["x", "y"]\n'
        'expect = "fail"\nmessage = ""\n[[mutant]]\nexercise = "todo"\nname = "b"\n'
        'gpu_only = true\nreplace = ["x", "y"]\nexpect = "fail"\nmessage = ""\n')
    mutants_found, problems = read_mutants(load_course(course), load_course(course).exercises)
    assert mutants_found == []
    assert problems == [
        "solutions/01_fixture/mutants.toml: mutant 'a': memcheck must be true or false",
        "solutions/01_fixture/mutants.toml: mutant 'b': gpu_only must be a text"]


def test_the_fixtures_own_mutants_are_well_formed(course):
    mutants, problems = read_mutants(load_course(course), load_course(course).exercises)
    assert problems == [] and [m.label for m in mutants] == [
        "01_fixture/mismatch:plus_instead_of_times", "01_fixture/passes:trap"]


def test_a_mutants_run_catches_planted_bugs_and_reports_the_rest(course, gpu):
    (course / "solutions/01_fixture/mutants.toml").write_text(MUTANTS)
    solution = course / "solutions/01_fixture/mismatch.cpp"
    original = solution.read_text()
    result = invoke(course, "check", "--no-build", "--mutants")
    assert result.exit_code == 1
    table = result.stdout
    assert "01_fixture/mismatch:plus_instead_of_times" in table
    assert "01_fixture/passes:trap" in table
    assert [line.split()[-1] for line in table.splitlines()
            if line.strip().startswith("01_fixture/")] == ["yes", "yes", "NO", "NO", "yes", "yes"]
    assert ("mutant 01_fixture/todo:expects_the_wrong_message not caught: expected fail: this "
            "text is nowhere, got fail: Expected equality of these values:") in table
    assert ("mutant 01_fixture/hangs:text_not_in_the_solution not caught: expected fail: x, got "
            "broken mutant: its replace text occurs 0 times") in table
    assert table.endswith("2 problems found\n")
    # The real solutions are never touched; the scratch copy is restored after each mutant.
    assert solution.read_text() == original
    assert (course / "build/mutants/src/01_fixture/mismatch.cpp").read_text() == original
    # The fast reference's planted bug went into its own file, built as the fast variant.
    assert "01_fixture/passes:fast:shifts_too_far" in table
    assert (course / "build/mutants-fast/bin/01_fixture.passes.fast").is_file()


def test_mutant_runs_only_the_planted_bugs_it_names(course, gpu):
    (course / "solutions/01_fixture/mutants.toml").write_text(MUTANTS)
    result = invoke(course, "check", "--no-build", "--mutants", "--mutant", "plus_instead_of_times",
                    "--mutant", "trap")
    assert result.exit_code == 0
    assert [line.split()[0] for line in result.stdout.splitlines()
            if line.strip().startswith("01_fixture/")] == [
        "01_fixture/mismatch:plus_instead_of_times", "01_fixture/passes:trap"]


def test_without_a_gpu_the_emulator_runs_the_planted_bugs(course, no_gpu):
    # The fixture builds its plain C++ solution for any variant but learner, so the emulated
    # variant runs here as it would on the CPU emulator: in its own tree, no GPU asked for.
    (course / "solutions/01_fixture/mutants.toml").write_text(MUTANTS)
    result = invoke(course, "check", "--no-build", "--mutants", "--emulate")
    assert result.exit_code == 1
    assert "those of the fast references run on a GPU" in result.stderr
    assert [line.split()[-1] for line in result.stdout.splitlines()
            if line.strip().startswith("01_fixture/")] == ["yes", "yes", "NO", "NO", "yes"]
    assert (course / "build/mutants-emulated/bin/01_fixture.mismatch.emulated").is_file()
    assert not (course / "build/mutants").exists()


def test_arch_is_a_number_of_a_course_architecture(course):
    (course / "solutions/01_fixture/mutants.toml").write_text(
        '[[mutant]]\nexercise = "todo"\nname = "a"\narch = "75"\nreplace = ["x", "y"]\n'
        'expect = "fail"\nmessage = ""\n[[mutant]]\nexercise = "todo"\nname = "b"\n'
        'arch = 61\nreplace = ["x", "y"]\nexpect = "fail"\nmessage = ""\n[[mutant]]\n'
        'exercise = "todo"\nname = "c"\narch = 75\nreplace = ["x", "y"]\nexpect = "fail"\n'
        'message = ""\n')
    found, problems = read_mutants(load_course(course), load_course(course).exercises)
    assert problems == [
        "solutions/01_fixture/mutants.toml: mutant 'a': arch must be a number",
        "solutions/01_fixture/mutants.toml: mutant 'b': arch is a CUDA architecture the course "
        "builds for, 75 or more"]
    assert [(m.label, m.arch) for m in found] == [("01_fixture/todo:sm75:c", 75)]


def test_a_mutant_of_one_architecture_builds_in_a_tree_for_it(course, no_gpu):
    # The fixture's planted bug marked arch = 75 goes to a tree of its own, configured for that
    # architecture (on the emulator: COURSE_EMULATED_ARCH), beside the usual one.
    (course / "solutions/01_fixture/mutants.toml").write_text(
        MUTANTS.split("[[mutant]]\nexercise = \"passes\"")[0] + "arch = 75\n")
    result = invoke(course, "check", "--no-build", "--mutants", "--emulate", "01/mismatch")
    assert "01_fixture/mismatch:sm75:plus_instead_of_times" in result.stdout
    cache = (course / "build/mutants-emulated-sm75/CMakeCache.txt").read_text()
    assert "COURSE_EMULATED_ARCH:UNINITIALIZED=75" in cache
