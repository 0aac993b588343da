"""`grader sanitize`: an exercise's correctness cases under compute-sanitizer, one tool at a time.

memcheck finds out-of-bounds and misaligned accesses, racecheck shared-memory races, synccheck
misused barriers, initcheck reads of device memory nothing wrote. The timed cases are left out
(they would take minutes under a sanitizer and test nothing more). The checker runs with
COURSE_EXACT_ALLOCATIONS=1: the harness then allocates each buffer at its exact size, without the
redzones it normally keeps around it, so that a stray access leaves the allocation and memcheck
sees it. Each tool's output is summarized by `summarize_output`, a function of the text alone,
tested on recorded output (grader/tests/fixtures/sanitizer/).
"""
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.build import BuildTree, Log
from grader.cases import built_tree, checker_cases
from grader.course import Course
from grader.manifest import Exercise
from grader.tools import require_toolkit_program

TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
EXACT_ALLOCATIONS_ENV = {"COURSE_EXACT_ALLOCATIONS": "1"}
LOGS_DIR = "sanitize"
# A sanitizer runs the checker's cases many times slower than the GPU does.
SLOWDOWN = 10
PREFIX = re.compile(r"^========= ?")
SUMMARY = re.compile(r"(ERROR|RACECHECK) SUMMARY: (\d+) (?:errors?|hazards?)")
# Where a report points in the code: "... at kernel(...)+0x1a0 in /path/file.cu:42".
LOCATION = re.compile(r" in (\S+):(\d+)(?:\s*\[[^\]]*\])?\s*$")
HAZARD_COUNT = re.compile(r"\((\d+) errors?, \d+ warnings?\)")
# The first line of a report (what happened), before the lines that say where.
REPORT_START = re.compile(r"^(Invalid |Misaligned |Uninitialized |Race reported |Error: Race |"
                          r"Barrier error|Program hit |Out-of-range |Warning: |Error: |"
                          r"Unused memory|Leaked |Malloc/Free)")


@dataclass(frozen=True)
class ToolSummary:
    tool: str
    errors: int | None  # None when the output has no summary (the checker crashed under it)
    first: str  # the first report's headline, "" when clean
    where: list[str]  # the file:line of the first report's frames (a race has two accesses)


def summarize_output(tool: str, text: str) -> ToolSummary:
    """What compute-sanitizer's `text` says: the error count and the first report."""
    lines = [PREFIX.sub("", line).rstrip() for line in text.splitlines()
             if line.startswith("=========")]
    errors = None
    for line in lines:
        match = SUMMARY.search(line)
        if match and "not printed" not in line and errors is None:
            count = HAZARD_COUNT.search(line)  # racecheck: hazards, of which errors
            errors = int(count[1]) if count else int(match[2])
    for index, line in enumerate(lines):
        if REPORT_START.match(line.strip()) and not SUMMARY.search(line):
            report = [line.strip()]
            for follow in lines[index + 1:index + 8]:
                if not follow.strip() or REPORT_START.match(follow.strip()):
                    break
                report.append(follow.strip())
            places = [f"{match[1]}:{match[2]}" for match in map(LOCATION.search, report) if match]
            return ToolSummary(tool, errors, _headline(report), list(dict.fromkeys(places)))
    return ToolSummary(tool, errors, "", [])


def _headline(report: list[str]) -> str:
    """The report's first line in words, with who did it and how far off, where it says."""
    first = report[0]
    # A race names its second access on the next line ("and Read access at ...").
    if len(report) > 1 and report[1].startswith("and "):
        first += " " + report[1]
    first = re.sub(r"^Error: ", "", first)
    first = re.sub(r" at \S*\(.*?\)\+0x[0-9a-f]+", "", first)
    first = re.sub(r" in \S+:\d+", "", first)
    first = re.sub(r"\s*\[\d+ hazards?\]", "", first).rstrip(":").strip()
    details = [line for line in report[1:] if line.startswith("by thread")]
    details += [re.sub(r"^and is | at 0x[0-9a-f]+", "", line) for line in report[1:]
                if line.startswith("and is ") and "nearest allocation" in line]
    return first + (f" ({'; '.join(details)})" if details else "")


