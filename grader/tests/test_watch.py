"""grader watch: which exercises a change re-grades, the hint offered after a failure, and the
loop itself with a made-up stream of changes, and watchfiles seeing a real save."""
import threading
import time
from pathlib import Path

import pytest

from grader import hints, tools_cli
from grader.course import load_course, select
from grader.results import FAIL, PASS, SKIPPED, TODO, Outcome, Result
from grader.watch import _watch_folders, changed_exercises, hint_offers, watch, watched_files

from .conftest import invoke


def result(exercise, status) -> Result:
    return Result(exercise, "learner", Outcome(status), exe="")


def test_each_exercise_is_watched_through_its_own_file(course):
    loaded = load_course(course)
    exercises = select(loaded, "01")
    learner = watched_files(loaded, exercises, "learner")
    assert learner[(course / "modules/01_fixture/passes.cpp").resolve()].id == "passes"
    solution = watched_files(loaded, exercises, "solution")
    assert (course / "solutions/01_fixture/passes.cpp").resolve() in solution


def test_only_the_exercises_whose_file_changed_are_graded_again(course):
    loaded = load_course(course)
    exercises = select(loaded, "01")
    files = watched_files(loaded, exercises, "learner")
    changed = [str(course / "modules/01_fixture/todo.cpp"), str(course / "README.md"),
               str(course / "modules/01_fixture/passes.cpp")]
    assert [e.id for e in changed_exercises(changed, files, exercises)] == ["passes", "todo"]


def test_a_failure_offers_the_next_hint_and_a_pass_offers_none(course):
    loaded = load_course(course)
    passes, mismatch, todo = (select(loaded, f"01/{name}")[0]
                              for name in ("passes", "mismatch", "todo"))
    hints.reveal_next(course, todo)
    offers = hint_offers(loaded, [result(passes, PASS), result(mismatch, FAIL),
                                  result(todo, TODO)])
    assert offers == [
        "Stuck on 01_fixture/mismatch? `grader hint 01_fixture/mismatch` shows hint 1 of 2.",
        "Stuck on 01_fixture/todo? `grader hint 01_fixture/todo` shows hint 2 of 2."]
    hints.reveal_next(course, todo)
    assert "all 2 hints are out" in hint_offers(loaded, [result(todo, TODO)])[0]
    assert hint_offers(loaded, [result(todo, SKIPPED)]) == []


def test_the_loop_grades_everything_then_only_what_changed(course):
    loaded = load_course(course)
    exercises = select(loaded, "01/passes") + select(loaded, "01/todo")
    graded, shown = [], []

    def grade(chosen):
        graded.append([e.id for e in chosen])
        return [result(e, PASS if len(graded) > 1 else TODO) for e in chosen]

    changes = [{(1, str(course / "README.md"))},
               {(2, str(course / "modules/01_fixture/todo.cpp"))}]
    watch(loaded, exercises, "learner", grade, lambda r, f: shown.append((r, f)), iter(changes))
    assert graded == [["passes", "todo"], ["todo"]]  # the README change graded nothing
    first, second = shown
    assert [r.status for r in first[0]] == [TODO, TODO]
    assert [r.status for r in second[0]] == [TODO, PASS]  # passes keeps its last result
    assert first[1][0].startswith("Stuck on 01_fixture/passes?")
    assert second[1] == ["watching 2 files: save one to grade it again; Ctrl-C stops"]


def test_the_command_grades_and_redraws(course, monkeypatch):
    events = iter([{(2, str(course / "modules/01_fixture/passes.cpp"))}])
    monkeypatch.setattr("grader.watch._watch_folders", lambda files: events)
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: True)
    run = invoke(course, "watch", "01/passes")
    assert run.exit_code == 0, run.stderr
    assert run.stdout.count("passes") >= 2  # the table, drawn twice
    assert "watching 1 file" in run.stdout
    assert (course / ".grader/results.json").is_file()  # recorded like `grader run`


def test_without_watchfiles_the_command_says_what_to_install(course, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_watchfiles(name, *args, **kwargs):
        if name == "watchfiles":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", no_watchfiles)
    run = invoke(course, "watch", "01/passes")
    assert run.exit_code == 2
    assert "pip install -e '.[watch]'" in run.stderr


def test_watchfiles_reports_a_save_of_a_watched_file_only(course):
    pytest.importorskip("watchfiles")
    loaded = load_course(course)
    exercises = select(loaded, "01/passes")
    files = watched_files(loaded, exercises, "learner")
    changes = _watch_folders(files)
    stub = course / "modules/01_fixture/passes.cpp"
    other = course / "modules/01_fixture/mismatch.cpp"

    def save_later():
        time.sleep(0.5)
        other.write_text(other.read_text() + "\n")  # not watched: filtered out
        stub.write_text(stub.read_text() + "\n// saved\n")
    threading.Thread(target=save_later, daemon=True).start()
    batch = next(iter(changes))
    assert [e.id for e in changed_exercises((path for _, path in batch), files, exercises)] == [
        "passes"]
    assert all(Path(path).resolve() == stub.resolve() for _, path in batch)
