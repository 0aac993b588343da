"""progress.md and ROADMAP.md: the grader rewrites only its own blocks, between its markers, and
never loses the learner's text: a symlink is followed, the mode and the line endings are kept, a
file that does not change is not written, a read-only one is left alone, and text typed inside a
block is kept in .grader/ (with a note) before the block is rewritten."""
import stat
from datetime import datetime
from pathlib import Path

import click
from jinja2 import Environment, PackageLoader, StrictUndefined

from grader.course import Course
from grader.errors import UserError
from grader.manifest import Exercise
from grader.results import PASS
from grader.state import (STATE_DIR, atomic_write_text, headline, load_blocks, save_blocks,
                          state_lock)

PROGRESS_FILE = "progress.md"
ROADMAP_FILE = "ROADMAP.md"
STATUS_MARKERS = ("<!-- grader:status:begin -->", "<!-- grader:status:end -->")
CHECKLIST_MARKERS = ("<!-- grader:checklist:begin -->", "<!-- grader:checklist:end -->")
KEPT_PREFIX = "kept-"  # .grader/kept-progress.md: text found inside a block, before a rewrite
# How the ROADMAP's checkpoints name a manifest's baseline (a baseline not here: its own name).
BASELINE_NAMES = {
    "copy": "device copy bandwidth",
    "cublas_sgemm": "cuBLAS SGEMM",
    "cublas_gemm_bf16": "cuBLAS bf16",
    "cub_reduce_sum": "CUB",
    "cub_inclusive_scan": "CUB",
    "cub_histogram_256": "CUB",
    "cub_segmented_sort": "CUB's segmented sort",
    "cudnn_attention_bf16": "cuDNN's fused attention",
    "cudnn_attention_backward_bf16": "cuDNN's fused attention backward",
    "nccl_allreduce": "NCCL's all-reduce",
    "allreduce_after_backward": "the steps per second of one all-reduce after the backward",
}

