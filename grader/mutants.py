"""Planted bugs (`solutions/NN_topic/mutants.toml`): each must be caught by its checker."""
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from grader.build import BuildTree, Log, configure, not_emulated
from grader.course import Course
from grader.grading import grade, too_few_gpus
from grader.manifest import Exercise, tomllib
from grader.results import CRASH, EMULATED, FAIL, FAST, PASS, SOLUTION, TIMEOUT, Result
from grader.sanitize import describe, memcheck_summary

MUTANTS_FILE = "mutants.toml"
# The planted bugs of the readable solutions, and of the fast references (the `fast` variant).
MUTANTS_TREES = {SOLUTION: "build/mutants", FAST: "build/mutants-fast",
                 EMULATED: "build/mutants-emulated"}
# A timeout is expected of a planted hang (an mbarrier that never completes): set a short
# timeout_s in the exercise's manifest entry, which the mutant's run uses. The others may be given
# longer (`grader check --mutants --timeout`): copies of the tree that share one GPU slow each
# other's checkers past the manifest's timeout, a planted bug then reported as a hang.
EXPECTABLE = (FAIL, CRASH, TIMEOUT)
MUTANT_KEYS = ("exercise", "name", "replace", "expect", "message")
OPTIONAL_MUTANT_KEYS = {"fast": bool, "memcheck": bool, "gpu_only": str, "file": str,
                        "kernels": dict, "arch": int}
# How an optional key's type is named in a problem.
KEY_TYPES = {bool: "true or false", str: "a text", dict: "a table", int: "a number"}
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
    fast: bool = False  # planted in the exercise's fast reference, not its readable solution
    # Caught by compute-sanitizer's memcheck, with exact allocations (an access past the end
    # whose value is never used: the output stays right), as `grader sanitize` shows it.
    memcheck: bool = False
    # Why only a GPU catches it (the CPU emulator runs threads in a fixed order, has 512 MB and
    # skips the timed cases): "a race", "a case past 2^31 elements", "a timed case".
    gpu_only: str = ""
    # The file it goes into, relative to solutions/, where it is not the exercise's own solution:
    # a trainer exercise's planted bugs go into the kernels it plugs in (04_sgemm/...).
    path: str = ""
    # A trainer exercise's: the ops its run pins, as solutions/<module>/kernels.toml would
    # (op, exercise), so that the kernel with the bug is the one that runs.
    kernels: tuple[tuple[str, str], ...] = ()
    # Planted in the path a build for this architecture takes (75: the tensor-core exercises'
    # fp16 path of a T4, course/tensor_element.h), so built in a tree of its own for it (on the
    # emulator, COURSE_EMULATED_ARCH); 0: the tree's usual architecture.
    arch: int = 0

    @property
    def needs_gpu(self) -> bool:
        return (self.fast or self.memcheck or bool(self.gpu_only)
                or not self.exercise.has_checker)

    @property
    def label(self) -> str:
        kind = ("fast:" if self.fast else "") + (f"sm{self.arch}:" if self.arch else "")
        return f"{self.exercise.key}:{kind}{self.name}"

    @property
    def file(self) -> str:
        """The solution file it goes into, relative to solutions/."""
        if self.path:
            return self.path
        own = self.exercise.fast_solution if self.fast else self.exercise.file
        return f"{self.exercise.module}/{own}"


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
        elif unknown := entry.keys() - {*MUTANT_KEYS, *OPTIONAL_MUTANT_KEYS}:
            problems.append(f"{where}: unknown key {', '.join(sorted(unknown))}")
        elif bad := [key for key, kind in OPTIONAL_MUTANT_KEYS.items()
                     if key in entry and (not isinstance(entry[key], kind) or
                                          isinstance(entry[key], bool) != (kind is bool))]:
            problems.append(f"{where}: {bad[0]} must be {KEY_TYPES[OPTIONAL_MUTANT_KEYS[bad[0]]]}")
        elif entry.get("arch", 75) < 75:
            problems.append(f"{where}: arch is a CUDA architecture the course builds for, 75 or "
                            "more")
        elif entry.get("fast") and not exercises_by_id[entry["exercise"]].fast_solution:
            problems.append(f"{where}: fast = true, but '{entry['exercise']}' has no "
                            "fast_solution in its manifest")
        elif "kernels" in entry and not exercises_by_id[entry["exercise"]].is_trainer:
            problems.append(f"{where}: kernels pins the ops of a trainer exercise's run, and "
                            f"'{entry['exercise']}' is not one")
        elif not all(isinstance(value, str) for value in entry.get("kernels", {}).values()):
            problems.append(f"{where}: kernels maps ops to exercises (\"04_sgemm/sgemm_smem\")")
        else:
            mutants.append(Mutant(exercises_by_id[entry["exercise"]], entry["name"],
                                  *entry["replace"], entry["expect"], entry["message"],
                                  entry.get("fast", False), entry.get("memcheck", False),
                                  entry.get("gpu_only", ""), entry.get("file", ""),
                                  tuple(entry.get("kernels", {}).items()), entry.get("arch", 0)))
    return mutants, problems


