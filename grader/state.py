"""The grader's memory in `<root>/.grader/`: results of every run and the hint tier per exercise."""
import json
import os
import tempfile
from datetime import datetime
from pathlib import Path

from grader.errors import UserError
from grader.results import PASS, PerfCase, Result

STATE_DIR = ".grader"
RESULTS_FILE = "results.json"
HINTS_FILE = "hints.json"


def atomic_write_text(path: Path, text: str) -> None:
    """Writes through a temporary file and a rename: a crash never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def load_results(root: Path) -> dict[str, dict[str, dict]]:
    """{variant: {"module/id": entry}}; entries as written by record_results."""
    return _load(root / STATE_DIR / RESULTS_FILE)


def record_results(root: Path, results: list[Result], now: datetime | None = None) -> dict:
    """Merges `results` into the results file, keeping each exercise's best passing run."""
    stored = load_results(root)
    timestamp = (now or datetime.now().astimezone()).isoformat(timespec="seconds")
    for result in results:
        entries = stored.setdefault(result.variant, {})
        previous = entries.get(result.exercise.key, {})
        entry = {**result.to_json(), "timestamp": timestamp}
        entry["best"] = _best(previous.get("best"), entry)
        entries[result.exercise.key] = entry
    _save(root / STATE_DIR / RESULTS_FILE, stored)
    return stored


def headline(perf: list[dict]) -> PerfCase | None:
    """The timed case a one-line summary shows: the first."""
    return PerfCase.from_dict(perf[0]) if perf else None


def load_hint_tiers(root: Path) -> dict[str, int]:
    """{"module/id": how many hints were shown}."""
    return _load(root / STATE_DIR / HINTS_FILE)


def save_hint_tiers(root: Path, tiers: dict[str, int]) -> None:
    _save(root / STATE_DIR / HINTS_FILE, tiers)


def _best(best: dict | None, entry: dict) -> dict | None:
    """The better of the stored best and this run: a pass with the higher headline ratio."""
    if entry["status"] != PASS:
        return best
    candidate = {"perf": entry["perf"], "timestamp": entry["timestamp"]}
    if best is None:
        return candidate
    return candidate if _headline_ratio(candidate) >= _headline_ratio(best) else best


def _headline_ratio(best: dict) -> float:
    case = headline(best["perf"])
    return -1.0 if case is None or case.ratio is None else case.ratio


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except json.JSONDecodeError:
        raise UserError(f"{path} is not valid JSON: delete it to start over") from None


def _save(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")
