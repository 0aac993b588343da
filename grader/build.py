"""CMake + Ninja: configure a build tree (again when it is not this course's, or broken), build
exactly the requested exercise targets, and tell the machine's problems (one line, exit 2) from
the exercise's (a build error)."""
import os
import re
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from grader.activity import Log, activity
from grader.course import Course
from grader.errors import UserError
from grader.manifest import Exercise
from grader.results import EMULATED, FAST, LEARNER, SOLUTION
from grader.runner import stop_group

TREES = {LEARNER: "build/learner", SOLUTION: "build/solutions", FAST: "build/fast",
         EMULATED: "build/emulated"}
CONFIGURE_LOG = "grader-configure.log"
MAX_ERROR_LINES = 5
# An exercise may not call what it is measured against (CONTRIBUTING.md, "Build layout").
FORBIDDEN_INCLUDE = re.compile(
    r'^[ \t]*#[ \t]*include[ \t]*[<"]([^>"]*(?:cublas|cudnn|(?<![\w-])cub/|thrust/|cutlass/|'
    r'course/baselines\.h)[^>"]*)[>"]', re.M)
# nvcc: `file.cu(12): error: ...`; gcc/clang: `file.cpp:12:5: error: ...`; the linker; ninja.
COMPILER_ERROR = re.compile(r"\(\d+\): (?:catastrophic )?error|:\d+(?::\d+)?: (?:fatal )?error:|"
                            r"undefined reference to|^ninja: error:")
# What cmake/Course.cmake (and CMake itself) say when no CUDA compiler is found; nothing else.
NVCC_MISSING = re.compile(r"No CMAKE_CUDA_COMPILER could be found")
# `CMake Error at CMakeLists.txt:3 (message):` then the message, indented, up to a blank line;
# or `CMake Error: the message` on one line.
CMAKE_ERROR = re.compile(r"^CMake Error(?: at ([^\n]*?):(\d+) \([^)\n]*\))?:[ \t]*(.*)\n"
                         r"((?:[ \t]+\S[^\n]*\n?)*)", re.M)
MAX_MESSAGE_CHARS = 300
# The machine's problems, not the exercise's: ninja cannot read its own files, or a disk refuses
# (in a line that is not a compiler's diagnostic of the exercise's code).
NINJA_FAULTS = ("ninja: fatal", "ninja: error: loading")
DISK_FAULT = re.compile(r"Read-only file system|No space left on device|Disk quota exceeded|"
                        r"Permission denied")
# FetchContent's last words when GoogleTest could not be downloaded (offline).
GTEST_DOWNLOAD_FAILED = "Build step for googletest failed"
# Ninja cannot use the build files CMake wrote: re-running CMake failed, or they are broken.
BROKEN_BUILD_FILES = re.compile(r"^ninja: error: (?:rebuilding 'build\.ninja'|build\.ninja:)", re.M)
# ptxas's advice that it made each wgmma of a function wait for the one before (C7510-C7520, e.g.
# "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized
# due to non wgmma instructions defining accumulator registers of a wgmma between start and end of
# the pipeline stage in the function '...'"): the results stay right, the speed goes, and nothing
# else says so. Ninja prints a compile's output under its "Building ... object X.o" line.
WGMMA_SERIALIZED = re.compile(r"\((C75\d\d)\) Potential Performance Loss: wgmma\.mma_async "
                              r"instructions are serialized due to (.*?)(?: in the function '.*)?$")
NINJA_OBJECT = re.compile(r"^\[\d+/\d+\] Building \S+ object \S*?\.dir/(\S+?)\.o$")
NOT_CONFIGURED = "not configured yet"
UNFINISHED = "its last configure did not finish"
# The compilers a cache names: gone (a toolkit moved or removed), the tree cannot build.
CACHED_COMPILERS = ("CMAKE_CXX_COMPILER", "CMAKE_CUDA_COMPILER", "CMAKE_CUDA_HOST_COMPILER")

# How long ninja (or CMake) may take to stop its compilers after SIGTERM before it is killed.
STOP_GRACE_S = 5.0

