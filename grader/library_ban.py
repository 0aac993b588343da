"""The library ban: an exercise may not use what it is measured against (cuBLAS, cuDNN, NCCL,
CUB, Thrust, CUTLASS, the course's baselines), nor load a library at run time.

Linking keeps out the compiled libraries: the learner's executable links neither cuBLAS nor cuDNN
nor the course's baselines (the checker loads those at run time, course/baselines.h). What linking
cannot keep out is header-only code (CUB, Thrust, CUTLASS), and code that finds a library itself
at run time (`dlopen` and `dlsym`, the driver's entry points). Both show in what the compiler did
with the learner's file:
- the headers it read, from the compiler's own list (ninja's dependency log, `ninja -t deps`),
  not from the file's text, so an include behind a macro (`#define H <cub/cub.cuh>` then
  `#include H`), or one reached through another header, counts as well;
- the functions its object file calls and does not define (`nm -u`): `dlopen`, `dlsym`,
  `cudaGetDriverEntryPoint`, or a library's own functions, which the link would refuse with a
  less clear "undefined reference".
Both are read after the build, whether or not the executable linked, so a file that includes
<cublas_v2.h> and calls cublasSgemm is told that, not that a symbol is undefined.

One table (BANS), one row per library: an exercise that may use one (module 11's
data_parallel_step and NCCL) is exempted by the row's key.
"""
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from grader.build import BuildTree
from grader.manifest import Exercise

MEASURED_AGAINST = "an exercise may not call the library it is measured against"


@dataclass(frozen=True)
class Ban:
    key: str  # what an exemption names
    library: str  # how a message names it
    folders: tuple[str, ...] = ()  # a header under one of these folders, at any depth
    header_prefixes: tuple[str, ...] = ()  # a header whose file name starts so
    course_headers: tuple[str, ...] = ()  # a header of the course, by its include path
    symbols: tuple[str, ...] = ()  # a function called, by its name (demangled) or its start
    why: str = MEASURED_AGAINST


BANS = (
    Ban("cublas", "cuBLAS", header_prefixes=("cublas",), symbols=("cublas",)),
    Ban("cudnn", "cuDNN", header_prefixes=("cudnn",), symbols=("cudnn",)),
    Ban("nccl", "NCCL", header_prefixes=("nccl",), symbols=("nccl", "pnccl")),
    # The toolkit keeps CUB in include/cccl/cub: the innermost such folder is the include's root.
    Ban("cub", "CUB", folders=("cub",)),
    Ban("thrust", "Thrust", folders=("thrust",)),
    Ban("cutlass", "CUTLASS", folders=("cutlass", "cute")),
    Ban("baselines", "the course's baselines",
        course_headers=("course/baselines.h", "course/baseline_table.h"),
        symbols=("course::baseline::",)),
    Ban("run_time_loading", "a library loaded at run time",
        symbols=("dlopen", "dlmopen", "dlsym", "dlvsym", "dl_iterate_phdr", "__libc_dlopen",
                 "__libc_dlsym", "cudaGetDriverEntryPoint", "cuGetProcAddress"),
        why="an exercise may not load a library at run time (nor reach the driver's entry "
            "points): the library it is measured against would be one call away"),
)


def _bans(allowed: frozenset[str]) -> tuple[Ban, ...]:
    return tuple(ban for ban in BANS if ban.key not in allowed)


def forbidden_header(path: str, root: str = "/", allowed: frozenset[str] = frozenset()
                     ) -> tuple[str, Ban] | None:
    """The header as it would be included (`cub/device/device_reduce.cuh`) and its ban, when
    `path`, a file the compiler read, is one an exercise may not use; None otherwise. Inside the
    course (`root`) only the part of the path below it counts: a clone in ~/cub/course is not
    CUB."""
    file = PurePosixPath(path)
    parts = file.relative_to(root).parts if file.is_relative_to(root) else file.parts
    bans = _bans(allowed)
    for index in reversed(range(len(parts) - 1)):  # the innermost folder: the include's root
        for ban in bans:
            if parts[index] in ban.folders:
                return "/".join(parts[index:]), ban
    for ban in bans:
        if parts and parts[-1].startswith(ban.header_prefixes):
            return parts[-1], ban
        for header in ban.course_headers:
            if path.endswith("/" + header):
                return header, ban
    return None