def describe(summary: ToolSummary, relative=lambda place: place) -> str:
    """One line: the count, and the first report with where it points (made repo-relative by
    `relative`, which takes "file:line")."""
    if summary.errors is None:
        return "no summary from compute-sanitizer (did the checker crash? see the log)"
    if summary.errors == 0:
        return "0 errors"
    text = f"{summary.errors} error{'' if summary.errors == 1 else 's'}"
    if summary.first:
        text += f"; first: {summary.first}"
    if summary.where:
        text += f", at {' and '.join(relative(place) for place in summary.where)}"
    return text


def source_locator(course: Course, sources: list[Path]):
    """Maps a sanitizer's "file.cu:42" (it prints base names) to the repo-relative path of the
    exercise's file of that name; other places stay as printed."""
    by_name = {path.name: course.relative(path) for path in sources if path.is_file()}

    def relative(place: str) -> str:
        file, _, line = place.rpartition(":")
        file = course.strip_root(file)
        return f"{by_name.get(file, file)}:{line}"
    return relative


def gtest_filter(timed_tests: list[str]) -> str:
    """Every test but the timed ones."""
    return f"--gtest_filter=-{':'.join(timed_tests)}" if timed_tests else "--gtest_filter=*"


def sanitizer_command(sanitizer: str, tool: str, exe: Path, timed_tests: list[str]) -> list[str]:
    return [sanitizer, "--tool", tool, "--print-limit", "20", "--show-backtrace", "device", exe,
            gtest_filter(timed_tests), "--gtest_color=no"]


@dataclass(frozen=True)
class SanitizeRun:
    exercise: Exercise
    variant: str
    excluded: list[str]
    summaries: list[ToolSummary]
    logs: Path


def sanitize(course: Course, exercise: Exercise, variant: str, tools: tuple[str, ...],
             log: Log) -> SanitizeRun:
    sanitizer = require_toolkit_program("compute-sanitizer", "compute-sanitizer")
    tree = built_tree(course, exercise, variant, log)
    timed = [case.test for case in checker_cases(tree, exercise, log).timed]
    summaries = [run_tool(sanitizer, tool, tree, exercise, timed, log) for tool in tools]
    return SanitizeRun(exercise, variant, timed, summaries, tree.path / LOGS_DIR)


def memcheck_summary(tree: BuildTree, exercise: Exercise, timed_tests: list[str],
                     log: Log) -> ToolSummary:
    """memcheck over `exercise`'s built checker in `tree`, all but its timed tests (`grader check`
    runs it on the solutions, the mutant runner on the planted bugs that only it can see)."""
    sanitizer = require_toolkit_program("compute-sanitizer", "compute-sanitizer")
    return run_tool(sanitizer, "memcheck", tree, exercise, timed_tests, log)


def run_tool(sanitizer: str, tool: str, tree: BuildTree, exercise: Exercise,
             timed_tests: list[str], log: Log) -> ToolSummary:
    """One tool over the checker, with exact allocations; its log kept in build/<tree>/sanitize."""
    logs = tree.path / LOGS_DIR
    logs.mkdir(parents=True, exist_ok=True)
    environment = {**os.environ, **EXACT_ALLOCATIONS_ENV}
    log(f"compute-sanitizer --tool {tool}: {exercise.key}")
    command = [str(part) for part in sanitizer_command(sanitizer, tool, tree.executable(exercise),
                                                       timed_tests)]
    try:
        run = subprocess.run(command, cwd=tree.path, capture_output=True, text=True,
                             errors="replace", env=environment,
                             timeout=SLOWDOWN * exercise.timeout_s)
        output = run.stdout + run.stderr
    except subprocess.TimeoutExpired as timeout:
        output = _text(timeout.stdout) + _text(timeout.stderr)
        output += f"\n(killed after {SLOWDOWN * exercise.timeout_s:g} s)\n"
    (logs / f"{tree.target(exercise)}.{tool}.log").write_text(output, encoding="utf-8")
    return summarize_output(tool, output)


def _text(captured: str | bytes | None) -> str:
    if isinstance(captured, bytes):
        return captured.decode(errors="replace")
    return captured or ""
