"""The programs the grader needs from the machine."""
import shutil
import subprocess

from grader.errors import UserError

BUILD_TOOLS = ("cmake", "ninja")


def require_build_tools() -> None:
    missing = [tool for tool in BUILD_TOOLS if shutil.which(tool) is None]
    if missing:
        names = " and ".join(missing)
        raise UserError(f"{names} not found on PATH: install {names} (your package manager, or "
                        f"`python3 -m pip install {' '.join(missing)}`) and try again")


def gpu_visible() -> bool:
    """Whether nvidia-smi runs and succeeds; without it every checker skips, by design."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        return subprocess.run([smi, "-L"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def require_toolkit_program(program: str, name: str) -> str:
    """The path of a CUDA toolkit program (ncu, compute-sanitizer), or one line saying where it is."""
    path = shutil.which(program)
    if path is None:
        raise UserError(f"{name} not found on PATH: it comes with the CUDA toolkit (add the "
                        "toolkit's bin folder, e.g. /usr/local/cuda/bin, to PATH); `grader doctor` "
                        "checks it")
    return path
