"""The `grader` command line: list, run, hint, check, gpu; and the tools of tools_cli.py (watch,
profile, sanitize, doctor, compare, report)."""
import math
import os
import re
import signal
from pathlib import Path

import click

from grader import gpu_table, hints
from grader.activity import StderrLog
from grader.build import BuildTree, cuda_architecture_note
from grader.check import build_problems, static_problems
from grader.course import (ALL, Course, find_root, load_course, other_clones_grader, select,
                           select_one)
from grader.errors import UserError
from grader.grading import grade, grade_references, todo_without_gpu
from grader.manifest import Exercise
from grader.mutants import read_mutants, run_mutants
from grader.progress import check_learner_files, update_learner_files
from grader.report import (make_console, print_exercise_list, print_json, print_mutants,
                           print_results)
from grader.results import EMULATED, LEARNER, SOLUTION
from grader.state import load_results, record_results, state_lock
from grader.tools import gpu_sm, gpu_visible, require_build_tools
from grader.tools_cli import TOOL_COMMANDS

NO_GPU_NOTE = ("note: no NVIDIA GPU visible here (nvidia-smi finds none): everything builds, the "
               "checkers skip, and the stubs you have not started show as todo. No GPU of your "
               "own? notebooks/free_gpu.ipynb runs the course on Colab's or Kaggle's free GPU; "
               "`grader doctor` says what this machine lacks")
# What the harness accepts (common/src/random.cpp): a whole number that fits 64 bits.
SEED = re.compile(r"^[0-9]{1,20}$")
# Progress goes to stderr: stdout carries only the table or the JSON.
_log = StderrLog()


class Interrupted(click.ClickException):
    """Ctrl-C, SIGTERM or SIGHUP: whatever ran was stopped (its process group killed), and
    nothing was recorded."""

    exit_code = 130

    def __init__(self) -> None:
        super().__init__("interrupted: the build or checker that was running is stopped, and "
                         "nothing was recorded")


class GraderGroup(click.Group):
    """Turns SIGTERM and SIGHUP into what Ctrl-C does, and every interruption into one line."""

    def invoke(self, context: click.Context):
        previous = {number: signal.signal(number, _raise_interrupt)
                    for number in (signal.SIGTERM, signal.SIGHUP)}
        try:
            return super().invoke(context)
        except KeyboardInterrupt:
            raise Interrupted() from None
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)


def _raise_interrupt(number, frame) -> None:
    raise KeyboardInterrupt


def _timeout_seconds(context, parameter, value: float | None) -> float | None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise UserError(f"--timeout must be a number of seconds above 0, got {value}")
    return value


def _check_seed() -> None:
    seed = os.environ.get("GRADER_SEED")
    if seed is not None and (not SEED.match(seed) or int(seed) >= 2**64):
        raise UserError(f"GRADER_SEED must be a whole number (a seed a failure printed), got "
                        f"'{seed}': fix it, or unset it for new inputs")


def _root(root_option: Path | None) -> Path:
    root = find_root(root_option, Path.cwd())
    note = other_clones_grader(root)
    if note:
        _log(note)
    return root


def _course(root_option: Path | None) -> Course:
    return load_course(_root(root_option))


@click.group(cls=GraderGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--root", type=click.Path(file_okay=False, path_type=Path), envvar="GRADER_ROOT",
              help="The course folder (env GRADER_ROOT; default: the first folder up from here "
                   "holding CMakeLists.txt and modules/).")
@click.pass_context
def main(context: click.Context, root: Path | None) -> None:
    """Build, run and grade the exercises of the CUDA course."""
    # Resolved by each command, so that `--help` works outside a course too.
    context.obj = root


@main.command("list")
@click.pass_obj
def list_command(root_option: Path | None) -> None:
    """List the modules and exercises in order, with your last status."""
    course = _course(root_option)
    print_exercise_list(make_console(), course, load_results(course.root).get(LEARNER, {}))


