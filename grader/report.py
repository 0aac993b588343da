"""What the user reads: the results table (rich, plain when not a terminal) and JSON."""
import json
from itertools import groupby

import click
from rich import box
from rich.console import Console, Group
from rich.rule import Rule
from rich.segment import Segment, SegmentLines
from rich.table import Table
from rich.text import Text

from grader.course import Course
from grader.results import (BUILD_ERROR, CRASH, EMULATED, FAIL, FAST, LEARNER, PASS, SKIPPED,
                            SOLUTION, TIMEOUT, TODO, PerfCase, Result, case_target, goal_text,
                            judged_cases)

STATUS_STYLES = {PASS: "green", FAIL: "red", TODO: "yellow", BUILD_ERROR: "red",
                 CRASH: "bold red", TIMEOUT: "magenta", SKIPPED: "cyan"}
# Logs and CI have no terminal width to follow: wide enough that a table row never wraps, and
# long detail lines stay whole (soft wrap), as a log reader's search expects.
PLAIN_WIDTH = 160
DETAIL_INDENT = "    "
# What a table of another variant than the learner's says in its header, beside the module.
VARIANT_TITLES = {SOLUTION: "reference solutions", FAST: "reference solutions",
                  EMULATED: "reference solutions on the CPU emulator"}


def make_console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = PLAIN_WIDTH
        console.soft_wrap = True
    return console


def print_results(console: Console, results: list[Result], verbose: bool = False) -> None:
    """One table per module: a row per exercise (and per timed case), the detail under failures."""
    for module, module_results in groupby(results, key=lambda result: result.exercise.module):
        module_results = list(module_results)
        shared = _shared_skip_reasons(module_results)
        table, details = _results_table(module, module_results, shared)
        footer = [f"skipped ({count} exercises): {reason}" for reason, count in shared.items()]
        _print_with_details(console, table, details, footer)
    if verbose:
        _print_outputs(console, results)


def print_json(results: list[Result]) -> None:
    click.echo(json.dumps([result.to_json() for result in results], indent=2))


def print_exercise_list(console: Console, course: Course, last_runs: dict[str, dict]) -> None:
    table = Table("exercise", "title", "last status", "last run", box=box.SIMPLE_HEAD,
                  show_edge=False, header_style="bold")
    for module in course.modules:
        table.add_row(Text(module.name, style="bold"), f"{module.title} (week {module.week})")
        for exercise in module.exercises:
            last = last_runs.get(exercise.key)
            table.add_row(f"  {exercise.id}", exercise.title,
                          status_text(last["status"]) if last else "-",
                          last["timestamp"][:10] if last else "-")
    console.print(table)


def print_mutants(console: Console, outcomes) -> None:
    """`outcomes`: mutants.MutantOutcome values."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, header_style="bold")
    for header in ("mutant", "expected"):
        table.add_column(header, no_wrap=True)
    table.add_column("got")
    table.add_column("ok", no_wrap=True)
    for outcome in outcomes:
        ok = Text("yes", style="green") if outcome.ok else Text("NO", style="bold red")
        table.add_row(outcome.name, outcome.expected, Text(outcome.got), ok)
    console.print(table)


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, ""))


def _shared_skip_reasons(results: list[Result]) -> dict[str, int]:
    """The skip reasons of two or more of `results` (no GPU: every one), with how many: said
    once, under the table, rather than under every row."""
    counts: dict[str, int] = {}
    for result in results:
        if result.status == SKIPPED and len(result.outcome.detail) == 1:
            counts[result.outcome.detail[0]] = counts.get(result.outcome.detail[0], 0) + 1
    return {reason: count for reason, count in counts.items() if count > 1}


def _results_table(module: str, results: list[Result], shared: dict[str, int] | None = None
                   ) -> tuple[Table, dict[int, list[str]]]:
    """The table, and the detail lines to show under the row of that index (a skip reason in
    `shared` is not among them)."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    title = module if not results or results[0].variant == LEARNER else \
        f"{module} ({VARIANT_TITLES[results[0].variant]})"
    for header in (title, "status", "metric", "baseline", "% of baseline", "target"):
        table.add_column(header, no_wrap=True)
    details = {}
    for result in results:
        for row in _rows(result):
            table.add_row(*row)
        # The trainer's detail (which op ran whose kernel, the curves' gap, tokens/s, a sample)
        # and PyTorch's checks' (op by op) are their report, pass or not.
        detail = result.outcome.detail
        shown = not result.passed or not result.exercise.has_checker
        if shown and not (result.status == SKIPPED and len(detail) == 1
                          and detail[0] in (shared or {})):
            details[table.row_count - 1] = detail
    return table, details


