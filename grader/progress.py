"""progress.md and ROADMAP.md: the grader rewrites only its own blocks, between its markers."""
from pathlib import Path

import click
from jinja2 import Environment, PackageLoader, StrictUndefined

from grader.course import Course
from grader.results import PASS
from grader.state import atomic_write_text, headline

PROGRESS_FILE = "progress.md"
ROADMAP_FILE = "ROADMAP.md"
STATUS_MARKERS = ("<!-- grader:status:begin -->", "<!-- grader:status:end -->")
CHECKLIST_MARKERS = ("<!-- grader:checklist:begin -->", "<!-- grader:checklist:end -->")

_templates = Environment(loader=PackageLoader("grader", "templates"), undefined=StrictUndefined,
                         trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def update_learner_files(course: Course, learner_results: dict[str, dict]) -> None:
    """Regenerates both blocks from the learner's results; creates a missing file whole."""
    status = _templates.get_template("progress_status.md.j2").render(
        modules=_status_tables(course, learner_results),
        updated=max((entry["timestamp"] for entry in learner_results.values()), default=None))
    checklist = _templates.get_template("roadmap_checklist.md.j2").render(
        modules=_checklists(course, learner_results))
    _update(course.root / PROGRESS_FILE, STATUS_MARKERS, status, "progress.md.j2", "status_block")
    _update(course.root / ROADMAP_FILE, CHECKLIST_MARKERS, checklist, "roadmap.md.j2",
            "checklist_block")


def replace_block(text: str, markers: tuple[str, str], block: str) -> str | None:
    """`text` with the block between `markers` replaced (appended when there are no markers);
    None when the markers are broken, so that nothing of the learner's is ever lost."""
    begin, end = markers
    counts = (text.count(begin), text.count(end))
    if counts == (0, 0):
        separator = "" if not text else "\n" if text.endswith("\n") else "\n\n"
        return f"{text}{separator}{_framed(markers, block)}"
    start, stop = text.find(begin), text.find(end)
    if counts != (1, 1) or stop < start:
        return None
    return text[:start] + _framed(markers, block).rstrip("\n") + text[stop + len(end):]


def _framed(markers: tuple[str, str], block: str) -> str:
    begin, end = markers
    return f"{begin}\n{block.strip()}\n{end}\n"


def _update(path: Path, markers: tuple[str, str], block: str, whole_template: str,
            block_name: str) -> None:
    if not path.exists():
        whole = _templates.get_template(whole_template)
        atomic_write_text(path, whole.render(**{block_name: _framed(markers, block)}))
        return
    updated = replace_block(path.read_text(encoding="utf-8"), markers, block)
    if updated is None:
        click.echo(f"note: {path.name} was not updated: its {markers[0]} / {markers[1]} markers "
                   "are broken (each must appear once, in this order)", err=True)
    else:
        atomic_write_text(path, updated)


def _status_tables(course: Course, learner_results: dict[str, dict]) -> list[dict]:
    return [{"name": module.name, "title": module.title,
             "rows": [_status_row(exercise.id, learner_results.get(exercise.key))
                      for exercise in module.exercises]}
            for module in course.modules]


def _status_row(exercise_id: str, entry: dict | None) -> dict:
    best = entry and entry.get("best")
    case = headline(best["perf"]) if best else None
    return {"id": exercise_id,
            "status": entry["status"] if entry else "-",
            "best": case.value_text() if case else "-",
            "percent": case.percent_text() if case else "-",
            "last_run": entry["timestamp"][:10] if entry else "-"}


def _checklists(course: Course, learner_results: dict[str, dict]) -> dict[str, dict]:
    return {module.name: {"title": module.title, "week": module.week,
                          "exercises": [{"key": exercise.key, "title": exercise.title,
                                         "passed": learner_results.get(exercise.key, {})
                                         .get("status") == PASS}
                                        for exercise in module.exercises]}
            for module in course.modules}
