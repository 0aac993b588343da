"""Planted bugs (`solutions/NN_topic/mutants.toml`): each must be caught by its checker."""
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grader.build import BuildTree, Log, configure, not_emulated
from grader.course import Course
from grader.grading import grade
from grader.manifest import Exercise, tomllib
from grader.results import CRASH, EMULATED, FAIL, SOLUTION

MUTANTS_FILE = "mutants.toml"
MUTANTS_TREES = {SOLUTION: "build/mutants", EMULATED: "build/mutants-emulated"}
EXPECTABLE = (FAIL, CRASH)
MUTANT_KEYS = ("exercise", "name", "replace", "expect", "message")
LOCATION = re.compile(r"^\S+:\d+$")


class BrokenMutant(Exception):
    """The mutant cannot be applied: its text is not in the solution exactly once."""


@dataclass(frozen=True)
class Mutant:
    exercise: Exercise
    name: str
    old: str
    new: str
    expect: str
    message: str

    @property
    def label(self) -> str:
        return f"{self.exercise.key}:{self.name}"


@dataclass(frozen=True)
class MutantOutcome:
    name: str
    expected: str
    got: str
    ok: bool


def read_mutants(course: Course, exercises: list[Exercise]) -> tuple[list[Mutant], list[str]]:
    """The mutants of the selected exercises, and the problems of the files that declare them."""
    mutants, problems = [], []
    selected_modules = {exercise.module for exercise in exercises}
    for module in (module for module in course.modules if module.name in selected_modules):
        path = course.root / "solutions" / module.name / MUTANTS_FILE
        if path.is_file():
            by_id = {exercise.id: exercise for exercise in module.exercises}
            found, found_problems = _parse(path.read_text(encoding="utf-8"), by_id)
            mutants += [mutant for mutant in found if mutant.exercise in exercises]
            problems += [f"{course.relative(path)}: {problem}" for problem in found_problems]
    return mutants, problems


def _parse(text: str, exercises_by_id: dict[str, Exercise]) -> tuple[list[Mutant], list[str]]:
    try:
        entries = tomllib.loads(text).get("mutant", [])
    except tomllib.TOMLDecodeError as error:
        return [], [f"not valid TOML ({error})"]
    mutants, problems = [], []
    for number, entry in enumerate(entries, start=1):
        where = f"mutant '{entry.get('name', f'#{number}')}'"
        missing = [key for key in MUTANT_KEYS if key not in entry]
        if missing:
            problems.append(f"{where}: missing {', '.join(missing)}")
        elif entry["exercise"] not in exercises_by_id:
            problems.append(f"{where}: no exercise '{entry['exercise']}' in this module")
        elif entry["expect"] not in EXPECTABLE:
            problems.append(f"{where}: expect must be one of {', '.join(EXPECTABLE)}")
        elif not _is_replacement(entry["replace"]) or not isinstance(entry["message"], str):
            problems.append(f"{where}: replace must be [old, new] (old not empty), message a "
                            "string")
        else:
            mutants.append(Mutant(exercises_by_id[entry["exercise"]], entry["name"],
                                  *entry["replace"], entry["expect"], entry["message"]))
    return mutants, problems


def _is_replacement(pair) -> bool:
    # The new text may be empty: a deleted line (a missing __syncthreads()) is a classic bug.
    return (isinstance(pair, list) and len(pair) == 2
            and all(isinstance(text, str) for text in pair) and pair[0] != "")


def apply_mutant(source: str, mutant: Mutant) -> str:
    count = source.count(mutant.old)
    if count != 1:
        raise BrokenMutant(f"its replace text occurs {count} times in the solution (needs 1)")
    return source.replace(mutant.old, mutant.new)


@contextmanager
def mutated(path: Path, mutant: Mutant):
    """`path` holds the mutated solution inside the block, and its original text after it."""
    original = path.read_text(encoding="utf-8")
    mutated_text = apply_mutant(original, mutant)
    path.write_text(mutated_text, encoding="utf-8")
    try:
        yield
    finally:
        path.write_text(original, encoding="utf-8")


def run_mutants(course: Course, mutants: list[Mutant], log: Log,
                variant: str = SOLUTION) -> list[MutantOutcome]:
    """Builds each mutant from a scratch copy of solutions/ and checks that it is caught, on the
    GPU (`variant` SOLUTION) or on the CPU emulator (EMULATED)."""
    sources = course.root / MUTANTS_TREES[variant] / "src"
    shutil.rmtree(sources, ignore_errors=True)
    # Fresh modification times (shutil.copy, not copy2): ninja must never take a copy for older
    # than a binary built from an earlier mutant.
    shutil.copytree(course.root / "solutions", sources, copy_function=shutil.copy)
    tree = BuildTree(course, variant, course.root / MUTANTS_TREES[variant],
                     defines=(f"-DCOURSE_SOLUTIONS_DIR={sources}",))
    if variant == EMULATED:
        configure(tree, log)
        skipped = not_emulated(tree, [mutant.exercise for mutant in mutants])
        if skipped:
            modules = sorted({exercise.module for exercise in skipped})
            log(f"not emulated, so their planted bugs are not run: {', '.join(modules)}")
        mutants = [mutant for mutant in mutants if mutant.exercise not in skipped]
    return [_run_one(tree, sources, mutant, log) for mutant in mutants]


def _run_one(tree: BuildTree, sources: Path, mutant: Mutant, log: Log) -> MutantOutcome:
    expected = f"{mutant.expect}: {mutant.message}"
    path = sources / mutant.exercise.module / mutant.exercise.file
    try:
        with mutated(path, mutant):
            [result] = grade(tree, [mutant.exercise], log)
    except BrokenMutant as error:
        return MutantOutcome(mutant.label, expected, f"broken mutant: {error}", ok=False)
    text = "\n".join(result.outcome.failures + result.outcome.detail)
    return MutantOutcome(mutant.label, expected, f"{result.status}: {_gist(text, mutant.message)}",
                         ok=result.status == mutant.expect and mutant.message in text)


def _gist(text: str, message: str) -> str:
    """The line holding the expected message, else the first that says what happened (not the
    file:line a failure starts with)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    matching = [line for line in lines if message in line]
    telling = [line for line in lines if not LOCATION.match(line)]
    return (matching or telling or [""])[0]
