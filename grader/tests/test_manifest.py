"""Manifests (module.toml) and selectors."""
import pytest

from grader.course import load_course, select, select_one
from grader.errors import UserError
from grader.manifest import DEFAULT_TIMEOUT_S, cmake_view, read_module

HEADER = '[module]\ntitle = "Basics"\nweek = 1\n'
EXERCISE = '''
[[exercise]]
id = "{id}"
title = "Vector add"
file = "{id}.cu"
checker = "tests/{id}_test.cu"
min_sm = 75
metric = "GB/s"
baseline = "copy"
target = 0.9
hints = ["nudge", "answer"]
'''


def problems_of(tmp_path, text: str, folder: str = "01_basics") -> list[str]:
    module_dir = tmp_path / folder
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(text)
    return read_module(module_dir)[1]


def test_a_valid_manifest_reads_with_defaults(tmp_path):
    module_dir = tmp_path / "01_basics"
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(HEADER + EXERCISE.format(id="vector_add"))
    module, problems = read_module(module_dir)
    assert problems == []
    [exercise] = module.exercises
    assert (module.name, module.title, module.week) == ("01_basics", "Basics", 1)
    assert exercise.key == "01_basics/vector_add" and exercise.timeout_s == DEFAULT_TIMEOUT_S
    assert exercise.hints == ("nudge", "answer") and exercise.target == 0.9


@pytest.mark.parametrize("edit, problem", [
    (lambda text: text.replace('baseline = "copy"\n', ""), "missing key 'baseline'"),
    (lambda text: text.replace("min_sm = 75", "min_sm = true"), "'min_sm' must be an integer"),
    (lambda text: text.replace('hints = ["nudge", "answer"]', 'hints = ["only one"]'),
     "'hints' needs at least 2"),
    (lambda text: text.replace('baseline = "copy"', 'baseline = ""'), "go together"),
    (lambda text: text.replace('metric = "GB/s"', 'metric = ""').replace('baseline = "copy"',
                                                                       'baseline = ""'),
     "a 'target' needs a 'baseline'"),
    (lambda text: text.replace("target = 0.9", "target = 0.9\nhint = 'typo'"),
     "unknown key 'hint'"),
    (lambda text: text.replace('id = "vector_add"', "id = 'vector_add'"),
     "write id on one line at column 0"),
    (lambda text: text.replace("min_sm = 75", "  min_sm = 75"), "write min_sm on one line"),
    (lambda text: text.replace("[[exercise]]", "  [[exercise]]"), "CMake sees 0 [[exercise]]"),
    (lambda text: text.replace('id = "vector_add"', 'id = "VectorAdd"'), "snake_case"),
    (lambda text: text.replace("week = 1", 'week = "one"'), "'week' must be an integer"),
    (lambda text: text + "[extra]\n", "unknown top-level key 'extra'"),
    (lambda text: text + "this is not toml", "not valid TOML"),
    (lambda text: text.replace("target = 0.9", 'target = 0.9\nfast_solution = "fast.cpp"'),
     "'fast_solution' names a file of solutions/<module>/, beside"),
    (lambda text: text.replace("target = 0.9", 'target = 0.9\n  fast_solution = "fast.cu"'),
     "write fast_solution on one line at column 0"),
    (lambda text: text.replace("target = 0.9", 'target = 0.9\nfast_arch = "90a"'),
     "'fast_arch' may be 90a, beside a 'fast_solution'"),
    (lambda text: text.replace("target = 0.9", 'target = 0.9\nfast_solution = "vector_add_fast.cu"'
                               '\nfast_arch = "90"'),
     "'fast_arch' may be 90a"),
    (lambda text: text + 'case_targets = { "n=2^25" = 0.9, "n=2^20" = 0 }\n',
     "'case_targets' maps timed-case labels to ratios > 0"),
    (lambda text: text + 'case_targets = { "n=2^25" = 0.95 }\n',
     "'target' must be the lowest of 'case_targets' (0.95)"),
])
def test_manifest_problems_are_found(tmp_path, edit, problem):
    problems = problems_of(tmp_path, edit(HEADER + EXERCISE.format(id="vector_add")))
    assert any(problem in line for line in problems), problems
    assert all(line.startswith("modules/01_basics/module.toml: ") for line in problems)


