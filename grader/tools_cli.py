"""The commands of the daily loop beyond run and hint: watch, profile, sanitize, doctor (learners),
compare and report (learners and instructors), and module 08's full run, train. cli.py adds them to
the `grader` group."""
import re
import shlex
from dataclasses import replace
from pathlib import Path

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from grader import doctor as doctor_checks
from grader import gpu_table, learner_report
from grader.build import BuildTree
from grader.compare import (compare as compare_results, gradebook, gradebook_csv,
                            gradebook_markdown, read_results, solution_entries)
from grader.course import (ALL, Course, find_root, load_course, other_clones_grader, select,
                           select_one)
from grader.manifest import Exercise
from grader.errors import UserError
from grader.grading import grade
from grader.profile import profile as run_profile
from grader.profile import summarize
from grader.progress import update_learner_files
from grader.report import make_console, print_results, status_text
from grader.results import FAST, LEARNER, SOLUTION
from grader.sanitize import TOOLS, describe, sanitize as run_sanitize, source_locator
from grader.state import load_results, record_results
from grader.tools import gpu_visible, require_build_tools
from grader.trainer import FULL_RUN, STOPPED, GoingOn, full_run
from grader.watch import watch as watch_loop

REPORT_DIR = "build/report"
NEEDS_GPU = "{command} needs an NVIDIA GPU, and nvidia-smi sees none here (`grader doctor` " \
            "says more; notebooks/free_gpu.ipynb runs the course on a free one)"


def _log(line: str) -> None:
    click.echo(line, err=True)


def _course(context: click.Context) -> Course:
    root = find_root(context.obj, Path.cwd())
    note = other_clones_grader(root)
    if note:
        _log(note)
    return load_course(root)


def _variant(solutions: bool) -> str:
    return SOLUTION if solutions else LEARNER


def _require_gpu(command: str) -> None:
    if not gpu_visible():
        raise UserError(NEEDS_GPU.format(command=command))


def _kernel_exercise(course: Course, selector: str, command: str) -> "Exercise":
    """One exercise with a checker: the trainer exercise (08/train_gpt) runs a whole program."""
    chosen = select_one(course, selector)
    if chosen.is_trainer:
        raise UserError(f"{chosen.key} runs the whole GPT trainer, not one kernel's checker: "
                        f"{command} an exercise (e.g. `grader {command} 06/layernorm`); the "
                        "trainer's time per op: `train_gpt --kernels learner --profile` "
                        "(module 08's README, section 5)")
    if chosen.is_torch:
        raise UserError(f"{chosen.key} runs PyTorch's checks of your ops, not one kernel's checker: "
                        f"{command} an exercise (e.g. `grader {command} 06/layernorm`); the ops' "
                        "times against PyTorch's: `python3 -m course_torch bench --variant "
                        "learner` (module 08's README, section 6)")
    return chosen


SOLUTIONS_OPTION = click.option("--solutions", is_flag=True,
                                help="The reference solution (build/solutions), not your code.")


@click.command()
@click.argument("selector")
@SOLUTIONS_OPTION
@click.pass_context
def watch(context: click.Context, selector: str, solutions: bool) -> None:
    """Grade SELECTOR, then again each time you save one of its exercises (Ctrl-C stops)."""
    course = _course(context)
    exercises = select(course, selector)
    require_build_tools()
    variant = _variant(solutions)
    tree = BuildTree.standard(course, variant)
    console = make_console()

    def grade_and_record(chosen):
        results = grade(tree, chosen, _log)
        stored = record_results(course.root, results)
        if variant == LEARNER:
            update_learner_files(course, stored[LEARNER])
        return results

    def show(results, footer):
        console.clear()
        print_results(console, results)
        for line in footer:
            console.print(Text(line, style="bold" if line.startswith("Stuck") else "dim"))

    try:
        watch_loop(course, exercises, variant, grade_and_record, show)
    except KeyboardInterrupt:
        click.echo("stopped watching")


@click.command()
@click.argument("exercise")
@SOLUTIONS_OPTION
@click.option("--case", "case_label", metavar="LABEL",
              help="Which timed case, by its label (e.g. '16384x16384 vs naive') or test name; "
                   "default: the first timed against the manifest's baseline.")
@click.option("--kernel", metavar="NAME",
              help="Profile this kernel (default: the kernels your file defines), e.g. a "
                   "checker's naive_transpose_kernel.")
@click.option("--launches", type=click.IntRange(min=1), default=1, show_default=True,
              help="How many launches of the kernel(s) to profile (each is summarized).")
