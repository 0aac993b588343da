"""The library ban: an exercise may not use what it is measured against (cuBLAS, cuDNN, NCCL,
CUB, Thrust, CUTLASS, the course's baselines).

Linking keeps out the compiled libraries: the learner's executable links neither cuBLAS nor cuDNN
nor the course's baselines (the checker loads those at run time, course/baselines.h). What linking
cannot keep out is header-only code (CUB, Thrust, CUTLASS): the learner's file is refused when
the compiler read such a header while compiling it. That is decided from the compiler's own list
of the files it read (ninja's dependency log, `ninja -t deps`), not from the file's text, so an
include behind a macro (`#define H <cub/cub.cuh>` then `#include H`), or one reached through
another header, counts as well.
"""
import re
import subprocess
from pathlib import PurePosixPath

from grader.build import BuildTree
from grader.manifest import Exercise

# A header under one of these folders (at any depth: the toolkit keeps CUB in include/cccl/cub)...
FORBIDDEN_FOLDERS = ("cub", "thrust", "cutlass", "cute")
# ... or whose name starts with one of these ...
FORBIDDEN_NAME_PREFIXES = ("cublas", "cudnn", "nccl")
# ... or one of the course's own baseline headers.
FORBIDDEN_COURSE_HEADERS = ("course/baselines.h", "course/baseline_table.h")


def forbidden_header(path: str, root: str = "/", allowed: str = "") -> str | None:
    """The header as it would be included (`cub/device/device_reduce.cuh`) when `path`, a file the
    compiler read, is one an exercise may not use; None otherwise. Inside the course (`root`)
    only the part of the path below it counts: a clone in ~/cub/course is not CUB. `allowed` is
    the library the exercise may call (its manifest's `library`): its headers pass."""
    file = PurePosixPath(path)
    parts = file.relative_to(root).parts if file.is_relative_to(root) else file.parts
    for index in reversed(range(len(parts) - 1)):  # the innermost folder: the include's root
        if parts[index] in FORBIDDEN_FOLDERS:
            return "/".join(parts[index:])
    if parts and parts[-1].startswith(FORBIDDEN_NAME_PREFIXES):
        return None if allowed and parts[-1].startswith(allowed) else parts[-1]
    for header in FORBIDDEN_COURSE_HEADERS:
        if path.endswith("/" + header):
            return header
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


def read_headers(tree: BuildTree, target: str) -> list[str]:
    """The files the compiler read for a target's sources in `tree` (after a build)."""
    result = subprocess.run(["ninja", "-C", str(tree.path), "-t", "deps"], capture_output=True,
                            text=True)
    return [path for obj, paths in parse_deps(result.stdout).items()
            if re.match(rf"(?:.*/)?CMakeFiles/{re.escape(target)}\.dir/", obj) for path in paths]


def refused_header(tree: BuildTree, exercise: Exercise, target: str | None = None) -> str | None:
    """The first header an exercise may not use that its source made the compiler read: in its
    checker's target, or in `target` (module 08's trainer builds exercises into libraries of their
    own)."""
    for path in read_headers(tree, target or tree.target(exercise)):
        header = forbidden_header(path, str(tree.course.root), exercise.library)
        if header:
            return header
    return None
