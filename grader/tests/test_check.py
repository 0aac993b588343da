"""`grader check`: the course's own health."""
import os
import stat
from pathlib import Path

from grader.tests.conftest import invoke, make_course

SANITIZER_LOGS = Path(__file__).parent / "fixtures" / "sanitizer"

ONLY_TODO_MANIFEST = '''[module]
title = "Fixture: the todo exercise alone"
week = 1

[[exercise]]
id = "todo"
title = "An untouched stub"
file = "todo.cpp"
checker = "tests/todo_test.cpp"
min_sm = 75
metric = ""
baseline = ""
target = 0
hints = ["first nudge of todo", "last hint of todo"]
'''


def problems(result) -> list[str]:
    return result.stdout.splitlines()[:-1]


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def test_the_fixture_passes_the_static_checks(course):
    result = invoke(course, "check", "--no-build")
    assert result.exit_code == 0 and result.stdout == "course OK: 8 exercises checked\n"


def test_static_checks_list_every_problem(course):
    manifest = course / "modules/01_fixture/module.toml"
    edit(manifest, 'id = "todo"', 'id = "mismatch"')  # a duplicate, whose files are the todo's
    edit(manifest, 'baseline = "copy"\n', "")
    edit(course / "modules/01_fixture/hangs.cpp", "TODO", "done")
    (course / "modules/01_fixture/segfault.h").unlink()
    (course / "solutions/01_fixture/no_gpu.cpp").unlink()
    result = invoke(course, "check", "--no-build")
    assert result.exit_code == 1
    assert problems(result) == [
        "modules/01_fixture/module.toml: exercise 'passes': missing key 'baseline'",
        "modules/01_fixture/module.toml: exercise id 'mismatch' is used more than once",
    ]
    assert result.stdout.endswith("2 problems found\n")
    edit(manifest, 'id = "mismatch"\ntitle = "An untouched stub"', 'id = "todo"\ntitle = "x"')
    edit(manifest, 'metric = "GB/s"\n', 'metric = "GB/s"\nbaseline = "copy"\n')
    assert problems(invoke(course, "check", "--no-build")) == [
        "01_fixture/segfault: its contract modules/01_fixture/segfault.h is missing",
        "01_fixture/hangs: the stub modules/01_fixture/hangs.cpp has no TODO",
        "01_fixture/hangs: the stub modules/01_fixture/hangs.cpp has no COURSE_TODO",
        "01_fixture/no_gpu: its solution solutions/01_fixture/no_gpu.cpp is missing",
    ]


def test_a_missing_fast_solution_is_a_problem(course):
    (course / "solutions/01_fixture/passes_fast.cpp").unlink()
    result = invoke(course, "check", "--no-build")
    assert problems(result) == ["01_fixture/passes: its fast solution "
                                "solutions/01_fixture/passes_fast.cpp is missing"]


def test_a_forbidden_include_in_a_stub_is_a_problem(course):
    edit(course / "modules/01_fixture/todo.cpp", '#include "todo.h"',
         '#include "todo.h"\n#  include <thrust/sort.h>')
    assert problems(invoke(course, "check", "01/todo", "--no-build")) == [
        "01_fixture/todo: the stub modules/01_fixture/todo.cpp includes <thrust/sort.h>, which an "
        "exercise may not use"]


def test_without_a_gpu_check_builds_both_variants_and_runs_nothing(built_course, no_gpu):
    result = invoke(built_course.root, "check")
    assert result.exit_code == 1
    assert problems(result) == ["01_fixture/syntax_error: the learner does not build: "
                                "modules/01_fixture/syntax_error.cpp:4:32: error: expected ‘;’ "
                                "before ‘}’ token"]
    assert "building only, no checker is run" in result.stderr


def test_with_a_gpu_every_stub_must_be_todo_and_every_solution_pass(built_course, gpu):
    result = invoke(built_course.root, "check")
    assert result.exit_code == 1
    found = problems(result)
    assert [line.split(":")[0] for line in found] == [
        "01_fixture/passes", "01_fixture/mismatch", "01_fixture/syntax_error",
        "01_fixture/segfault", "01_fixture/cuda_error", "01_fixture/hangs", "01_fixture/no_gpu"]
    assert found[1] == ("01_fixture/mismatch: the learner reports fail (expected todo): "
                        "modules/01_fixture/tests/mismatch_test.cpp:6")
    assert "the learner reports timeout (expected todo)" in found[5]


def test_with_a_gpu_a_healthy_course_is_ok(tmp_path, gpu):
    root = make_course(tmp_path / "course")
    (root / "modules/01_fixture/module.toml").write_text(ONLY_TODO_MANIFEST)
    result = invoke(root, "check")
    assert result.exit_code == 0, result.stdout
    assert result.stdout == "course OK: 1 exercise checked\n"


def test_with_a_gpu_memcheck_runs_over_the_solutions(tmp_path, gpu, monkeypatch):
    # A stand-in compute-sanitizer printing memcheck's report of an out-of-bounds write (recorded
    # on a GPU): the solution that passed its checker is a problem all the same.
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "compute-sanitizer"
    script.write_text(f"""#!/bin/sh
echo "exact=$COURSE_EXACT_ALLOCATIONS $@" >> "{folder}/arguments"
cat "{SANITIZER_LOGS}/memcheck_out_of_bounds.log"
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    root = make_course(tmp_path / "course")
    (root / "modules/01_fixture/module.toml").write_text(ONLY_TODO_MANIFEST)
    result = invoke(root, "check")
    assert result.exit_code == 1
    assert problems(result) == [
        "01_fixture/todo: the solution under memcheck: 35 errors; first: Invalid __global__ write "
        "of size 4 bytes (by thread (1,0,0) in block (0,0,0); 1 bytes after the nearest "
        "allocation of size 4 bytes), at transpose.cu:59"]
    arguments = (folder / "arguments").read_text()
    assert arguments.startswith("exact=1 --tool memcheck") and "solution" in arguments


def test_mutants_need_a_gpu(course, no_gpu):
    result = invoke(course, "check", "--mutants")
    assert result.exit_code == 2
    assert result.stderr == ("Error: --mutants needs a GPU: a planted bug is caught by running "
                             "its checker, and nvidia-smi sees no GPU here (--emulate runs it on "
                             "the CPU emulator)\n")


def test_emulate_goes_with_mutants(course):
    result = invoke(course, "check", "--emulate")
    assert result.exit_code == 2
    assert result.stderr == "Error: --emulate goes with --mutants\n"


def test_mutant_goes_with_mutants(course):
    result = invoke(course, "check", "--mutant", "plus_instead_of_times")
    assert result.exit_code == 2
    assert result.stderr == "Error: --mutant goes with --mutants\n"


def test_timeout_goes_with_mutants(course):
    result = invoke(course, "check", "--timeout", "300")
    assert result.exit_code == 2
    assert result.stderr == ("Error: --timeout goes with --mutants (`grader run --timeout` times "
                             "a learner's checkers)\n")


def test_a_mutant_name_not_in_the_selection_is_one_line(course):
    result = invoke(course, "check", "01/mismatch", "--mutants", "--emulate", "--mutant", "trap",
                    "--mutant", "plus_instead_of_times")
    assert result.exit_code == 2
    assert result.stderr == "Error: no planted bug named trap in 01/mismatch\n"