@click.option("--fast", is_flag=True,
              help="The exercise's fast reference (build/fast), where it has one: what limits "
                   "the stretch figure (for course authors).")
@click.pass_context
def profile(context: click.Context, exercise: str, solutions: bool, case_label: str | None,
            kernel: str | None, launches: int, fast: bool) -> None:
    """Profile EXERCISE's timed case with Nsight Compute and say what limits it, in plain words.

    Memory- or compute-bound, occupancy and its limiter, shared-memory bank conflicts, the top
    warp-stall reasons and the source line with the most stalls; and the path of the full report
    for the Nsight Compute GUI.
    """
    course = _course(context)
    chosen = _kernel_exercise(course, exercise, "profile")
    if fast and solutions:
        raise UserError("--fast profiles the fast reference and --solutions the readable one: "
                        "give one of them")
    if fast and not chosen.fast_solution:
        raise UserError(f"{chosen.key} has no fast reference (its manifest names no "
                        "fast_solution): --solutions profiles its reference solution")
    _require_gpu("grader profile")
    require_build_tools()
    run = run_profile(course, chosen, FAST if fast else _variant(solutions), _log, case_label,
                      kernel, launches)
    click.echo(f"{chosen.key} ({run.variant}), timed case '{run.case.label}' "
               f"({run.case.test}); graded figure {run.case.value_text()}, "
               f"{run.case.percent_text()} of {run.case.baseline}")
    for number, kernel_profile in enumerate(run.profiles):
        if len(run.profiles) > 1:
            click.echo(f"launch {number + 1} of {len(run.profiles)}:")
        lines = run.lines if len(run.profiles) == 1 else []
        for line in summarize(kernel_profile, lines, course.strip_root):
            click.echo(f"  {line}")
    click.echo(f"full report: {course.relative(run.report)} (open it in Nsight Compute: "
               f"ncu-ui {course.relative(run.report)})")


@click.command()
@click.argument("exercise")
@SOLUTIONS_OPTION
@click.option("--tool", "tools", type=click.Choice(TOOLS), multiple=True,
              help="Only this tool (repeat for several; default: all four).")
@click.pass_context
def sanitize(context: click.Context, exercise: str, solutions: bool,
             tools: tuple[str, ...]) -> None:
    """Run EXERCISE's correctness cases under compute-sanitizer: memcheck, racecheck, synccheck,
    initcheck. Exit status 0 when no tool finds anything."""
    course = _course(context)
    chosen = _kernel_exercise(course, exercise, "sanitize")
    _require_gpu("grader sanitize")
    require_build_tools()
    run = run_sanitize(course, chosen, _variant(solutions), tools or TOOLS, _log)
    left_out = f" (left out: the timed {', '.join(run.excluded)})" if run.excluded else ""
    click.echo(f"{chosen.key} ({run.variant}): the correctness cases under compute-sanitizer"
               f"{left_out}")
    source = course.solution(chosen) if solutions else course.stub(chosen)
    relative = source_locator(course, [source, course.checker(chosen)])
    for summary in run.summaries:
        click.echo(f"  {summary.tool:<10} {describe(summary, relative)}")
    click.echo(f"logs: {course.relative(run.logs)}/")
    found = [summary for summary in run.summaries if summary.errors != 0]
    raise SystemExit(1 if found else 0)


@click.command()
@click.pass_context
def doctor(context: click.Context) -> None:
    """Check this machine for the course: toolkit, driver, GPU, build tools, Python packages,
    ncu and compute-sanitizer. Each problem comes with its fix; exit status 1 if any."""
    try:
        root = find_root(context.obj, Path.cwd())
    except UserError:
        root = None  # outside a course: everything but the build trees
    checks = doctor_checks.run_checks(doctor_checks.Probe(), root)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
    for header in ("check", "status", "found"):
        table.add_column(header)
    styles = {doctor_checks.OK: "green", doctor_checks.WARNING: "yellow",
              doctor_checks.PROBLEM: "bold red"}
    for check in checks:
        table.add_row(check.name, Text(check.status, style=styles[check.status]), check.detail)
    console = make_console()
    console.print(table)
    to_fix = [check for check in checks if check.status != doctor_checks.OK and check.fix]
    for check in to_fix:
        console.print(Text(f"{check.name} ({check.status}): {check.fix}"))
    problems = [check for check in checks if check.status == doctor_checks.PROBLEM]
    warnings = [check for check in checks if check.status == doctor_checks.WARNING]
    click.echo(f"{_count(len(problems), 'problem')}, {_count(len(warnings), 'warning')}")
    raise SystemExit(1 if problems else 0)


