"""`grader check`: is the course itself healthy? Every problem found, one line each."""
import shutil
from pathlib import Path

from grader import torch_ops, trainer
from grader.build import BuildTree, Log, forbidden_includes
from grader.course import (Course, missing_manifest_message, module_dirs, select,
                           unlisted_module_dirs)
from grader.errors import UserError
from grader.grading import build_exercises, grade, too_few_gpus
from grader.manifest import Exercise, read_module
from grader.results import FAST, LEARNER, PASS, SKIPPED, SOLUTION, TODO, Result, judged_cases
from grader.sanitize import describe, memcheck_summary

STUB_MARKERS = ("TODO", "COURSE_TODO")
VARIANT_NAMES = {LEARNER: "learner", SOLUTION: "solution", FAST: "fast solution"}


def static_problems(root: Path, selector: str) -> tuple[Course, list[Exercise], list[str]]:
    """Manifests (all of them), then the files and stubs of the selected exercises."""
    modules, problems = [], []
    for folder in module_dirs(root):
        module, module_problems = read_module(folder)
        problems += module_problems
        if module:
            modules.append(module)
    problems += [missing_manifest_message(root, folder) for folder in unlisted_module_dirs(root)]
    course = Course(root=root, modules=tuple(modules))
    try:
        exercises = select(course, selector)
    except UserError:
        if problems:  # the selected module may be the one whose manifest is broken
            return course, [], problems
        raise
    return course, exercises, problems + [problem for exercise in exercises
                                          for problem in file_problems(course, exercise)]


def file_problems(course: Course, exercise: Exercise) -> list[str]:
    if exercise.is_trainer:
        return trainer.file_problems(course, exercise)
    if exercise.is_torch:
        return torch_ops.file_problems(course, exercise)
    files = {"stub": course.stub(exercise), "contract": course.contract(exercise),
             "checker": course.checker(exercise), "solution": course.solution(exercise)}
    if exercise.fast_solution:
        files["fast solution"] = course.fast_solution(exercise)
    problems = [f"{exercise.key}: its {role} {course.relative(path)} is missing"
                for role, path in files.items() if not path.is_file()]
    if files["stub"].is_file():
        problems += _stub_problems(course, exercise, files["stub"].read_text(encoding="utf-8"))
    return problems


def _stub_problems(course: Course, exercise: Exercise, stub: str) -> list[str]:
    where = f"{exercise.key}: the stub {course.relative(course.stub(exercise))}"
    problems = [f"{where} has no {marker}" for marker in STUB_MARKERS if marker not in stub]
    return problems + [f"{where} includes <{header}>, which an exercise may not use"
                       for header in forbidden_includes(stub)]


def build_problems(course: Course, exercises: list[Exercise], log: Log,
                   run_checkers: bool) -> list[str]:
    """Builds every variant (the fast one for the exercises that have a fast reference); with a
    GPU, runs them: stubs must say todo, readable solutions pass and meet the target, fast
    references pass and meet the stretch (the target where the manifest has none), and memcheck
    finds nothing in the solutions' correctness cases."""
    problems = []
    for variant in (LEARNER, SOLUTION, FAST):
        tree = BuildTree.standard(course, variant)
        selected = [exercise for exercise in exercises
                    if variant != FAST or exercise.fast_solution]
        if not selected:
            continue
        if run_checkers:
            results = grade(tree, selected, log)
            unrunnable = too_few_gpus(tree, selected)
            for exercise, outcome in unrunnable.items():
                log(f"note: {exercise.key} ({VARIANT_NAMES[variant]}) not run: "
                    f"{_first(outcome.detail)}")
            problems += [problem for result in results
                         if not (result.status == SKIPPED and result.exercise in unrunnable)
                         for problem in _result_problems(result)]
            if variant != LEARNER:
                problems += memcheck_problems(tree, results, log)
        else:
            not_built = build_exercises(tree, selected, log)
            problems += [f"{exercise.key}: the {VARIANT_NAMES[variant]} does not build: "
                         f"{_first(outcome.detail)}" for exercise, outcome in not_built.items()]
    return problems


def _result_problems(result: Result) -> list[str]:
    key, variant = result.exercise.key, VARIANT_NAMES[result.variant]
    expected = TODO if result.variant == LEARNER else PASS
    if result.status != expected:
        return [f"{key}: the {variant} reports {result.status} (expected {expected}): "
                f"{_first(result.outcome.detail)}"]
    if result.goal_met is False:
        exercise = result.exercise
        ratios = ", ".join(case.percent_text()
                           for case in judged_cases(exercise, result.outcome.perf))
        goal = (f"stretch ({exercise.stretch_text})" if result.judged_on_stretch
                else f"target ({exercise.target_text})")
        return [f"{key}: the {variant} reaches {ratios} of {exercise.baseline}, below its {goal}"]
    return []


def memcheck_problems(tree: BuildTree, results: list[Result], log: Log) -> list[str]:
    """compute-sanitizer's memcheck over the correctness cases of the references that passed,
    their buffers allocated exactly (COURSE_EXACT_ALLOCATIONS): an access past the end of a buffer
    whose value no output shows. Skipped, with a note, where compute-sanitizer is missing."""
    if shutil.which("compute-sanitizer") is None:
        log("note: compute-sanitizer not found: the solutions are not checked under memcheck")
        return []
    problems = []
    for result in results:
        if result.status != PASS or not result.exercise.has_checker:
            continue
        summary = memcheck_summary(tree, result.exercise,
                                   [case.test for case in result.outcome.perf], log)
        if summary.errors != 0:
            problems.append(f"{result.exercise.key}: the {VARIANT_NAMES[result.variant]} under "
                            f"memcheck: {describe(summary)}")
    return problems


def _first(detail: list[str]) -> str:
    return detail[0] if detail else "(no detail)"
