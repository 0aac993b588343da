"""Running one checker executable in its own process group, with a timeout."""
import json
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CheckerRun:
    returncode: int  # negative: killed by that signal (POSIX)
    timed_out: bool
    report: dict | None  # the --gtest_output JSON; None when the checker did not write it
    output: str  # stdout and stderr together
    duration_s: float


def run_checker(exe: Path, cwd: Path, timeout_s: float) -> CheckerRun:
    """Runs `exe` with a GoogleTest JSON report; the environment (GRADER_SEED...) passes on."""
    with tempfile.TemporaryDirectory(prefix="grader-") as scratch:
        report_path = Path(scratch) / "report.json"
        command = [str(exe), f"--gtest_output=json:{report_path}", "--gtest_color=no"]
        started = time.monotonic()
        # A session of its own, so that a timeout kills whatever the checker started too.
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, start_new_session=True)
        try:
            output, _ = process.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(process.pid)
            output, _ = process.communicate()
            timed_out = True
        return CheckerRun(
            returncode=process.returncode,
            timed_out=timed_out,
            report=_read_report(report_path),
            output=output.decode(errors="replace"),
            duration_s=time.monotonic() - started,
        )


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it ended between the timeout and the kill


def _read_report(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        # A checker killed while writing leaves a partial file: as good as none.
        return None
