"""Grading a selection: configure once, refuse forbidden stubs, build, run each checker (and, for
module 08's train_gpt, the GPT trainer: grader/trainer.py; for its torch_ops, PyTorch's checks:
grader/torch_ops.py)."""
import re
from dataclasses import replace

from grader.build import (BuildTree, Log, build, configure, emulated_modules, not_emulated,
                          tree_lock)
from grader.classify import classify, tests_run
from grader.course import Course
from grader.library_ban import refusal
from grader.manifest import Exercise
from grader.results import (BUILD_ERROR, EMULATED, FAIL, FAST, LEARNER, SKIPPED, SOLUTION, TODO,
                            Outcome, Result)
from grader.runner import run_checker
from grader.state import load_results
from grader.tools import gpu_count
from grader.torch_ops import grade_torch
from grader.trainer import build_whole_trainer, grade_trainer


def grade(tree: BuildTree, exercises: list[Exercise], log: Log,
          timeout_s: float | None = None) -> list[Result]:
    """One Result per exercise, in order; `timeout_s` overrides each manifest's timeout_s. The
    checkers run first, then the trainer exercises (module 08's train_gpt), which plug in the
    learner's exercises that pass, this run's results included; the torch exercises (module 08's
    torch_ops) last, each built into a PyTorch extension of its own."""
    checked = [exercise for exercise in exercises if exercise.has_checker]
    not_runnable = build_exercises(tree, checked, log)
    not_runnable = {**too_few_gpus(tree, checked), **not_runnable}
    results = {exercise: _not_run_result(tree, exercise, not_runnable[exercise])
               if exercise in not_runnable else _run(tree, exercise, timeout_s or exercise.timeout_s)
               for exercise in checked}
    for exercise in exercises:
        if exercise.is_trainer:
            stored = load_results(tree.course.root).get(LEARNER, {})
            results[exercise] = grade_trainer(tree, exercise, log, timeout_s or exercise.timeout_s,
                                              stored, list(results.values()))
    for exercise in exercises:
        if exercise.is_torch:
            results[exercise] = grade_torch(tree, exercise, log, timeout_s or exercise.timeout_s)
    return [results[exercise] for exercise in exercises]


def grade_references(course: Course, exercises: list[Exercise], log: Log,
                     timeout_s: float | None = None) -> list[Result]:
    """The readable solutions (build/solutions) and, for the exercises that have one, the fast
    references (build/fast): each exercise's readable result, then its fast one."""
    readable = grade(BuildTree.standard(course, SOLUTION), exercises, log, timeout_s)
    with_fast = [exercise for exercise in exercises if exercise.fast_solution]
    fast = dict(zip(with_fast, grade(BuildTree.standard(course, FAST), with_fast, log, timeout_s)))
    return [result for readable_result in readable
            for result in (readable_result, fast.get(readable_result.exercise)) if result]


def build_exercises(tree: BuildTree, exercises: list[Exercise],
                    log: Log) -> dict[Exercise, Outcome]:
    """Configures and builds; returns the exercises that did not build (or were refused). A
    trainer exercise builds the trainer and every exercise's library in it; a torch exercise's
    extension is built by PyTorch when it runs (it needs PyTorch and a GPU)."""
    trainers = [exercise for exercise in exercises if exercise.is_trainer]
    not_built = {exercise: outcome for exercise in trainers
                 if (outcome := build_whole_trainer(tree, log))}
    checked = [exercise for exercise in exercises if exercise.has_checker]
    return {**_build_checkers(tree, checked, log), **not_built}


def _build_checkers(tree: BuildTree, exercises: list[Exercise],
                    log: Log) -> dict[Exercise, Outcome]:
    with tree_lock(tree, log):
        configure(tree, log)
        not_built = _missing(tree, exercises)
        if tree.variant == EMULATED:
            not_built |= _not_emulated(tree, exercises)
        failures = build(tree, [tree.target(exercise) for exercise in exercises
                                if exercise not in not_built], log)
        # The library ban needs the compiler's dependency list and the learner's object: after
        # the build, before a run; and where the link failed too (a call into cuBLAS does not
        # link), it says why instead of the linker.
        if tree.variant == LEARNER:
            not_built |= _refused(tree, [exercise for exercise in exercises
                                         if exercise not in not_built])
    for exercise in exercises:
        if exercise in not_built:
            continue
        failure = failures.get(tree.target(exercise))
        if failure:
            not_built[exercise] = Outcome(BUILD_ERROR, failure.errors, output=failure.output)
    return not_built


def _missing(tree: BuildTree, exercises: list[Exercise]) -> dict[Exercise, Outcome]:
    """The exercises whose source or checker is not there (a branch switch, a stash), unbuilt:
    CMake made no target for them (cmake/Course.cmake), and makes it again once they return."""
    course, missing = tree.course, {}
    for exercise in exercises:
        source = course.stub(exercise) if tree.variant == LEARNER else course.solution(exercise)
        absent = [course.relative(path) for path in (source, course.checker(exercise))
                  if not path.is_file()]
        if absent:
            missing[exercise] = Outcome(BUILD_ERROR, [f"missing: {path}" for path in absent])
    return missing


