"""The `grader` command line: list, run, hint, check, gpu; and the tools of tools_cli.py (watch,
profile, sanitize, doctor, compare, report)."""
from pathlib import Path

import click

from grader import gpu_table, hints
from grader.build import BuildTree
from grader.check import build_problems, static_problems
from grader.course import ALL, Course, find_root, load_course, select, select_one
from grader.errors import UserError
from grader.grading import grade, grade_references
from grader.manifest import Exercise
from grader.mutants import read_mutants, run_mutants
from grader.progress import update_learner_files
from grader.report import (make_console, print_exercise_list, print_json, print_mutants,
                           print_results)
from grader.results import EMULATED, LEARNER, SOLUTION
from grader.state import load_results, record_results
from grader.tools import gpu_visible, require_build_tools
from grader.tools_cli import TOOL_COMMANDS

NO_GPU_NOTE = "note: no NVIDIA GPU visible (nvidia-smi): the checkers will report skipped"


def _log(line: str) -> None:
    # Progress goes to stderr: stdout carries only the table or the JSON.
    click.echo(line, err=True)


def _root(root_option: Path | None) -> Path:
    return find_root(root_option, Path.cwd())


def _course(root_option: Path | None) -> Course:
    return load_course(_root(root_option))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="S",
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
    require_build_tools()
    if not gpu_visible() and not emulate:
        _log(NO_GPU_NOTE)
    variant = EMULATED if emulate else SOLUTION if solutions else LEARNER
    if variant == SOLUTION:
        results = grade_references(course, exercises, _log, timeout)
    else:
        results = grade(BuildTree.standard(course, variant), exercises, _log, timeout)
    if as_json:
        print_json(results)
    else:
        print_results(make_console(), results, verbose)
    stored = record_results(course.root, results)
    if variant == LEARNER:
        update_learner_files(course, stored[LEARNER])
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
        shown = hints.revealed(course.root, chosen)
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
@click.pass_obj
def check(root_option: Path | None, selector: str, no_build: bool, with_mutants: bool,
          emulate: bool) -> None:
    """Check the course itself (SELECTOR as for run, default all).

    Manifests, files and stub markers; then builds every learner and solution target and, on a
    GPU, runs them: every stub must report todo, every solution pass and meet its target.
    """
    root = _root(root_option)
    gpu = gpu_visible()
    if emulate and not with_mutants:
        raise UserError("--emulate goes with --mutants")
    if with_mutants and not gpu and not emulate:
        raise UserError("--mutants needs a GPU: a planted bug is caught by running its checker, "
                        "and nvidia-smi sees no GPU here (--emulate runs it on the CPU emulator)")
    course, exercises, problems = static_problems(root, selector)
    if not no_build or with_mutants:
        require_build_tools()
    if not no_build:
        if not gpu:
            _log("note: no NVIDIA GPU visible (nvidia-smi): building only, no checker is run")
        problems += build_problems(course, exercises, _log, run_checkers=gpu)
    if with_mutants:
        problems += _mutant_problems(course, exercises, EMULATED if emulate else SOLUTION)
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


def _mutant_problems(course: Course, exercises: list[Exercise], variant: str) -> list[str]:
    """Runs the planted bugs of `exercises`, prints their table, returns what went wrong."""
    mutants, problems = read_mutants(course, exercises)
    outcomes = run_mutants(course, mutants, _log, variant)
    print_mutants(make_console(), outcomes)
    return problems + [f"mutant {outcome.name} not caught: expected {outcome.expected}, "
                       f"got {outcome.got}" for outcome in outcomes if not outcome.ok]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


# watch, profile, sanitize, doctor, compare, report (grader/tools_cli.py).
for _command in TOOL_COMMANDS:
    main.add_command(_command)