@click.command()
@click.argument("learner_file", required=False, type=click.Path(exists=True, dir_okay=False,
                                                                   path_type=Path))
@click.option("--against", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="The solutions' results (`grader run --solutions --json` output); default: "
                   "this course's last `--solutions` runs.")
@click.option("--gradebook", "book_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A learner's `grader run all --json` file (named after the learner); repeat "
                   "for the whole class. Writes gradebook.csv and gradebook.md.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
              show_default=True, help="Where --gradebook writes its two files.")
@click.pass_context
def compare(context: click.Context, learner_file: Path | None, against: Path | None,
            book_files: tuple[Path, ...], out: Path) -> None:
    """Put a learner's results next to the solutions' (default: your own last runs), or make a
    gradebook from many learners' --json files."""
    course = _course(context)
    if book_files:
        learners = {path.stem: read_results(path) for path in book_files}
        exercises, book = gradebook(course, learners)
        out.mkdir(parents=True, exist_ok=True)
        (out / "gradebook.csv").write_text(gradebook_csv(exercises, book), encoding="utf-8")
        (out / "gradebook.md").write_text(gradebook_markdown(exercises, book), encoding="utf-8")
        click.echo(f"gradebook of {_count(len(book), 'learner')}, "
                   f"{_count(len(exercises), 'exercise')}: "
                   f"{out / 'gradebook.csv'}, {out / 'gradebook.md'}")
        return
    stored = load_results(course.root)
    learner = read_results(learner_file) if learner_file else stored.get(LEARNER, {})
    if not learner:
        raise UserError("no learner results: run `grader run ...` first, or pass a "
                        "`grader run --json` file")
    rows = compare_results(course, learner, solution_entries(against, stored))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
    for header in ("exercise", "learner", "figure", "solution", "figure", "% of solution"):
        table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(row.exercise, status_text(row.learner_status), row.learner_value,
                      status_text(row.solution_status), row.solution_value,
                      row.percent_of_solution)
    make_console().print(table)