def test_duplicate_ids_are_found(tmp_path):
    text = HEADER + EXERCISE.format(id="vector_add") + EXERCISE.format(id="vector_add")
    assert problems_of(tmp_path, text) == [
        "modules/01_basics/module.toml: exercise id 'vector_add' is used more than once"]


def test_a_module_folder_must_be_zero_padded(tmp_path):
    problems = problems_of(tmp_path, HEADER + EXERCISE.format(id="x"), folder="1_basics")
    assert any("is not NN_topic" in line for line in problems)


def test_cmake_view_reads_what_course_cmake_reads():
    text = (HEADER + EXERCISE.format(id="a") + 'fast_solution = "a_fast.cu"\nfast_arch = "90a"\n'
            + EXERCISE.format(id="b").replace("min_sm = 75", ""))
    assert cmake_view(text) == [
        {"id": "a", "file": "a.cu", "checker": "tests/a_test.cu", "min_sm": "75",
         "fast_solution": "a_fast.cu", "fast_arch": "90a"},
        {"id": "b", "file": "b.cu", "checker": "tests/b_test.cu"}]


def test_a_fast_solution_is_optional(tmp_path):
    module_dir = tmp_path / "01_basics"
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(
        HEADER + EXERCISE.format(id="a") + 'fast_solution = "a_fast.cu"\n'
        + EXERCISE.format(id="b"))
    module, problems = read_module(module_dir)
    assert problems == []
    assert [exercise.fast_solution for exercise in module.exercises] == ["a_fast.cu", ""]


def test_case_targets_name_the_judged_cases(tmp_path):
    module_dir = tmp_path / "01_basics"
    module_dir.mkdir()
    (module_dir / "module.toml").write_text(
        HEADER + EXERCISE.format(id="a") + 'case_targets = { "D128" = 0.9, "D128 causal" = 1 }\n'
        + EXERCISE.format(id="b"))
    module, problems = read_module(module_dir)
    assert problems == []
    a, b = module.exercises
    assert a.case_targets == (("D128", 0.9), ("D128 causal", 1.0)) and a.target_text == "per case"
    assert b.case_targets == () and b.target_text == ">= 90%"


@pytest.mark.parametrize("selector, keys", [
    ("all", 8),
    ("01", 8),
    ("01_fixture", 8),
    ("01/todo", ["01_fixture/todo"]),
    ("01_fixture/hangs", ["01_fixture/hangs"]),
])
def test_selectors(course, selector, keys):
    selected = [exercise.key for exercise in select(load_course(course), selector)]
    assert selected == keys if isinstance(keys, list) else len(selected) == keys


def test_an_unknown_module_lists_the_valid_ones(course):
    with pytest.raises(UserError, match=r"^unknown module '02': valid modules are 01_fixture "
                                        r"\(or all\)$"):
        select(load_course(course), "02")


def test_an_unknown_exercise_lists_the_valid_ids(course):
    with pytest.raises(UserError, match=r"unknown exercise 'nope' in 01_fixture: valid ids are "
                                        r"01_fixture/passes, 01_fixture/mismatch, .*no_gpu$"):
        select(load_course(course), "01/nope")


def test_one_exercise_means_module_and_id(course):
    with pytest.raises(UserError, match="not one exercise: write module/exercise"):
        select_one(load_course(course), "01")


def test_a_broken_manifest_stops_loading_with_one_line(course):
    manifest = course / "modules/01_fixture/module.toml"
    manifest.write_text(manifest.read_text().replace("week = 1\n", ""))
    with pytest.raises(UserError, match=r"missing key 'week' \(`grader check --no-build` lists"):
        load_course(course)