@main.command()
@click.argument("selector")
@click.option("--solutions", is_flag=True,
              help="Grade the reference solutions instead of your code: the readable ones "
                   "(build/solutions) and, beside them, the fast ones where an exercise has one "
                   "(build/fast).")
@click.option("--emulate", is_flag=True,
              help="Grade the reference solutions on the CPU emulator (dev/emu, built in "
                   "build/emulated): correctness only, no GPU needed, for the modules it runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON, not a table.")
@click.option("--timeout", type=float, metavar="S", callback=_timeout_seconds,
              help="Seconds each checker may run (default: the manifest's timeout_s).")
@click.option("--verbose", is_flag=True,
              help="Also print the full output of each build or checker that did not pass.")
@click.pass_obj
def run(root_option: Path | None, selector: str, solutions: bool, emulate: bool, as_json: bool,
        timeout: float | None, verbose: bool) -> None:
    """Build and grade SELECTOR: all, a module (01, 01_basics) or an exercise (01/vector_add).

    Exit status 0 when everything selected passes, 1 otherwise.
    """
    course = _course(root_option)
    exercises = select(course, selector)
    _check_seed()
    require_build_tools()
    variant = EMULATED if emulate else SOLUTION if solutions else LEARNER
    # What would stop the recording stops the run first, before anything is built.
    previous = load_results(course.root).get(LEARNER, {})
    if variant == LEARNER:
        check_learner_files(course)
    gpu = emulate or gpu_visible()
    if not gpu:
        _log(NO_GPU_NOTE)
    tree = BuildTree.standard(course, variant)
    if variant == SOLUTION:
        results = grade_references(course, exercises, _log, timeout)
    else:
        results = grade(tree, exercises, _log, timeout)
    if not gpu and variant == LEARNER:
        results = todo_without_gpu(course, results)
    note = cuda_architecture_note(tree, gpu_sm()) if gpu and not emulate else None
    if note:
        _log(note)
    if as_json:
        print_json(results)
    else:
        print_results(make_console(), results, verbose)
    with state_lock(course.root):
        stored = record_results(course.root, results)
        if variant == LEARNER:
            update_learner_files(course, stored.get(LEARNER, {}), previous)
    raise SystemExit(0 if all(result.passed for result in results) else 1)


@main.command()
@click.argument("exercise")
@click.option("--reset", is_flag=True, help="Start over: the next call shows the first hint again.")
@click.option("--all", "show_all", is_flag=True,
              help="Show again every hint revealed so far, without revealing a new one.")
@click.pass_obj
def hint(root_option: Path | None, exercise: str, reset: bool, show_all: bool) -> None:
    """Show the next hint for EXERCISE (module/exercise): each call reveals one more."""
    course = _course(root_option)
    chosen = select_one(course, exercise)
    total = len(chosen.hints)
    if reset:
        hints.reset(course.root, chosen)
        click.echo(f"Hints of {chosen.key} reset: the next `grader hint` shows hint 1 of {total}.")
        return
    if show_all:
        shown = min(hints.revealed(course.root, chosen), total)
        if not shown:
            click.echo(f"No hint of {chosen.key} revealed yet: `grader hint {chosen.key}` "
                       "shows the first.")
        for tier in range(1, shown + 1):
            _print_hint(chosen.hints, tier)
        return
    tier = hints.reveal_next(course.root, chosen)
    _print_hint(chosen.hints, tier)
    if tier == total:
        click.echo("(That is the last hint.)")


def _print_hint(texts: tuple[str, ...], tier: int) -> None:
    click.echo(f"Hint {tier} of {len(texts)}: {texts[tier - 1]}")


@main.command()
@click.argument("selector", default=ALL)
@click.option("--no-build", is_flag=True,
              help="Only check manifests, files and stubs: build and run nothing.")
@click.option("--mutants", "with_mutants", is_flag=True,
              help="Also build the planted bugs of solutions/*/mutants.toml and check that the "
                   "checkers catch each one (needs a GPU).")