_locks: dict[Path, FileLock] = {}


@dataclass(frozen=True)
class BuildTree:
    """One CMake build folder holding one variant of the exercises."""

    course: Course
    variant: str
    path: Path
    defines: tuple[str, ...] = ()

    @classmethod
    def standard(cls, course: Course, variant: str) -> "BuildTree":
        return cls(course, variant, course.root / TREES[variant])

    def target(self, exercise: Exercise) -> str:
        return f"{exercise.module}.{exercise.id}.{self.variant}"

    def executable(self, exercise: Exercise) -> Path:
        return self.path / "bin" / self.target(exercise)

    @property
    def relative(self) -> str:
        try:
            return self.course.relative(self.path)
        except ValueError:  # a tree outside the course
            return str(self.path)


@dataclass(frozen=True)
class BuildFailure:
    errors: list[str]  # the first compiler errors, repo-relative
    output: str


def forbidden_includes(source: str) -> list[str]:
    return FORBIDDEN_INCLUDE.findall(source)


@contextmanager
def tree_lock(tree: BuildTree, log: Log):
    """Holds the build tree for this process: two graders at once never configure or build the
    same tree together. Reentrant (one FileLock per tree, which counts its acquisitions)."""
    folder = tree.path.parent
    _make_folder(folder, tree)
    lock = _locks.setdefault(tree.path, FileLock(folder / f".{tree.path.name}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log(f"waiting for another grader run to finish with {tree.relative}")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def stale_reason(tree: BuildTree) -> str | None:
    """Why `tree` must be configured before it builds; None when it is ready. Any reason but
    NOT_CONFIGURED and UNFINISHED means afresh (`cmake --fresh`: a new cache)."""
    if not (tree.path / "CMakeCache.txt").exists():
        return NOT_CONFIGURED
    cache = read_cache(tree)
    home = cache.get("CMAKE_HOME_DIRECTORY")
    if not home:
        return "its CMakeCache.txt is broken"
    if Path(home).resolve() != tree.course.root.resolve():
        return f"it was configured for the sources in {home}"
    folder = cache.get("CMAKE_CACHEFILE_DIR", "")
    if Path(folder).resolve() != tree.path.resolve():
        return f"it is a copy of the build folder {folder}"
    for name in CACHED_COMPILERS:
        compiler = cache.get(name, "")
        if os.path.isabs(compiler) and not os.access(compiler, os.X_OK):
            return f"its compiler {compiler} ({name}) is gone"
    if not (tree.path / "build.ninja").is_file():
        return UNFINISHED
    return None


def configure(tree: BuildTree, log: Log, fresh: bool = False) -> None:
    """Configures `tree` unless it is ready (ninja re-runs CMake when CMake's inputs change). A
    tree of another folder (a copied or moved clone) or a broken one is configured afresh."""
    with tree_lock(tree, log):
        reason = "its build files could not be regenerated" if fresh else stale_reason(tree)
        if reason is None:
            return
        _make_folder(tree.path, tree)
        fresh = fresh or reason not in (NOT_CONFIGURED, UNFINISHED)
        if fresh:
            log(f"{tree.relative}: {reason}: configuring it afresh")
        if _run_cmake(tree, log, fresh) == 0:
            return
        if reason == UNFINISHED and not fresh and _run_cmake(tree, log, fresh=True) == 0:
            return  # a cache that CMake could not use
        raise UserError(configure_error(tree))


def configure_error(tree: BuildTree) -> str:
    """One line: what CMake said went wrong, and where its full log is."""
    log_path = f"{tree.relative}/{CONFIGURE_LOG}"
    text = (tree.path / CONFIGURE_LOG).read_text(encoding="utf-8", errors="replace")
    if NVCC_MISSING.search(text):
        return ("nvcc (the CUDA compiler) was not found: install the CUDA toolkit, or set CUDACXX "
                f"to nvcc, or add the toolkit's bin folder to PATH (the full log: {log_path})")
    if GTEST_DOWNLOAD_FAILED in text:
        return ("GoogleTest is not installed and could not be downloaded: install it (Debian and "
                "Ubuntu: apt install googletest) or set COURSE_GTEST_SOURCE_DIR to its sources "
                f"(the full log: {log_path})")
    match = CMAKE_ERROR.search(text)
    if not match:
        return f"cmake could not configure {tree.relative}: see {log_path}"
    message = " ".join(" ".join([match[3], match[4]]).split())
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS - 3] + "..."
    where = f"{tree.course.strip_root(match[1])}:{match[2]}; " if match[1] else ""
    return (f"cmake could not configure {tree.relative}: {tree.course.strip_root(message)} "
            f"({where}the full log: {log_path})")


def read_cache(tree: BuildTree) -> dict[str, str]:
    """The entries of the tree's CMakeCache.txt, {name: value}; empty when there is none."""
    try:
        text = (tree.path / "CMakeCache.txt").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    return dict(re.findall(r"^([^#/\s][^:=\n]*):[A-Z]+=(.*)$", text, re.M))


def emulated_modules(tree: BuildTree) -> set[str] | None:
    """The modules a configured emulated tree builds (COURSE_EMULATED_MODULES, dev/emu); None
    when the course sets no such list (then every module is built)."""
    found = read_cache(tree).get("COURSE_EMULATED_MODULES")
    return set(found.split(";")) if found is not None else None


def not_emulated(tree: BuildTree, exercises: list[Exercise]) -> list[Exercise]:
    """The exercises a configured emulated tree has no target for."""
    modules = emulated_modules(tree)
    return [exercise for exercise in exercises
            if modules is not None and exercise.module not in modules]


def cuda_architecture_note(tree: BuildTree, gpu_sm: int | None) -> str | None:
    """A note when the tree's device code is not built for the GPU at hand (CUDAARCHS, or a
    configure where no GPU was visible): it then runs JIT-compiled from PTX, on the paths of the
    older architecture."""
    architectures = [entry for entry in read_cache(tree).get("CMAKE_CUDA_ARCHITECTURES", "")
                     .split(";") if entry]
    if gpu_sm is None or not architectures or {"native", "all", "all-major"} & set(architectures):
        return None
    # 90, 90-real, 90a (the arch-specific features of sm_90): machine code for an sm_90 GPU.
    real = {entry.split("-")[0].rstrip("af") for entry in architectures
            if not entry.endswith("-virtual")}
    if str(gpu_sm) in real:
        return None
    built = ", ".join(f"compute_{entry.split('-')[0]} (PTX only)" if entry.endswith("-virtual")
                      else f"sm_{entry.split('-')[0]}" for entry in architectures)
    return (f"note: {tree.relative} is built for {built} and this GPU is sm_{gpu_sm}: its code "
            f"runs JIT-compiled from PTX, on the older architecture's paths; to build for this "
            f"GPU: cmake {tree.relative} -DCMAKE_CUDA_ARCHITECTURES={gpu_sm}")


def build(tree: BuildTree, targets: list[str], log: Log) -> dict[str, BuildFailure]:
    """Builds `targets` in one ninja run, its latest line shown as the step of one activity (a
    first build is dozens of lines, a reconfigure CMake's own); returns the ones that failed,
    with their errors."""
    if not targets:
        return {}
    with tree_lock(tree, log):
        command = ["ninja", "-C", str(tree.path), "-k", "0", *targets]
        title = f"building {_count(len(targets), 'target')} in {tree.relative}"
        with activity(log, title) as step:
            returncode, output = _run_streamed(command, step)
        if returncode != 0 and BROKEN_BUILD_FILES.search(output):
            configure(tree, log, fresh=True)
            with activity(log, title) as step:
                returncode, output = _run_streamed(command, step)
        for note in serialized_wgmma_notes(output):
            log(note)
        if returncode == 0:
            return {}
        _raise_environment_fault(tree, output)
        # Each target alone: exactly its own errors, and fast, since the others are now up to date.
        failures = {}
        with activity(log, "collecting the errors of the targets that did not build") as step:
            for target in targets:
                step(target)
                returncode, output = _run_streamed(["ninja", "-C", str(tree.path), target])
                if returncode != 0:
                    output = tree.course.strip_root(output)
                    _raise_environment_fault(tree, output)
                    failures[target] = BuildFailure(compiler_errors(output), output)
        return failures


def serialized_wgmma_notes(output: str) -> list[str]:
    """One note per source file and reason where ptxas serialized the wgmma of a function."""
    notes, source = [], "a compiled file"
    for line in output.splitlines():
        if built := NINJA_OBJECT.match(line.strip()):
            source = built.group(1)
        elif found := WGMMA_SERIALIZED.search(line):
            code, reason = found.groups()
            reason = " ".join(reason.split())  # ptxas doubles a space or two
            if "register resources" in reason:
                advice = "fewer accumulators a thread, or more registers for the warpgroups "\
                         "that issue them (setmaxnreg)"
            elif "call" in reason:  # a function boundary at a call, an extern call
                advice = "call nothing that is not inlined between a wgmma's issue and its wait"
            else:
                advice = "touch no accumulator of a wgmma, nor any register it reads, between "\
                         "its issue and the wgmma.wait_group that covers it"
            note = (f"note: ptxas serialized the wgmma of {source} ({code}: {reason}): each "
                    f"waits for the one before, so the results are right and the tensor cores "
                    f"mostly idle. The fix: {advice}")
            if note not in notes:
                notes.append(note)
    return notes


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def compiler_errors(output: str, limit: int = MAX_ERROR_LINES) -> list[str]:
    errors = [line.strip() for line in output.splitlines() if COMPILER_ERROR.search(line)]
    if errors:
        return errors[:limit]
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return lines[-limit:]  # no recognisable error line: the end of the log says most


def environment_fault(output: str) -> str | None:
    """The first line of a build's output that is the machine's problem, not a compiler error."""
    for line in output.splitlines():
        if line.startswith(NINJA_FAULTS) or (DISK_FAULT.search(line)
                                             and not COMPILER_ERROR.search(line)):
            return line.strip()
    return None


def _raise_environment_fault(tree: BuildTree, output: str) -> None:
    fault = environment_fault(output)
    if fault:
        raise UserError(f"{tree.relative} cannot be built on this machine: "
                        f"{tree.course.strip_root(fault)}")


def _make_folder(folder: Path, tree: BuildTree) -> None:
    """`folder` exists and this process can write in it, else the one line that says why."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        where = tree.course.strip_root(f"{folder}")
        raise UserError(f"cannot write in {where}: {error.strerror} (the grader builds there; "
                        "make it writable, or remove it)") from None


def _run_cmake(tree: BuildTree, log: Log, fresh: bool) -> int:
    """Runs CMake on `tree`, its output in the configure log; shows its progress."""
    command = ["cmake", "-S", str(tree.course.root), "-B", str(tree.path), "-G", "Ninja",
               "-DCMAKE_BUILD_TYPE=Release", f"-DCOURSE_VARIANTS={tree.variant}", *tree.defines]
    if fresh:
        command.insert(1, "--fresh")
    title = f"configuring {tree.relative} (once; CMake takes 10-30 s)"
    with activity(log, title) as step, \
            open(tree.path / CONFIGURE_LOG, "w", encoding="utf-8") as log_file, \
            _started(command) as process:
        for line in process.stdout:
            log_file.write(line)
            if line.strip():
                step(line.strip())
        return process.wait()


def _run_streamed(command: list[str], log: Log | None = None) -> tuple[int, str]:
    """Runs `command`, each line of its output through `log` if given; the status and the
    output."""
    lines = []
    with _started(command) as process:
        for line in process.stdout:
            lines.append(line)
            if log is not None:
                log(line.rstrip("\n"))
        return process.wait(), "".join(lines)


@contextmanager
def _started(command: list[str]):
    """`command` running in a process group of its own, stopped on every way out (Ctrl-C,
    SIGTERM, an exception): asked first, so that ninja stops the compilers it started (each in
    a process group of its own), then killed with whatever is left of its group."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", stdin=subprocess.DEVNULL,
                          start_new_session=True) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                stop_group(process, grace_s=STOP_GRACE_S)
