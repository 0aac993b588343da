"""The programs the grader needs from the machine."""
import functools
import os
import re
import shutil
import subprocess

from grader.errors import UserError

BUILD_TOOLS = ("cmake", "ninja")
# CMakePresets.json version 6 and `cmake --workflow` (the test command) need 3.25.
MIN_CMAKE = (3, 25)


def require_build_tools() -> None:
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    if missing:
        names = " and ".join(missing)
        raise UserError(f"{names} not found on PATH: install {names} (your package manager, or "
                        f"`python3 -m pip install {' '.join(missing)}`) and try again")
    version = cmake_version()
    if version is not None and version < MIN_CMAKE:
        found, needed = ".".join(map(str, version)), ".".join(map(str, MIN_CMAKE))
        raise UserError(f"cmake {found} is too old: the course needs CMake {needed} or newer "
                        "(`python3 -m pip install cmake` installs a recent one)")


@functools.cache
def cmake_version() -> tuple[int, int] | None:
    try:
        output = subprocess.run(["cmake", "--version"], capture_output=True, text=True,
                                timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"cmake version (\d+)\.(\d+)", output)
    return (int(found[1]), int(found[2])) if found else None


def gpu_visible() -> bool:
    """Whether nvidia-smi runs and succeeds; without it every checker skips, by design."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def gpu_count() -> int:
    """How many GPUs this machine's checkers see: nvidia-smi's list, narrowed by
    CUDA_VISIBLE_DEVICES where it is set; 0 without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    count = sum(line.startswith("GPU ") for line in listed.stdout.splitlines())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([device for device in visible.split(",") if device.strip()]))
    return count if listed.returncode == 0 else 0


def require_toolkit_program(program: str, name: str) -> str:
    """The path of a CUDA toolkit program (ncu, compute-sanitizer), or one line saying where it is."""
    path = shutil.which(program)
    if path is None:
        raise UserError(f"{name} not found on PATH: it comes with the CUDA toolkit (add the "
                        "toolkit's bin folder, e.g. /usr/local/cuda/bin, to PATH); `grader doctor` "
                        "checks it")
    return path


def gpu_sm() -> int | None:
    """The compute capability of the first GPU (major*10+minor, 90 for an H100), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        output = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.match(r"\s*(\d+)\.(\d+)", output)
    return int(found[1]) * 10 + int(found[2]) if found else None