def _is_replacement(pair) -> bool:
    # The new text may be empty: a deleted line (a missing __syncthreads()) is a classic bug.
    return (isinstance(pair, list) and len(pair) == 2
            and all(isinstance(text, str) for text in pair) and pair[0] != "")


def layout_free_pattern(text: str) -> re.Pattern:
    """`text` as a pattern that ignores how the code is laid out, so that reformatting a solution
    (clang-format) keeps its planted bugs: white space may appear, vanish or change between any two
    characters, except inside a word (an identifier or a number), and two words apart in `text`
    stay apart."""
    pieces, last, spaced = [], "", False
    for char in text:
        if char.isspace():
            spaced = bool(last)
            continue
        if last:
            both_words = _is_word(last) and _is_word(char)
            pieces.append(r"\s+" if both_words and spaced else "" if both_words else r"\s*")
        pieces.append(re.escape(char))
        last, spaced = char, False
    return re.compile("".join(pieces))


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def apply_mutant(source: str, mutant: Mutant) -> str:
    matches = list(layout_free_pattern(mutant.old).finditer(source))
    if len(matches) != 1:
        raise BrokenMutant(f"its replace text occurs {len(matches)} times in the solution (needs "
                           "1; white space does not count)")
    [match] = matches
    return source[:match.start()] + mutant.new + source[match.end():]


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


def pin_kernels(text: str, kernels: tuple[tuple[str, str], ...]) -> str:
    """A kernels.toml's text with each op of `kernels` set to its exercise."""
    for op, exercise in kernels:
        line = re.compile(rf'^(\s*{re.escape(op)}\s*=\s*)"[^"\n]*"', re.M)
        if len(line.findall(text)) != 1:
            raise BrokenMutant(f"kernels: the op {op} is not one line `{op} = \"...\"` of the "
                               "solution's kernels.toml")
        text = line.sub(lambda match: f'{match[1]}"{exercise}"', text)
    return text


@contextmanager
def pinned(sources: Path, mutant: Mutant):
    """The solutions' kernels.toml (in the scratch copy) pins the mutant's ops inside the block."""
    if not mutant.kernels:
        yield
        return
    path = sources / mutant.exercise.module / mutant.exercise.file
    original = path.read_text(encoding="utf-8")
    path.write_text(pin_kernels(original, mutant.kernels), encoding="utf-8")
    try:
        yield
    finally:
        path.write_text(original, encoding="utf-8")


