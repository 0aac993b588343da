"""Which tests of a checker are its timed cases: `grader profile` runs one of them under Nsight
Compute, `grader sanitize` runs every other test under compute-sanitizer.

The checker's own report says it: a test that records `perf_*` properties is a timed case, and the
grader keeps its GoogleTest name with the figures (results.PerfCase.test). When the results hold
no run of the exercise yet, the checker runs once, as `grader run` would, to find out.
"""
import re
from dataclasses import dataclass
from pathlib import Path

from grader.build import BuildTree, Log
from grader.course import Course
from grader.errors import UserError
from grader.grading import build_exercises, grade
from grader.manifest import Exercise
from grader.results import PerfCase
from grader.state import load_results

# `__global__ void name(`, with __launch_bounds__(...) before or after `void`; its arguments may
# hold one level of parentheses (`__launch_bounds__(256, 65536 / (64 * 256))`).
_LAUNCH_BOUNDS = r"(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?"
KERNEL = re.compile(r"__global__\s+(?:static\s+)?" + _LAUNCH_BOUNDS + r"void\s+" + _LAUNCH_BOUNDS +
                    r"(\w+)\s*\(")


@dataclass(frozen=True)
class CheckerCases:
    status: str  # of the run they come from
    timed: list[PerfCase]  # in the checker's order


def built_tree(course: Course, exercise: Exercise, variant: str, log: Log) -> BuildTree:
    """The tree holding `exercise`'s checker for `variant`, built; a build error stops here."""
    tree = BuildTree.standard(course, variant)
    not_built = build_exercises(tree, [exercise], log)
    if exercise in not_built:
        detail = not_built[exercise].detail
        raise UserError(f"{exercise.key} does not build ({detail[0] if detail else 'no detail'}): "
                        f"`grader run {exercise.key}` shows the errors")
    return tree


def checker_cases(tree: BuildTree, exercise: Exercise, log: Log) -> CheckerCases:
    """The timed cases of `exercise`'s last run in `tree`'s variant, or of a fresh run when the
    results have none that names its tests (never run, run before the names were kept, or a
    run that timed nothing: todo, a crash)."""
    stored = load_results(tree.course.root).get(tree.variant, {}).get(exercise.key)
    perf = stored.get("perf", []) if stored else []
    if perf and all(case.get("test") for case in perf):
        return CheckerCases(stored["status"], [PerfCase.from_dict(case) for case in perf])
    log(f"running {exercise.key}'s checker once to find its timed cases")
    [result] = grade(tree, [exercise], log)
    return CheckerCases(result.status, list(result.outcome.perf))


def kernel_names(source: Path) -> list[str]:
    """The kernels a stub or solution defines, in file order."""
    text = source.read_text(encoding="utf-8") if source.is_file() else ""
    return list(dict.fromkeys(KERNEL.findall(_without_comments(text))))


def _without_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.S)
