"""`grader compare` (instructors): a learner's results next to the solutions', and a gradebook.

Results come either from `grader run ... --json` (a list, one entry per exercise) or from the
grader's own results file (.grader/results.json, keyed by variant). Everything here works on those
dictionaries; the command only reads the files and prints.
"""
import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

from grader.course import Course
from grader.errors import UserError
from grader.manifest import Exercise
from grader.results import LEARNER, PASS, SOLUTION, PerfCase, format_number, judged_cases

Entries = dict[str, dict]  # "module/id" -> a result entry (results.Result.to_json())


def read_results(path: Path, variant: str = LEARNER) -> Entries:
    """The entries of a `--json` file, or of `variant` in a results.json."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise UserError(f"{path}: not a results file ({error})") from None
    if isinstance(data, list) and all(isinstance(entry, dict) and "exercise" in entry
                                      for entry in data):
        return {entry["exercise"]: entry for entry in data}
    if isinstance(data, dict) and isinstance(data.get(variant), dict):
        return data[variant]
    raise UserError(f"{path}: neither `grader run --json` output nor a .grader/results.json "
                    f"with {variant} results")


def headline(entry: dict | None, exercise: Exercise) -> PerfCase | None:
    """The case a one-line summary shows: the first judged one (results.judged_cases)."""
    if not entry:
        return None
    cases = [PerfCase.from_dict(case) for case in entry.get("perf", [])]
    return (judged_cases(exercise, cases) or cases or [None])[0]


@dataclass(frozen=True)
class ComparedRow:
    exercise: str
    learner_status: str
    learner_value: str
    solution_status: str
    solution_value: str
    percent_of_solution: str


def compare(course: Course, learner: Entries, solution: Entries) -> list[ComparedRow]:
    rows = []
    for exercise in course.exercises:
        mine, theirs = learner.get(exercise.key), solution.get(exercise.key)
        if mine is None and theirs is None:
            continue
        my_case, their_case = headline(mine, exercise), headline(theirs, exercise)
        rows.append(ComparedRow(
            exercise.key, _status(mine), _value(my_case), _status(theirs), _value(their_case),
            _percent(my_case, their_case) if _passed(mine) and _passed(theirs) else "-"))
    return rows


def _status(entry: dict | None) -> str:
    return entry["status"] if entry else "not run"


def _passed(entry: dict | None) -> bool:
    return bool(entry) and entry["status"] == PASS


def _value(case: PerfCase | None) -> str:
    return case.value_text() if case else "-"


def _percent(mine: PerfCase | None, theirs: PerfCase | None) -> str:
    if not (mine and theirs and mine.value and theirs.value):
        return "-"
    return f"{100 * mine.value / theirs.value:.0f}%"


# --- gradebook ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grade:
    status: str
    percent_of_baseline: float | None  # the headline case's, for a pass
    target_met: bool | None


def grade_of(entry: dict | None, exercise: Exercise) -> Grade:
    if not entry:
        return Grade("not run", None, None)
    case = headline(entry, exercise) if entry["status"] == PASS else None
    percent = None if case is None or case.ratio is None else 100 * case.ratio
    return Grade(entry["status"], percent, entry.get("target_met"))


def gradebook(course: Course, learners: dict[str, Entries]) -> tuple[list[Exercise],
                                                                     dict[str, list[Grade]]]:
    """The exercises any learner ran (course order), and each learner's grade for each."""
    keys = set().union(*learners.values()) if learners else set()
    exercises = [exercise for exercise in course.exercises if exercise.key in keys]
    return exercises, {name: [grade_of(entries.get(exercise.key), exercise)
                              for exercise in exercises]
                       for name, entries in sorted(learners.items())}


def _totals(grades: list[Grade]) -> tuple[int, int]:
    return (sum(grade.status == PASS for grade in grades),
            sum(grade.target_met is True for grade in grades))


def gradebook_csv(exercises: list[Exercise], book: dict[str, list[Grade]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = ["learner", "passed", "targets met"]
    for exercise in exercises:
        header += [f"{exercise.key} status", f"{exercise.key} % of baseline",
                   f"{exercise.key} target met"]
    writer.writerow(header)
    for name, grades in book.items():
        row = [name, *_totals(grades)]
        for grade in grades:
            row += [grade.status,
                    "" if grade.percent_of_baseline is None else f"{grade.percent_of_baseline:.1f}",
                    "" if grade.target_met is None else "yes" if grade.target_met else "no"]
        writer.writerow(row)
    return out.getvalue()


def gradebook_markdown(exercises: list[Exercise], book: dict[str, list[Grade]]) -> str:
    header = ["learner", "passed", "targets met", *(exercise.key for exercise in exercises)]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, grades in book.items():
        passed, met = _totals(grades)
        cells = [name, f"{passed}/{len(grades)}", str(met), *map(_cell, grades)]
        lines.append("| " + " | ".join(cells) + " |")
    legend = ("Each cell: the status, and for a pass the headline case's % of its baseline "
              "(measured on the learner's GPU), with a check mark where the target is met.")
    return "\n".join(lines) + "\n\n" + legend + "\n"


def _cell(grade: Grade) -> str:
    if grade.status != PASS or grade.percent_of_baseline is None:
        return grade.status
    mark = " ✓" if grade.target_met else ""
    return f"pass {format_number(grade.percent_of_baseline)}%{mark}"


def solution_entries(path: Path | None, stored: dict) -> Entries:
    if path is not None:
        return read_results(path, SOLUTION)
    entries = stored.get(SOLUTION, {})
    if not entries:
        raise UserError("no solution results: run `grader run all --solutions` first, or pass "
                        "--against FILE (a `grader run --solutions --json` output)")
    return entries
