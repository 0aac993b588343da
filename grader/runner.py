"""Running one checker executable: in its own process group, with a timeout, its output kept to a
bounded head and tail, and its report read from the channel of common/src/report_channel.h. The
GPT trainer (module 08's train_gpt) runs the same way, without a report."""
import json
import os
import secrets
import selectors
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.errors import UserError

# COURSE_REPORT=<descriptor>:<nonce>; the harness echoes the nonce as this top-level property.
REPORT_VARIABLE = "COURSE_REPORT"
NONCE_PROPERTY = "course_report_nonce"
# Of a checker's output, the grader keeps this many bytes from the start and as many from the end.
KEPT_OUTPUT_BYTES = 64 * 1024
READ_BYTES = 64 * 1024
# While its output is quiet, how often the grader looks whether the checker has exited.
EXIT_POLL_S = 0.1
# After the checker is killed, how long its pipe may take to close (a grandchild that left the
# process group can hold it open).
DRAIN_S = 2.0


@dataclass(frozen=True)
class CheckerRun:
    returncode: int  # negative: killed by that signal (POSIX)
    timed_out: bool
    report: dict | None  # the GoogleTest JSON report; None when the checker did not write one
    output: str  # stdout and stderr together, the middle cut when it was long
    duration_s: float
    # A report was written, but not by the harness: it lacks this run's nonce.
    forged: bool = False
    cut_bytes: int = 0  # how much of the output's middle was left out


def run_checker(exe: Path, cwd: Path, timeout_s: float, extra_args: tuple[str, ...] = ()
                ) -> CheckerRun:
    """Runs `exe`; the environment (GRADER_SEED...) passes on, plus the report channel."""
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="grader-") as scratch:
        report_path = Path(scratch) / "report.json"
        report_fd = os.open(report_path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            environment = {**os.environ, REPORT_VARIABLE: f"{report_fd}:{nonce}"}
            started = time.monotonic()
            try:
                # A session of its own, so that a timeout kills whatever the checker started too.
                process = subprocess.Popen([str(exe), "--gtest_color=no", *extra_args], cwd=cwd,
                                           env=environment, stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           pass_fds=(report_fd,), start_new_session=True)
            except OSError as error:
                raise UserError(f"cannot run {exe}: {error.strerror} (was the build folder "
                                "changed while the grader ran? run it again)") from None
        finally:
            os.close(report_fd)
        returncode, timed_out, output, duration_s = _follow(process, started, timeout_s)
        report, forged = _read_report(report_path, nonce)
        return CheckerRun(returncode=returncode, timed_out=timed_out, report=report,
                          output=output.text(), duration_s=duration_s, forged=forged,
                          cut_bytes=output.cut_bytes)


def run_program(command: list[str], cwd: Path, timeout_s: float,
                listener: Callable[[bytes], None] | None = None) -> CheckerRun:
    """Runs a program that is not a checker (the GPT trainer) as a checker runs: its own process
    group, the timeout, the output bounded; no report (report None). `listener` sees the output
    as it comes (a progress bar)."""
    started = time.monotonic()
    try:
        process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    except OSError as error:
        raise UserError(f"cannot run {command[0]}: {error.strerror}") from None
    returncode, timed_out, output, duration_s = _follow(process, started, timeout_s, listener)
    return CheckerRun(returncode=returncode, timed_out=timed_out, report=None,
                      output=output.text(), duration_s=duration_s, cut_bytes=output.cut_bytes)


def _follow(process: subprocess.Popen, started: float, timeout_s: float,
            listener: Callable[[bytes], None] | None = None
            ) -> tuple[int, bool, "BoundedOutput", float]:
    """Reads the process's output until it exits or the deadline passes, then ends its group:
    the exit status, whether it timed out, the output, the seconds it ran."""
    output = BoundedOutput(listener=listener)
    with process:
        try:
            timed_out = not _read_until_exit(process, output, started + timeout_s)
        finally:
            # Every way out (a timeout, Ctrl-C, SIGTERM) ends the whole group.
            stop_group(process)
        duration_s = time.monotonic() - started
        _drain(process, output)
    return process.returncode, timed_out, output, duration_s


class BoundedOutput:
    """The first and the last KEPT_OUTPUT_BYTES of a stream, and how much was between them."""

    def __init__(self, kept: int = KEPT_OUTPUT_BYTES,
                 listener: Callable[[bytes], None] | None = None):
        self.kept = kept
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.listener = listener

    def add(self, chunk: bytes) -> None:
        if self.listener:
            self.listener(chunk)
        self.total += len(chunk)
        room = self.kept - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        if len(self.tail) > self.kept:
            del self.tail[:len(self.tail) - self.kept]

    @property
    def cut_bytes(self) -> int:
        return self.total - len(self.head) - len(self.tail)

    def text(self) -> str:
        head = self.head.decode(errors="replace")
        tail = self.tail.decode(errors="replace")
        if not self.cut_bytes:
            return head + tail
        return (f"{head}\n[grader: {byte_count(self.cut_bytes)} of output cut here; the first and "
                f"the last {byte_count(self.kept)} are kept]\n{tail}")


def byte_count(count: int) -> str:
    for unit in ("bytes", "KB", "MB"):
        if count < 1024:
            return f"{count} {unit}" if unit == "bytes" else f"{count:.0f} {unit}"
        count /= 1024
    return f"{count:.1f} GB"


def stop_group(process: subprocess.Popen, grace_s: float = 0.0) -> None:
    """Kills the process group led by `process` (started with start_new_session), before the
    leader is reaped, so that its number cannot have been reused. With `grace_s`, the leader is
    asked first (SIGTERM) and given that long to stop what it started itself: ninja runs each
    compiler in a process group of its own, which only ninja knows to stop."""
    if grace_s > 0:
        try:
            process.send_signal(signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + grace_s
        while not has_exited(process.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def _read_until_exit(process: subprocess.Popen, output: BoundedOutput, deadline: float) -> bool:
    """Reads the output until the checker has closed it and exited; False at the deadline. The
    checker is left unreaped (a zombie), so that its process group can still be killed."""
    descriptor = process.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(descriptor, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if selector.select(min(remaining, EXIT_POLL_S)):
                chunk = os.read(descriptor, READ_BYTES)
                if not chunk:
                    break  # every writer closed the pipe: the checker is ending
                output.add(chunk)
            elif has_exited(process.pid):
                return True  # it exited; a process it left behind may still hold the pipe
    while not has_exited(process.pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


def has_exited(pid: int) -> bool:
    """Whether the child `pid` has exited, without reaping it (WNOWAIT)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def _drain(process: subprocess.Popen, output: BoundedOutput) -> None:
    """What the killed group had left in the pipe, then the exit status."""
    descriptor = process.stdout.fileno()
    deadline = time.monotonic() + DRAIN_S
    with selectors.DefaultSelector() as selector:
        selector.register(descriptor, selectors.EVENT_READ)
        while (remaining := deadline - time.monotonic()) > 0 and selector.select(remaining):
            chunk = os.read(descriptor, READ_BYTES)
            if not chunk:
                break
            output.add(chunk)
    process.wait()


def _read_report(path: Path, nonce: str) -> tuple[dict | None, bool]:
    """The report and whether it is forged (valid JSON without this run's nonce)."""
    try:
        report = json.loads(path.read_bytes())
    except (OSError, ValueError):
        # Nothing written, or a checker killed while writing: as good as none.
        return None, False
    if not isinstance(report, dict) or report.get(NONCE_PROPERTY) != nonce:
        return None, True
    return report, False
