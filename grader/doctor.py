"""`grader doctor`: is this machine ready for the course? Each problem comes with its fix.

Every check reads the machine through a `Probe` (which programs exist, what they print, a few
files, the Python packages), so that the checks themselves are tested with made-up answers.
"""
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

OK, WARNING, PROBLEM = "ok", "warning", "problem"
MIN_CMAKE = (3, 25)  # CMakePresets.json version 6 and `cmake --workflow`
MIN_SM = 75  # CUDA 13 builds for Turing (T4) and newer; so does the course
REQUIRED_PACKAGES = ("click", "jinja2", "rich")
# Optional packages and what they are for (pyproject.toml's optional groups).
OPTIONAL_PACKAGES = {"watchfiles": ("grader watch", "watch"),
                     "matplotlib": ("the pictures of grader report", "plot"),
                     "pytest": ("the grader's own tests", "test")}
PROFILING_PARAMS = Path("/proc/driver/nvidia/params")
TREES = ("build/learner", "build/solutions")


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, WARNING or PROBLEM
    detail: str
    fix: str = ""


class Probe:
    """The machine as the checks see it."""

    def which(self, program: str) -> str | None:
        return shutil.which(program)

    def output(self, command: list[str]) -> str | None:
        """stdout and stderr of `command`, or None when it cannot run or fails."""
        try:
            run = subprocess.run(command, capture_output=True, text=True, errors="replace",
                                 timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return run.stdout + run.stderr if run.returncode == 0 else None

    def read(self, path: Path) -> str | None:
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

    def package_version(self, name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    def is_root(self) -> bool:
        return hasattr(os, "geteuid") and os.geteuid() == 0

    def python_version(self) -> tuple[int, int]:
        return sys.version_info[:2]


def version_of(text: str | None, pattern: str = r"(\d+)\.(\d+)") -> tuple[int, ...] | None:
    match = re.search(pattern, text or "")
    return tuple(int(part) for part in match.groups()) if match else None


def parse_gpus(text: str | None) -> list[dict[str, str]]:
    """`nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`."""
    gpus = []
    for line in (text or "").splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3:
            gpus.append(dict(zip(("name", "compute_cap", "driver"), parts)))
    return gpus


def check_python(probe: Probe) -> list[Check]:
    major, minor = probe.python_version()
    checks = [Check("Python", OK if (major, minor) >= (3, 10) else PROBLEM, f"{major}.{minor}",
                    "install Python 3.10 or newer")]
    for name in REQUIRED_PACKAGES:
        version = probe.package_version(name)
        checks.append(Check(f"Python package {name}", OK if version else PROBLEM,
                            version or "missing", "python3 -m pip install -e .  (in the course)"))
    for name, (purpose, group) in OPTIONAL_PACKAGES.items():
        version = probe.package_version(name)
        checks.append(Check(f"Python package {name}", OK if version else WARNING,
                            version or f"missing (needed for {purpose})",
                            f"python3 -m pip install -e '.[{group}]'"))
    return checks


def check_build_tools(probe: Probe) -> list[Check]:
    checks = []
    cmake = version_of(probe.output(["cmake", "--version"]))
    if cmake is None:
        checks.append(Check("CMake", PROBLEM, "not found", "python3 -m pip install cmake  (or "
                            "your package manager)"))
    else:
        good = cmake >= MIN_CMAKE
        checks.append(Check("CMake", OK if good else PROBLEM, ".".join(map(str, cmake)),
                            "" if good else f"CMake {MIN_CMAKE[0]}.{MIN_CMAKE[1]} or newer: "
                            "python3 -m pip install --upgrade cmake"))
    ninja = probe.output(["ninja", "--version"])
    checks.append(Check("Ninja", OK if ninja else PROBLEM, (ninja or "not found").strip(),
                        "python3 -m pip install ninja  (or: apt install ninja-build)"))
    compiler = probe.output(["c++", "--version"])
    checks.append(Check("C++ compiler", OK if compiler else PROBLEM,
                        (compiler or "c++ not found").splitlines()[0].strip(),
                        "install g++ (apt install g++) or clang"))
    return checks


def check_cuda(probe: Probe, root: Path | None) -> list[Check]:
    """Toolkit, driver, GPU, the build trees' architecture, and whether they fit together."""
    checks = []
    nvcc_text = probe.output(["nvcc", "--version"])
    toolkit = version_of(nvcc_text, r"release (\d+)\.(\d+)")
    checks.append(Check("CUDA toolkit (nvcc)", OK if toolkit else PROBLEM,
                        f"{toolkit[0]}.{toolkit[1]}" if toolkit else "nvcc not found",
                        "install the CUDA toolkit 12.x or 13.x and put its bin folder on PATH "
                        "(export PATH=/usr/local/cuda/bin:$PATH)"))
    smi = probe.output(["nvidia-smi"])
    gpus = parse_gpus(probe.output(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
                                    "--format=csv,noheader"]))
    if not smi or not gpus:
        checks.append(Check("GPU", WARNING, "no NVIDIA GPU visible (nvidia-smi)",
                            "without a GPU everything builds and the checkers report skipped; "
                            "for a free one, open notebooks/free_gpu.ipynb in Colab or Kaggle"))
        return checks
    driver_cuda = version_of(smi, r"CUDA Version: (\d+)\.(\d+)")
    gpu = gpus[0]
    checks.append(Check("NVIDIA driver", OK, f"{gpu['driver']} (supports CUDA "
                        f"{'.'.join(map(str, driver_cuda)) if driver_cuda else '?'})"))
    if toolkit and driver_cuda:
        checks.append(_driver_toolkit_match(driver_cuda, toolkit))
    sm = _sm(gpu["compute_cap"])
    good = sm is not None and sm >= MIN_SM
    checks.append(Check("GPU", OK if good else PROBLEM,
                        f"{gpu['name']}, compute capability {gpu['compute_cap']}"
                        + (f" (+{len(gpus) - 1} more; the course uses the first)"
                           if len(gpus) > 1 else ""),
                        "" if good else "the course needs compute capability 7.5 or newer "
                        "(T4, RTX 20xx and later)"))
    if root is not None and sm is not None:
        checks += [_tree_architecture(probe, root, tree, sm) for tree in TREES]
    return [check for check in checks if check is not None]


def _driver_toolkit_match(driver: tuple[int, ...], toolkit: tuple[int, ...]) -> Check:
    name, detail = "driver and toolkit", (f"driver supports CUDA {driver[0]}.{driver[1]}, "
                                          f"toolkit is {toolkit[0]}.{toolkit[1]}")
    if driver[0] < toolkit[0]:
        return Check(name, PROBLEM, detail, f"the driver is too old for CUDA {toolkit[0]}: "
                     "update the NVIDIA driver, or install a toolkit of the driver's CUDA "
                     f"version ({driver[0]}.x)")
    if driver < toolkit:
        return Check(name, WARNING, detail, "runs (CUDA's minor-version compatibility) as long "
                     "as the code is compiled for your GPU, which the course does; updating the "
                     "driver removes the doubt")
    return Check(name, OK, detail)


def _tree_architecture(probe: Probe, root: Path, tree: str, sm: int) -> Check | None:
    cache = probe.read(root / tree / "CMakeCache.txt")
    if cache is None:
        return None
    match = re.search(r"^CMAKE_CUDA_ARCHITECTURES:\w+=(.*)$", cache, re.M)
    archs = match[1].strip() if match else ""
    if re.fullmatch(rf"{sm}(-real)?", archs):
        return Check(f"{tree} architecture", OK, f"sm_{sm}, this GPU's")
    return Check(f"{tree} architecture", WARNING, f"built for {archs or '?'}, the GPU is sm_{sm}",
                 f"rm -rf {tree}  (the next `grader run` configures it for this GPU)")


def check_profilers(probe: Probe) -> list[Check]:
    checks = []
    ncu = probe.output(["ncu", "--version"])
    checks.append(Check("Nsight Compute (ncu)", OK if ncu else WARNING,
                        _last_line(ncu) if ncu else "not found (needed by grader profile)",
                        "it comes with the CUDA toolkit: add its bin folder to PATH"))
    if ncu:
        checks.append(_counter_permission(probe))
    sanitizer = probe.output(["compute-sanitizer", "--version"])
    checks.append(Check("compute-sanitizer", OK if sanitizer else WARNING,
                        _last_line(sanitizer) if sanitizer
                        else "not found (needed by grader sanitize)",
                        "it comes with the CUDA toolkit: add its bin folder to PATH"))
    return checks


def _counter_permission(probe: Probe) -> Check:
    name = "GPU performance counters"
    if probe.is_root():
        return Check(name, OK, "running as root: ncu may read them")
    params = probe.read(PROFILING_PARAMS)
    if params is None:
        return Check(name, WARNING, "cannot tell here (no /proc/driver/nvidia/params)",
                     "`grader profile` says how to allow them if ncu reports ERR_NVGPUCTRPERM")
    restricted = re.search(r"RmProfilingAdminOnly:\s*1", params)
    if not restricted:
        return Check(name, OK, "open to every user")
    return Check(name, PROBLEM, "reserved for administrators: ncu will fail with "
                 "ERR_NVGPUCTRPERM", "sudo grader profile ...  or, once: echo 'options nvidia "
                 "NVreg_RestrictProfilingToAdminUsers=0' | sudo tee "
                 "/etc/modprobe.d/nvidia-profiling.conf, then reboot")


def run_checks(probe: Probe, root: Path | None) -> list[Check]:
    return (check_python(probe) + check_build_tools(probe) + check_cuda(probe, root)
            + check_profilers(probe))


def _sm(compute_cap: str) -> int | None:
    version = version_of(compute_cap)
    return None if version is None else version[0] * 10 + version[1]


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