def row_name(result: Result) -> str:
    """The exercise's id; an exercise with a fast reference has two rows, named by kind."""
    exercise = result.exercise
    if result.variant == FAST:
        return f"{exercise.id} (fast)"
    if result.variant == SOLUTION and exercise.fast_solution:
        return f"{exercise.id} (readable)"
    return exercise.id


def _rows(result: Result) -> list[list]:
    first = [row_name(result), status_text(result.status)]
    target = _target_text(result)
    cases = result.outcome.perf if result.passed else []
    if len(cases) == 1:
        return [first + _perf_cells(cases[0]) + [target]]
    filler = "" if cases else "-"  # several cases: their numbers are on the rows below
    rows = [first + [filler] * 3 + [target]]
    judged = judged_cases(result.exercise, cases) if result.exercise.target > 0 else []
    for case in cases:
        met = _case_goal(result, case) if case in judged else ""
        rows.append([f"  {case.label}", ""] + _perf_cells(case) + [met])
    return rows


def _case_goal(result: Result, case: PerfCase) -> str:
    """A judged case's word: "met" or "not met" against its target ("(>= 45%)" beside it where
    the cases' targets differ), "stretch met" where it reaches the stretch too; a fast reference
    judged on the stretch says "stretch met" or "stretch not met"."""
    exercise = result.exercise
    if result.judged_on_stretch or (exercise.stretch > 0 and case.meets(exercise.stretch)):
        return "stretch met" if case.meets(exercise.stretch) else "stretch not met"
    target = case_target(exercise, case)
    met = "met" if case.meets(target) else "not met"
    return f"{met} (>= {target:.0%})" if exercise.case_targets else met


def _perf_cells(case: PerfCase) -> list[str]:
    return [case.value_text(), case.baseline_text(), case.percent_text()]


def _target_text(result: Result) -> str:
    return goal_text(result.exercise, result.target_met, result.stretch_met,
                     on_stretch=result.judged_on_stretch)


def _print_with_details(console: Console, table: Table, details: dict[int, list[str]],
                        footer: list[str] = ()) -> None:
    # rich has no cells spanning columns: render the table to lines (line 0 is the header, then
    # one line per row, since no cell wraps) and put each detail under its row, full width.
    lines = console.render_lines(table, pad=False)
    parts = []
    for index, line in enumerate(lines):
        parts.append(SegmentLines([_rstrip(line)], new_lines=True))
        for detail in details.get(index - 1, []):
            parts.append(Text(f"{DETAIL_INDENT}{detail}", style="dim"))
    parts += [Text(f"{DETAIL_INDENT}{line}", style="dim") for line in footer]
    console.print(Group(*parts))


def _rstrip(line: list[Segment]) -> list[Segment]:
    """The line without the padding of its last cells (plain logs keep no trailing spaces)."""
    while line and not line[-1].text.strip():
        line = line[:-1]
    if line:
        last = line[-1]
        line = [*line[:-1], Segment(last.text.rstrip(), last.style, last.control)]
    return line


def _print_outputs(console: Console, results: list[Result]) -> None:
    for result in results:
        if not result.passed and result.outcome.output:
            console.print(Rule(f"{result.exercise.key} ({result.variant}): full output"))
            console.print(Text(result.outcome.output.rstrip()))