@click.command()
@click.argument("selector", default=ALL)
@SOLUTIONS_OPTION
@click.option("--html", is_flag=True, help="Write report.html instead of report.md.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help=f"Where the report and its pictures go (default: {REPORT_DIR}).")
@click.pass_context
def report(context: click.Context, selector: str, solutions: bool, html: bool,
           out: Path | None) -> None:
    """Write a report of your results (SELECTOR: all, a module): tables, the roofline of your GPU
    with each exercise on it, and each module's ladder where it has one."""
    course = _course(context)
    exercises = select(course, selector)
    modules = [module for module in course.modules
               if any(exercise in exercises for exercise in module.exercises)]
    variant = _variant(solutions)
    entries = load_results(course.root).get(variant, {})
    if not entries:
        raise UserError(f"no {variant} results yet: `grader run {selector}"
                        f"{' --solutions' if solutions else ''}` first")
    out_dir = out or course.root / REPORT_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = learner_report.plots_available()
    if not plots:
        _log(learner_report.INSTALL_PLOTS)
    gpu = _gpu_facts(course)
    gpu_name = gpu["name"] if gpu else learner_report.measured_on(entries)
    sections = learner_report.build_report(course, modules, entries, gpu_name, out_dir, plots,
                                           gpu)
    path = out_dir / ("report.html" if html else "report.md")
    path.write_text(learner_report.render(sections, learner_report.title_of(variant, gpu_name),
                                          html), encoding="utf-8")
    # The module tables here too: % of baseline and % of this GPU's measured roofline.
    console = make_console()
    for section in sections[:len(modules)]:
        table = Table(*section.header, title=section.title, title_justify="left",
                      box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
        for row in section.rows:
            table.add_row(*row)
        console.print(table)
    for section in sections[len(modules):]:
        if section.preformatted:  # a ladder
            console.print(Text(section.preformatted))
    click.echo(f"report: {course.relative(path) if path.is_relative_to(course.root) else path}")


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _gpu_facts(course: Course) -> dict[str, str] | None:
    """`grader gpu`'s figures of the GPU at hand, or None (no GPU, or they cannot be had)."""
    if not gpu_visible():
        return None
    try:
        return gpu_table.measure(course, _log)
    except (gpu_table.GpuUnavailable, UserError) as reason:
        _log(f"no GPU figures for the report ({reason})")
        return None


# A line of the trainer's per step: "step    12/1000 | loss ...".
STEP_LINE = re.compile(r"^step\s+(\d+)/(\d+) \|")


@click.command()
@click.option("--model", "-m", default=FULL_RUN.model, show_default=True,
              help="The preset to train: tiny, small, gpt2-124m.")
@click.option("--steps", type=click.IntRange(min=1), default=FULL_RUN.steps, show_default=True,
              help="Optimizer steps.")
@click.option("--batch", "-b", type=click.IntRange(min=1), default=FULL_RUN.batch,
              show_default=True, help="Sequences per step.")
@click.option("--seq-len", "-t", type=click.IntRange(min=1), default=FULL_RUN.seq_len,
              show_default=True, help="Tokens per sequence (at most the model's context).")
@SOLUTIONS_OPTION
@click.option("--fast", is_flag=True,
              help="The course's fast references (build/fast; their choice of kernels: "
                   "solutions/08_training/kernels_fast.toml), not your code.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("out"),
              show_default=True, help="Where the runs go: <out>/<model>-learner (loss.csv, "
              "model.ckpt, loss.png) and <out>/<model>-reference.")
@click.option("--max-minutes", type=click.FloatRange(min=0, min_open=True), metavar="M",
              help="Stop before M minutes (the build included), at a checkpoint, and print the "
                   "command that goes on (the same one); exit status 3.")
@click.option("--fresh-reference", is_flag=True,
              help="Run the reference again, even where <out> has its run of these settings.")
@click.option("--restart", is_flag=True,
              help="Start both runs from step 0, even where <out> has runs that an earlier "
                   "command stopped.")
@click.pass_context
def train(context: click.Context, model: str, steps: int, batch: int, seq_len: int,
          solutions: bool, fast: bool, out: Path, max_minutes: float | None,
          fresh_reference: bool, restart: bool) -> None:
    """The full run: train a GPT with your kernels (as modules/08_training/kernels.toml picks
    them) and with the reference, from the same weights and data.

    Prints which op ran whose kernel, the gap between the two loss curves, the validation losses,
    tokens/s and a sample; writes the plot of both curves (PNG, with matplotlib) and a checkpoint
    you can generate from with your kernels. Exit status 0 when the curves overlap.

    Stopped (Ctrl-C, a lost session, --max-minutes), the same command goes on where each run
    stopped: from its last checkpoint (one a minute), its loss curve continued.
    """
    course = _course(context)
    if solutions and fast:
        raise UserError("--solutions or --fast, not both")
    _require_gpu("grader train")
    require_build_tools()
    settings = replace(FULL_RUN, model=model, steps=steps, batch=batch, seq_len=seq_len,
                       val_every=max(1, steps // 4), check_every=steps)
    tree = BuildTree.standard(course, FAST if fast else _variant(solutions))
    stored = load_results(course.root).get(LEARNER, {})
    going_on = GoingOn(_same_command(context), max_minutes, restart, fresh_reference)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True)) as bar:

        def progress(title: str):
            task = bar.add_task(title, total=steps)
            pending = bytearray()

            def listener(chunk: bytes) -> None:
                pending.extend(chunk)
                *lines, rest = pending.split(b"\n")
                pending[:] = rest
                for line in lines:
                    if found := STEP_LINE.match(line.decode(errors="replace")):
                        bar.update(task, completed=int(found[1]))
            return listener

        try:
            report = full_run(tree, settings, out if out.is_absolute() else course.root / out,
                              _log, progress, stored, going_on)
        except KeyboardInterrupt:
            _log(f"go on with: {going_on.command}")
            raise
    for line in report.lines:
        click.echo(line)
    if report.sample:
        click.echo(f"--- sample ---\n{report.sample}\n---")
    raise SystemExit(STOPPED if report.stopped else 0 if report.passed else 1)


# Options that start over rather than go on: the command that goes on leaves them out.
STARTS_OVER = ("fresh_reference", "restart")


def _same_command(context: click.Context) -> str:
    """The command line that goes on with this one: `grader train` and the options given, but
    those that start over."""
    words = ["grader", context.info_name]
    for parameter in context.command.params:
        value = context.params[parameter.name]
        if parameter.name in STARTS_OVER or value == parameter.get_default(context):
            continue
        flag = max(parameter.opts, key=len)
        words += [flag] if parameter.is_flag else [flag, f"{value:g}" if isinstance(value, float)
                                                   else str(value)]
    return shlex.join(words)


TOOL_COMMANDS = (watch, profile, sanitize, doctor, compare, report, train)
