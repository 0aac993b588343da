"""User errors, hints and finding the course: no build needed."""
import pytest

from grader.tests.conftest import invoke

NVCC_FAILING_CMAKE = """cmake_minimum_required(VERSION 3.24)
project(no_cuda LANGUAGES NONE)
message(FATAL_ERROR "No CMAKE_CUDA_COMPILER could be found.")
"""


def assert_one_line_usage_error(result, *fragments):
    assert result.exit_code == 2
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    for fragment in fragments:
        assert fragment in line


def test_unknown_module_is_one_line_with_the_valid_ids(course):
    assert_one_line_usage_error(invoke(course, "run", "07"),
                                "unknown module '07': valid modules are 01_fixture (or all)")


def test_unknown_exercise_is_one_line_with_the_valid_ids(course):
    assert_one_line_usage_error(invoke(course, "run", "01_fixture/nope"),
                                "unknown exercise 'nope' in 01_fixture: valid ids are "
                                "01_fixture/passes, 01_fixture/mismatch")


def test_a_missing_option_value_is_a_usage_error(course):
    assert invoke(course, "run", "01", "--timeout").exit_code == 2


def test_hints_advance_stay_on_the_last_and_reset(course):
    shown = [invoke(course, "hint", "01/passes").stdout.splitlines()[0] for _ in range(4)]
    assert shown == ["Hint 1 of 3: first nudge of passes", "Hint 2 of 3: second hint of passes",
                     "Hint 3 of 3: last hint of passes", "Hint 3 of 3: last hint of passes"]
    assert invoke(course, "hint", "01/passes").stdout.endswith("(That is the last hint.)\n")
    assert "reset" in invoke(course, "hint", "01/passes", "--reset").stdout
    assert invoke(course, "hint", "01/passes").stdout == "Hint 1 of 3: first nudge of passes\n"


def test_hint_all_repeats_what_was_shown_without_revealing_more(course):
    before_any = invoke(course, "hint", "01/todo", "--all").stdout
    assert before_any.startswith("No hint of 01_fixture/todo revealed yet")
    invoke(course, "hint", "01/todo")
    assert invoke(course, "hint", "01/todo", "--all").stdout == "Hint 1 of 2: first nudge of todo\n"
    assert (course / ".grader/hints.json").read_text().strip() == '{\n  "01_fixture/todo": 1\n}'


def test_hints_are_per_exercise(course):
    invoke(course, "hint", "01/todo")
    assert invoke(course, "hint", "01/hangs").stdout.startswith("Hint 1 of 2")


def test_hint_needs_one_exercise(course):
    assert_one_line_usage_error(invoke(course, "hint", "01"), "not one exercise")


def test_the_root_is_found_from_a_subfolder(course, monkeypatch):
    monkeypatch.chdir(course / "modules/01_fixture/tests")
    assert "01_fixture" in invoke(None, "list").stdout


def test_the_root_comes_from_grader_root(course, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "01_fixture" in invoke(None, "list", env={"GRADER_ROOT": str(course)}).stdout


def test_outside_a_course_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_one_line_usage_error(invoke(None, "list"), "no course found", "pass --root")
    assert_one_line_usage_error(invoke(tmp_path, "list"), "is not a course root")


def test_help_works_outside_a_course(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(None, "run", "--help")
    assert result.exit_code == 0 and "--solutions" in result.stdout


def test_missing_build_tools_are_named(course, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert_one_line_usage_error(invoke(course, "run", "01"), "cmake and ninja not found on PATH",
                                "install")


def test_a_missing_cuda_compiler_is_one_line(course, no_gpu):
    (course / "CMakeLists.txt").write_text(NVCC_FAILING_CMAKE)
    result = invoke(course, "run", "01")
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1] == (
        "Error: nvcc (the CUDA compiler) was not found: install the CUDA toolkit, or set CUDACXX "
        "to nvcc, or add the toolkit's bin folder to PATH (the full log: "
        "build/learner/grader-configure.log)")
    assert "No CMAKE_CUDA_COMPILER" in (course / "build/learner/grader-configure.log").read_text()


def test_another_configure_failure_says_what_cmake_said_not_nvcc(course, no_gpu):
    # Issue 11, item 2: every configure failure was "nvcc not found", the pattern matching this
    # normal line of a configure that found nvcc.
    (course / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(x LANGUAGES NONE)\n"
        'message(STATUS "The CUDA compiler identification is NVIDIA 13.0.88")\n'
        "message(FATAL_ERROR boom)\n")
    result = invoke(course, "run", "01")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.splitlines()[-1] == (
        "Error: cmake could not configure build/learner: boom (CMakeLists.txt:4; the full log: "
        "build/learner/grader-configure.log)")
    assert not (course / ".grader/results.json").exists()


@pytest.mark.parametrize("command", [["list"], ["run", "01"], ["hint", "01/todo"]])
def test_a_broken_manifest_is_one_line_pointing_at_check(course, command):
    manifest = course / "modules/01_fixture/module.toml"
    manifest.write_text(manifest.read_text().replace('title = "A wrong answer"\n', ""))
    assert_one_line_usage_error(invoke(course, *command),
                                "exercise 'mismatch': missing key 'title'", "grader check")


# --- issue 28, section 2: what a newcomer types ---------------------------------------------

@pytest.mark.parametrize("selector", ["modules/01_fixture/todo.cpp", "modules/01_fixture/todo.h",
                                      "modules/01_fixture/tests/todo_test.cpp",
                                      "solutions/01_fixture/todo.cpp"])
def test_a_path_names_its_exercise(course, monkeypatch, selector):
    monkeypatch.chdir(course)
    assert invoke(None, "hint", selector).stdout == "Hint 1 of 2: first nudge of todo\n"


def test_a_module_folder_names_its_exercises_and_a_stray_file_is_one_line(course, monkeypatch):
    monkeypatch.chdir(course / "modules")
    assert_one_line_usage_error(invoke(None, "hint", "01_fixture/"), "not one exercise")
    (course / "modules/01_fixture/notes.cu").write_text("// not an exercise\n")
    assert_one_line_usage_error(invoke(None, "run", "01_fixture/notes.cu"),
                                "01_fixture/notes.cu is not a file of an exercise of 01_fixture")


def test_a_module_without_its_manifest_is_named_with_the_way_back(course):
    (course / "modules/01_fixture/module.toml").unlink()
    restore = "modules/01_fixture has no module.toml, so none of its exercises is built or graded"
    assert_one_line_usage_error(invoke(course, "run", "01"), restore)
    checked = invoke(course, "check", "--no-build")
    assert checked.exit_code == 1 and restore in checked.stdout
    assert "git checkout -- modules/01_fixture/module.toml" in checked.stdout


def test_a_clone_that_runs_another_clones_grader_is_told_what_to_do(course):
    # A copied clone keeps the original's .venv, whose editable install runs the original's
    # grader: this course has a grader of its own, and it is not the one running.
    (course / "grader").mkdir()
    (course / "grader/cli.py").write_text("# this clone's own grader\n")
    result = invoke(course, "list")
    assert result.exit_code == 0
    assert (f"not this course's {course / 'grader'} (a clone copied with its .venv runs the "
            "original's grader)") in result.stderr
    assert "python -m pip install -e ." in result.stderr