def run_mutants(course: Course, mutants: list[Mutant], log: Log, variant: str = SOLUTION,
                timeout_s: float | None = None) -> list[MutantOutcome]:
    """Builds each mutant from a scratch copy of solutions/ and checks that it is caught, on the
    GPU (`variant` SOLUTION: the fast references' mutants in a tree of the FAST variant) or on the
    CPU emulator (EMULATED: the readable solutions' mutants only); `timeout_s`, where given, in
    place of the manifest's for those not expected to hang."""
    sources = course.root / MUTANTS_TREES[variant] / "src"
    shutil.rmtree(sources, ignore_errors=True)
    # Fresh modification times (shutil.copy, not copy2): ninja must never take a copy for older
    # than a binary built from an earlier mutant.
    shutil.copytree(course.root / "solutions", sources, copy_function=shutil.copy)
    trees = {kind: _tree(course, kind, sources) for kind in
             ((EMULATED,) if variant == EMULATED else (SOLUTION, FAST))}
    if variant == EMULATED:
        if any(mutant.needs_gpu for mutant in mutants):
            log("the emulated run takes the readable solutions' planted bugs only; those of the "
                "fast references run on a GPU, as do those marked memcheck or gpu_only")
        mutants = [mutant for mutant in mutants if not mutant.needs_gpu]
        configure(trees[EMULATED], log)
        skipped = not_emulated(trees[EMULATED], [mutant.exercise for mutant in mutants])
        if skipped:
            modules = sorted({exercise.module for exercise in skipped})
            log(f"not emulated, so their planted bugs are not run: {', '.join(modules)}")
        mutants = [mutant for mutant in mutants if mutant.exercise not in skipped]
    unrunnable = too_few_gpus(trees[EMULATED if variant == EMULATED else SOLUTION],
                              [mutant.exercise for mutant in mutants])
    for exercise, outcome in unrunnable.items():
        log(f"the planted bugs of {exercise.key} are not run: {outcome.detail[0]}")
    mutants = [mutant for mutant in mutants if mutant.exercise not in unrunnable]
    return [_run_one(_tree(course, EMULATED if variant == EMULATED else FAST if mutant.fast
                           else SOLUTION, sources, mutant.arch), sources, mutant, log, timeout_s)
            for mutant in mutants]


def _tree(course: Course, kind: str, sources: Path, arch: int = 0) -> BuildTree:
    """The mutants' tree of a variant, built from the scratch copy `sources`; for a mutant of
    one architecture's path (`arch`), a tree of its own built for that architecture."""
    defines = [f"-DCOURSE_SOLUTIONS_DIR={sources}"]
    if arch:
        defines.append(f"-DCOURSE_EMULATED_ARCH={arch}" if kind == EMULATED
                       else f"-DCMAKE_CUDA_ARCHITECTURES={arch}")
    path = MUTANTS_TREES[kind] + (f"-sm{arch}" if arch else "")
    return BuildTree(course, kind, course.root / path, defines=tuple(defines))


def _run_one(tree: BuildTree, sources: Path, mutant: Mutant, log: Log,
             timeout_s: float | None = None) -> MutantOutcome:
    expected = f"{mutant.expect}: {mutant.message}"
    path = sources / mutant.file
    # A planted hang runs under the manifest's timeout whatever timeout_s says.
    timeout_s = None if mutant.expect == TIMEOUT else timeout_s
    try:
        with mutated(path, mutant), pinned(sources, mutant):
            [result] = grade(tree, [mutant.exercise], log, timeout_s)
            status, text = result.status, "\n".join(result.outcome.detail)
            if mutant.memcheck and status == PASS:
                status, text = _memcheck(tree, result, log)
    except BrokenMutant as error:
        return MutantOutcome(mutant.label, expected, f"broken mutant: {error}", ok=False)
    # What the learner is shown (the detail lines under the table's row), not the full output:
    # a diagnosis that only --verbose would show does not count.
    return MutantOutcome(mutant.label, expected, f"{status}: {_gist(text, mutant.message)}",
                         ok=status == mutant.expect and mutant.message in text)


def _memcheck(tree: BuildTree, result: Result, log: Log) -> tuple[str, str]:
    """The exercise's correctness cases under memcheck, as `grader sanitize` runs them: "fail"
    and its line when memcheck reports an error."""
    summary = memcheck_summary(tree, result.exercise, [case.test for case in result.outcome.perf],
                               log)
    return (FAIL if summary.errors else PASS), f"memcheck: {describe(summary)}"


def _gist(text: str, message: str) -> str:
    """The line holding the expected message, else the first that says what happened (not the
    file:line a failure starts with)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    matching = [line for line in lines if message in line]
    telling = [line for line in lines if not LOCATION.match(line)]
    return (matching or telling or [""])[0]