_templates = Environment(loader=PackageLoader("grader", "templates"), undefined=StrictUndefined,
                         trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def check_learner_files(course: Course) -> None:
    """Before a run: both files, where they exist, can be read as UTF-8 (else one line, exit 2)."""
    for name in (PROGRESS_FILE, ROADMAP_FILE):
        read_text(course.root / name)


def update_learner_files(course: Course, learner_results: dict[str, dict],
                         previous_results: dict[str, dict] | None = None) -> None:
    """Regenerates both blocks from the learner's results; creates a missing file whole.
    `previous_results` (before this run) tell what the grader wrote last, where .grader/ has no
    copy of it."""
    previous = _blocks(course, previous_results or {})
    blocks = _blocks(course, learner_results)
    with state_lock(course.root):
        written = load_blocks(course.root)
        for name, markers, whole_template, block_name in (
                (PROGRESS_FILE, STATUS_MARKERS, "progress.md.j2", "status_block"),
                (ROADMAP_FILE, CHECKLIST_MARKERS, "roadmap.md.j2", "checklist_block")):
            if _update(course.root, name, markers, blocks[name],
                       written.get(name, previous[name]), whole_template, block_name):
                written[name] = blocks[name]
        save_blocks(course.root, written)


def replace_block(text: str, markers: tuple[str, str], block: str) -> str | None:
    """`text` with the block between `markers` replaced (appended when there are no markers);
    None when the markers are broken, so that nothing of the learner's is ever lost. The block
    gets the text's line endings (CRLF where most lines end so)."""
    begin, end = markers
    newline = "\r\n" if 2 * text.count("\r\n") > text.count("\n") else "\n"
    framed = _framed(markers, block).replace("\n", newline)
    counts = (text.count(begin), text.count(end))
    if counts == (0, 0):
        separator = "" if not text else newline if text.endswith("\n") else newline * 2
        return f"{text}{separator}{framed}"
    start, stop = text.find(begin), text.find(end)
    if counts != (1, 1) or stop < start:
        return None
    return text[:start] + framed.rstrip("\r\n") + text[stop + len(end):]


def block_of(text: str, markers: tuple[str, str]) -> str | None:
    """What stands between the markers (LF line endings), or None without exactly one pair."""
    begin, end = markers
    start, stop = text.find(begin), text.find(end)
    if text.count(begin) != 1 or text.count(end) != 1 or stop < start:
        return None
    return text[start + len(begin):stop].replace("\r\n", "\n")


def read_text(path: Path) -> str | None:
    """The file's text with its line endings as they are; None when it does not exist."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise UserError(f"cannot read {path.name}: {error.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UserError(f"{path.name} is not UTF-8 text (byte {error.start} is not): save it as "
                        "UTF-8 and run again") from None


def _framed(markers: tuple[str, str], block: str) -> str:
    begin, end = markers
    return f"{begin}\n{block.strip()}\n{end}\n"


def _update(root: Path, name: str, markers: tuple[str, str], block: str, last_written: str,
            whole_template: str, block_name: str) -> bool:
    """Writes the block into root/name where it can; True when the file now holds it."""
    path = (root / name).resolve()  # a symlink: its target is the learner's file
    text = read_text(path)
    if text is None:
        whole = _templates.get_template(whole_template)
        atomic_write_text(path, whole.render(**{block_name: _framed(markers, block)}))
        return True
    mode = stat.S_IMODE(path.stat().st_mode)
    if not mode & stat.S_IWUSR:
        _note(f"{name} was not updated: it is read-only")
        return False
    updated = replace_block(text, markers, block)
    if updated is None:
        _note(f"{name} was not updated: its {markers[0]} / {markers[1]} markers are broken (each "
              "must appear once, in this order)")
        return False
    if updated != text:
        found = block_of(text, markers)
        if found is not None and found.strip() not in (last_written.strip(), block.strip()):
            kept = _keep(root, name, found)
            _note(f"{name}: the text between the grader's markers was not what the grader wrote "
                  f"there; it is rewritten on every run, so a copy of what was there is in "
                  f"{kept}: move your lines above or below the block")
        atomic_write_text(path, updated, mode)
    return True


def _keep(root: Path, name: str, found: str) -> str:
    """Appends `found` to .grader/kept-<name>; returns that path, relative to the root."""
    relative = f"{STATE_DIR}/{KEPT_PREFIX}{name}"
    stamp = datetime.now().astimezone().isoformat(timespec="seconds")
    with open(root / relative, "a", encoding="utf-8") as file:
        file.write(f"<!-- from {name}, {stamp} -->\n{found.strip()}\n\n")
    return relative


def _note(text: str) -> None:
    click.echo(f"note: {text}", err=True)


def _blocks(course: Course, learner_results: dict[str, dict]) -> dict[str, str]:
    status = _templates.get_template("progress_status.md.j2").render(
        modules=_status_tables(course, learner_results),
        updated=max((entry["timestamp"] for entry in learner_results.values()), default=None))
    checklist = _templates.get_template("roadmap_checklist.md.j2").render(
        modules=_checklists(course, learner_results))
    return {PROGRESS_FILE: status, ROADMAP_FILE: checklist}


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
                          "exercises": [{"id": exercise.id, "key": exercise.key,
                                         "title": exercise.title,
                                         "goal": target_phrase(exercise),
                                         "passed": learner_results.get(exercise.key, {})
                                         .get("status") == PASS}
                                        for exercise in module.exercises]}
            for module in course.modules}


def target_phrase(exercise: Exercise) -> str:
    """The target in words, from the manifest, as the ROADMAP's checkpoints give it: "`scan` at
    90% of CUB"; per case where the cases' targets differ ("... at 40% of cuDNN's fused attention
    on D128 and 45% on D128 causal"); the stretch beside it (", stretch 45%")."""
    baseline = BASELINE_NAMES.get(exercise.baseline, exercise.baseline)
    if exercise.case_targets:
        (label, ratio), *others = exercise.case_targets
        text = f"`{exercise.id}` at {ratio:.0%} of {baseline} on {label}" + "".join(
            f" and {ratio:.0%} on {label}" for label, ratio in others)
    else:
        text = f"`{exercise.id}` at {exercise.target:.0%} of {baseline}"
    return text + (f", stretch {exercise.stretch:.0%}" if exercise.stretch > 0 else "")