def forbidden_symbol(name: str, allowed: frozenset[str] = frozenset()) -> Ban | None:
    """The ban of a function an object calls (`nm -u`, demangled), or None."""
    for ban in _bans(allowed):
        if any(name == symbol or name.startswith(symbol) for symbol in ban.symbols):
            return ban
    return None


def parse_deps(text: str) -> dict[str, list[str]]:
    """`ninja -t deps` output: each object file with the files read to compile it, in order."""
    deps: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line[0].isspace() and ": #deps" in line:
            current = line.split(": #deps", 1)[0]
            deps[current] = []
        elif line.strip() and current is not None:
            deps[current].append(line.strip())
    return deps


def parse_undefined(text: str) -> list[str]:
    """`nm -u -C` output: the names an object calls and does not define."""
    names = []
    for line in text.splitlines():
        kind, _, name = line.strip().partition(" ")
        if kind in ("U", "w") and name:
            names.append(name.strip())
    return names


def _learner_objects(tree: BuildTree, exercise: Exercise, target: str) -> dict[str, list[str]]:
    """The learner's object files of `target` in `tree` compiled from the current source (a failed
    compile leaves the dependency log and the object of an earlier one), with the files each
    read."""
    result = subprocess.run(["ninja", "-C", str(tree.path), "-t", "deps"], capture_output=True,
                            text=True)
    source = tree.course.stub(exercise)
    objects = {}
    for obj, paths in parse_deps(result.stdout).items():
        path = tree.path / obj
        if not (re.match(rf"(?:.*/)?CMakeFiles/{re.escape(target)}\.dir/", obj) and path.is_file()):
            continue
        if not source.is_file() or path.stat().st_mtime >= source.stat().st_mtime:
            objects[obj] = paths
    return objects


def refusal(tree: BuildTree, exercise: Exercise, target: str | None = None) -> str | None:
    """The line that refuses the learner's file, or None: the first header it may not use that
    the compiler read for it, else the first function it may not call that its object calls; in
    its checker's target, or in `target` (module 08's trainer builds exercises into libraries of
    their own). The exercise's own library (its manifest's `library`, a key of BANS) passes."""
    allowed = frozenset({exercise.library}) if exercise.library else frozenset()
    stub = tree.course.relative(tree.course.stub(exercise))
    objects = _learner_objects(tree, exercise, target or tree.target(exercise))
    return objects_refusal(stub, tree.path, objects, str(tree.course.root), allowed)


def objects_refusal(shown: str, build_dir: Path, objects: dict[str, list[str]], root: str,
                    allowed: frozenset[str] = frozenset()) -> str | None:
    """refusal()'s line for the learner's file `shown` from its objects (paths relative to
    `build_dir`, each with the files the compiler read for it), or None. Module 08's torch_ops
    calls it on the objects of PyTorch's extension build (course_torch/extension.py)."""
    for paths in objects.values():
        for path in paths:
            found = forbidden_header(path, root, allowed)
            if found:
                header, ban = found
                return f"refused: {shown} includes <{header}>; {ban.why}"
    nm = shutil.which("nm")
    for obj in objects if nm else ():
        listed = subprocess.run([nm, "-u", "-C", str(build_dir / obj)], capture_output=True,
                                text=True)
        for name in parse_undefined(listed.stdout):
            ban = forbidden_symbol(name, allowed)
            if ban:
                return f"refused: {shown} calls {_short(name)} ({ban.library}); {ban.why}"
    return None


def _short(name: str) -> str:
    """A demangled name without its parameter list: `course::baseline::cublas_sgemm`."""
    return name.split("(", 1)[0]