@click.option("--emulate", is_flag=True,
              help="With --mutants: run the planted bugs on the CPU emulator (dev/emu), no GPU "
                   "needed; only for the modules it runs (COURSE_EMULATED_MODULES).")
@click.option("--mutant", "mutant_names", multiple=True, metavar="NAME",
              help="With --mutants: only the planted bugs of this name in the selection "
                   "(repeat it for several).")
@click.option("--timeout", type=float, metavar="S", callback=_timeout_seconds,
              help="With --mutants: seconds the checker of a planted bug expected to fail or "
                   "crash may run (default: the manifest's timeout_s), for copies that share a "
                   "GPU; a planted hang keeps the manifest's, so that it costs no more.")
@click.pass_obj
def check(root_option: Path | None, selector: str, no_build: bool, with_mutants: bool,
          emulate: bool, mutant_names: tuple[str, ...], timeout: float | None) -> None:
    """Check the course itself (SELECTOR as for run, default all).

    Manifests, files and stub markers; then builds every learner and solution target and, on a
    GPU, runs them: every stub must report todo, every solution pass and meet its target.
    """
    root = _root(root_option)
    gpu = gpu_visible()
    if emulate and not with_mutants:
        raise UserError("--emulate goes with --mutants")
    if mutant_names and not with_mutants:
        raise UserError("--mutant goes with --mutants")
    if timeout is not None and not with_mutants:
        raise UserError("--timeout goes with --mutants (`grader run --timeout` times a learner's "
                        "checkers)")
    if with_mutants and not gpu and not emulate:
        raise UserError("--mutants needs a GPU: a planted bug is caught by running its checker, "
                        "and nvidia-smi sees no GPU here (--emulate runs it on the CPU emulator)")
    course, exercises, problems = static_problems(root, selector)
    if mutant_names:
        known = {mutant.name for mutant in read_mutants(course, exercises)[0]}
        if unknown := sorted(set(mutant_names) - known):
            raise UserError(f"no planted bug named {', '.join(unknown)} in {selector}")
    if not no_build or with_mutants:
        _check_seed()
        require_build_tools()
    if not no_build:
        if not gpu:
            _log("note: no NVIDIA GPU visible (nvidia-smi): building only, no checker is run")
        problems += build_problems(course, exercises, _log, run_checkers=gpu)
    if with_mutants:
        problems += _mutant_problems(course, exercises, EMULATED if emulate else SOLUTION,
                                     mutant_names, timeout)
    for problem in problems:
        click.echo(problem)
    if problems:
        click.echo(f"{_count(len(problems), 'problem')} found")
        raise SystemExit(1)
    click.echo(f"course OK: {_count(len(exercises), 'exercise')} checked")


@main.command()
@click.pass_obj
def gpu(root_option: Path | None) -> None:
    """Show this machine's GPU in figures: SMs, memory, measured bandwidth, peak FLOP/s, ridge."""
    try:
        facts = gpu_table.measure(_course(root_option), _log)
    except gpu_table.GpuUnavailable as reason:
        click.echo(str(reason))
        raise SystemExit(1)
    gpu_table.print_table(make_console(), gpu_table.rows(facts))


def _mutant_problems(course: Course, exercises: list[Exercise], variant: str,
                     names: tuple[str, ...] = (), timeout_s: float | None = None) -> list[str]:
    """Runs the planted bugs of `exercises` (those named `names`, where there are names), prints
    their table, returns what went wrong."""
    mutants, problems = read_mutants(course, exercises)
    if names:
        mutants = [mutant for mutant in mutants if mutant.name in names]
    outcomes = run_mutants(course, mutants, _log, variant, timeout_s)
    print_mutants(make_console(), outcomes)
    return problems + [f"mutant {outcome.name} not caught: expected {outcome.expected}, "
                       f"got {outcome.got}" for outcome in outcomes if not outcome.ok]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


# watch, profile, sanitize, doctor, compare, report (grader/tools_cli.py).
for _command in TOOL_COMMANDS:
    main.add_command(_command)