def _refused(tree: BuildTree, exercises: list[Exercise]) -> dict[Exercise, Outcome]:
    """The compiled learner files that read a header of what they are measured against, or call
    it, or load a library at run time (grader/library_ban.py), refused: never run."""
    refused = {}
    for exercise in exercises:
        line = refusal(tree, exercise)
        if line:
            refused[exercise] = Outcome(BUILD_ERROR, [line])
    return refused


# The not-implemented marker's call in a stub, its text the first string (course/todo.h).
TODO_CALL = re.compile(r'COURSE_TODO\(\s*"((?:[^"\\]|\\.)*)"')


def untouched_stub_line(course: Course, exercise: Exercise) -> str | None:
    """What the checker of a stub that still calls COURSE_TODO reports (its first call, with
    the file and line), read from the file; None when the stub has none left."""
    stub = course.stub(exercise)
    try:
        text = stub.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for number, line in enumerate(text.splitlines(), start=1):
        found = TODO_CALL.search(line)
        if found:
            return f"{found[1]} ({course.relative(stub)}:{number})"
    return None


def todo_without_gpu(course: Course, results: list[Result]) -> list[Result]:
    """Without a GPU every checker skips, so no run says which stubs are still untouched: those
    that still call COURSE_TODO are todo, read from their files, with the line to edit."""
    marked = []
    for result in results:
        line = (untouched_stub_line(course, result.exercise)
                if result.variant == LEARNER and result.status == SKIPPED else None)
        marked.append(replace(result, outcome=Outcome(TODO, [line])) if line else result)
    return marked


def too_few_gpus(tree: BuildTree, exercises: list[Exercise]) -> dict[Exercise, Outcome]:
    """The exercises that need more GPUs than this machine has (min_gpus), skipped unrun, with
    the reason: built, so that a build error still shows. The CPU emulator has one GPU."""
    needing = [exercise for exercise in exercises if exercise.min_gpus > 1]
    if not needing:
        return {}  # no nvidia-smi call for the modules of one GPU
    count = 1 if tree.variant == EMULATED else gpu_count()
    return {exercise: Outcome(SKIPPED, [f"needs {exercise.min_gpus} GPUs, this machine has "
                                        f"{count}"])
            for exercise in needing if exercise.min_gpus > count}


def _not_emulated(tree: BuildTree, exercises: list[Exercise]) -> dict[Exercise, Outcome]:
    """The exercises of modules that the CPU emulator does not run, skipped unbuilt."""
    reason = (f"not emulated: the CPU emulator runs {', '.join(sorted(emulated_modules(tree) or []))}"
              " (COURSE_EMULATED_MODULES in dev/emu/Emulate.cmake)")
    return {exercise: Outcome(SKIPPED, [reason]) for exercise in not_emulated(tree, exercises)}


def _not_run_result(tree: BuildTree, exercise: Exercise, outcome: Outcome) -> Result:
    return Result(exercise, tree.variant, outcome, tree.course.relative(tree.executable(exercise)))


# What makes a race possible in an exercise's code: shared memory, atomics, barriers.
RACE_PRONE = ("__shared__", "__syncthreads", "atomic", "cp.async", "cp_async")


def _run(tree: BuildTree, exercise: Exercise, timeout_s: float) -> Result:
    exe = tree.executable(exercise)
    relative_exe = tree.course.relative(exe)
    run = run_checker(exe, tree.path, timeout_s)
    outcome = classify(run, exe=relative_exe, timeout_s=timeout_s,
                       strip_root=tree.course.strip_root)
    if (outcome.status == FAIL and tree.variant != EMULATED and _race_prone(tree, exercise) and
            not only_speed_failed(run.report)):
        outcome = replace(outcome, detail=[*outcome.detail, race_hint(tree, exercise)])
    return Result(exercise, tree.variant, outcome, relative_exe, run.duration_s)


def race_hint(tree: BuildTree, exercise: Exercise) -> str:
    """The line under a failure of code that can race: a race whose wrong bits come out the same
    on every run looks like any wrong result, and only racecheck sees it."""
    solutions = "" if tree.variant == LEARNER else " --solutions"
    return (f"a wrong result that is the same on every run can still be a race: `grader sanitize "
            f"{exercise.key}{solutions}` runs racecheck (shared memory) and the other sanitizers "
            "on the correctness cases")


def only_speed_failed(report: dict | None) -> bool:
    """Whether each failing test failed once, on a promise of speed that its checker marked with
    the property `speed_failure` (flash_causal: the causal run must skip the masked tiles): no value
    was wrong, so there is no race to look for."""
    failing = [test for test in tests_run(report or {}) if test.get("failures")]
    return bool(failing) and all(test.get("speed_failure") and len(test["failures"]) == 1
                                 for test in failing)


def _race_prone(tree: BuildTree, exercise: Exercise) -> bool:
    source = tree.course.source(exercise, tree.variant)
    try:
        text = source.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(word in text for word in RACE_PRONE)
