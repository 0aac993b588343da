"""The grader's memory in `<root>/.grader/`: results of every run, the hint tier per exercise, the
blocks last written into the learner's files; and the lock that makes concurrent runs safe."""
import json
import os
import tempfile
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from filelock import FileLock

from grader.errors import UserError
from grader.results import PASS, PerfCase, Result

STATE_DIR = ".grader"
RESULTS_FILE = "results.json"
HINTS_FILE = "hints.json"
BLOCKS_FILE = "blocks.json"
LOCK_FILE = "lock"

_locks: dict[Path, FileLock] = {}


@contextmanager
def state_lock(root: Path):
    """Held while the results and the learner's files are read, merged and written: concurrent
    runs each add their results and leave progress.md agreeing with results.json. Reentrant."""
    folder = root / STATE_DIR
    try:
        folder.mkdir(exist_ok=True)
    except OSError as error:
        raise UserError(f"cannot create {STATE_DIR}/ in {root}: {error.strerror}") from None
    lock = _locks.setdefault(folder, FileLock(folder / LOCK_FILE))
    with lock:
        yield


def atomic_write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Writes through a temporary file and a rename: a crash never leaves half a file. `mode`:
    the permission bits to give it (those of the file it replaces)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # newline="": the text's own line endings, as they are.
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as file:
            file.write(text)
        os.chmod(temporary, mode if mode is not None else 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def load_results(root: Path) -> dict[str, dict[str, dict]]:
    """{variant: {"module/id": entry}}; entries as written by record_results."""
    return _load(root, RESULTS_FILE, _results_problem)


def record_results(root: Path, results: list[Result], now: datetime | None = None) -> dict:
    """Merges `results` into the results file, keeping each exercise's best passing run."""
    with state_lock(root):
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
    return _load(root, HINTS_FILE, _hints_problem)


def save_hint_tiers(root: Path, tiers: dict[str, int]) -> None:
    _save(root / STATE_DIR / HINTS_FILE, tiers)


def load_blocks(root: Path) -> dict[str, str]:
    """{file name: the block the grader last wrote into it} (progress.py)."""
    return _load(root, BLOCKS_FILE, _blocks_problem)


def save_blocks(root: Path, blocks: dict[str, str]) -> None:
    _save(root / STATE_DIR / BLOCKS_FILE, blocks)


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
    return -1.0 if case is None or not isinstance(case.ratio, (int, float)) else case.ratio


def _results_problem(data) -> str | None:
    if not isinstance(data, dict):
        return "not an object of variants"
    for variant, entries in data.items():
        if not isinstance(entries, dict):
            return f"'{variant}' is not an object of exercises"
        for key, entry in entries.items():
            if not (isinstance(entry, dict) and isinstance(entry.get("status"), str)
                    and isinstance(entry.get("timestamp"), str)
                    and _is_perf_list(entry.get("perf", []))
                    and (entry.get("best") is None or (isinstance(entry["best"], dict)
                                                       and _is_perf_list(entry["best"].get("perf"))
                                                       ))):
                return f"the entry of {variant} {key} is not one the grader writes"
    return None


def _is_perf_list(perf) -> bool:
    return isinstance(perf, list) and all(isinstance(case, dict) for case in perf)


def _hints_problem(data) -> str | None:
    if isinstance(data, dict) and all(isinstance(tier, int) and not isinstance(tier, bool)
                                      for tier in data.values()):
        return None
    return "not an object of hint counts"


def _blocks_problem(data) -> str | None:
    if isinstance(data, dict) and all(isinstance(block, str) for block in data.values()):
        return None
    return "not an object of texts"


def _load(root: Path, name: str, problem) -> dict:
    where = f"{STATE_DIR}/{name}"
    try:
        data = json.loads((root / STATE_DIR / name).read_bytes())
    except FileNotFoundError:
        return {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UserError(f"{where} is not valid JSON: delete it to start over") from None
    except OSError as error:
        raise UserError(f"cannot read {where}: {error.strerror}") from None
    found = problem(data)
    if found:
        raise UserError(f"{where} is not what the grader writes ({found}): delete it to start "
                        "over") from None
    return data


def _save(path: Path, data: dict) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
