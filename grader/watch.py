"""`grader watch`: re-grade an exercise each time its file is saved, and redraw the table.

The files are watched with watchfiles (a well-kept library on the operating system's own change
notifications; editors that save through a temporary file and a rename are seen too). Only the
exercises whose file changed are graded again; the table shows every watched exercise with its
latest result, and after a failure the line offers the next hint.
"""
from collections.abc import Callable, Iterable
from pathlib import Path

from grader.course import Course
from grader.hints import revealed
from grader.manifest import Exercise
from grader.results import PASS, SKIPPED, Result

INSTALL = "grader watch needs the watchfiles package: python3 -m pip install -e '.[watch]'"


def watched_files(course: Course, exercises: list[Exercise], variant: str) -> dict[Path, Exercise]:
    """The file of each exercise that the learner (or, for solutions, the author) edits."""
    return {course.source(exercise, variant).resolve(): exercise for exercise in exercises}


def changed_exercises(changed_paths: Iterable[str], files: dict[Path, Exercise],
                      order: list[Exercise]) -> list[Exercise]:
    """The exercises whose file is among `changed_paths`, in the selection's order."""
    touched = {files[path] for path in map(lambda p: Path(p).resolve(), changed_paths)
               if path in files}
    return [exercise for exercise in order if exercise in touched]


def hint_offers(course: Course, results: list[Result]) -> list[str]:
    """For each result that did not pass: the command that shows its next hint."""
    offers = []
    for result in results:
        if result.status in (PASS, SKIPPED):
            continue
        exercise = result.exercise
        shown, total = revealed(course.root, exercise), len(exercise.hints)
        if shown < total:
            offers.append(f"Stuck on {exercise.key}? `grader hint {exercise.key}` shows hint "
                          f"{shown + 1} of {total}.")
        else:
            offers.append(f"{exercise.key}: all {total} hints are out (`grader hint "
                          f"{exercise.key} --all` shows them again).")
    return offers


def watch(course: Course, exercises: list[Exercise], variant: str,
          grade: Callable[[list[Exercise]], list[Result]],
          show: Callable[[list[Result], list[str]], None],
          changes: Iterable[set] | None = None) -> None:
    """Grades `exercises`, then again each one whose file changes, until interrupted.

    `grade` grades and records a list of exercises; `show` clears the screen and prints the
    table and the lines under it. `changes` yields sets of (change, path) as watchfiles.watch
    does; by default, watchfiles watching the exercises' folders."""
    files = watched_files(course, exercises, variant)
    if changes is None:
        changes = _watch_folders(files)
    latest = {result.exercise: result for result in grade(exercises)}
    _show(show, exercises, latest, course, list(latest.values()), files)
    for batch in changes:
        again = changed_exercises((path for _, path in batch), files, exercises)
        if not again:
            continue
        fresh = grade(again)
        latest.update((result.exercise, result) for result in fresh)
        _show(show, exercises, latest, course, fresh, files)


def _show(show, exercises, latest, course, fresh, files) -> None:
    results = [latest[exercise] for exercise in exercises]
    footer = hint_offers(course, fresh)
    footer.append(f"watching {len(files)} file{'' if len(files) == 1 else 's'}: save one to "
                  "grade it again; Ctrl-C stops")
    show(results, footer)


def _watch_folders(files: dict[Path, Exercise]):
    try:
        from watchfiles import watch as watch_paths
    except ImportError:
        from grader.errors import UserError
        raise UserError(INSTALL) from None
    folders = sorted({path.parent for path in files})
    wanted = set(files)
    return watch_paths(*folders, watch_filter=lambda _, path: Path(path).resolve() in wanted)
