"""CUDA C++ source -> C++ for the CPU emulator (emu.h): kernel launches and shared declarations.

  kernel<<<grid, block[, bytes[, stream]]>>>(args)  ->  ::emu::launch(kernel, grid, block[, bytes[, stream]])(args)
  __shared__ T a[N], b;                    ->  auto& a = ::emu::shared<T[N], id>(); auto& b = ...
  __shared__ alignas(16) T a[N];           ->  auto& a = ::emu::shared<T[N], id, 16>();
  extern __shared__ T name[];              ->  T* name = (T*)::emu::dynamic_shared();

With --sequential, launches run each thread to its end in turn (::emu::launch_sequential): for
kernels without barriers or shuffles, such as the harness's fill kernels, which run on large
buffers. A `#include "other.cu"` (a fast reference includes its readable solution) is replaced by
that file, translated the same way. Line directives keep compiler messages pointing at the
original files.

Usage: python3 translate.py [--sequential] FILE.cu OUT.cpp
"""
import argparse
import itertools
import re
from pathlib import Path

DYNAMIC = re.compile(r"extern __shared__\s+(?:__align__\(\d+\)\s+)?([\w:<>]+(?:\s+[\w:<>]+)*?)\s+"
                     r"(\w+)\[\];")
DECLARATOR = r"\w+\s*(?:\[[^\]]*\])*"
ALIGNMENT = r"(?:(?:alignas|__align__)\((\d+)\)\s+)?"
STATIC = re.compile(rf"__shared__\s+{ALIGNMENT}([\w:<>\s]+?)\s+"
                    rf"({DECLARATOR}(?:\s*,\s*{DECLARATOR})*)\s*;")
NAME_AND_DIMENSIONS = re.compile(r"(\w+)\s*((?:\[[^\]]*\])*)")
LAUNCH = re.compile(r"([\w:]+(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>", re.S)
INCLUDED_SOURCE = re.compile(r'^#include "([^"]+\.cu)"$', re.M)


def with_included_sources(source: str, path: Path) -> str:
    """`source` (the text of `path`) with each `#include "x.cu"` replaced by that file's text."""
    def inline(match: re.Match) -> str:
        included = path.parent / match[1]
        resumes = source.count("\n", 0, match.end()) + 2  # the line after the include
        text = with_included_sources(included.read_text(encoding="utf-8"), included)
        return f'#line 1 "{included}"\n{text}\n#line {resumes} "{path}"'

    return INCLUDED_SOURCE.sub(inline, source)


def translate(source: str, launcher: str = "launch") -> str:
    ids = itertools.count()
    source = DYNAMIC.sub(lambda m: f"{m[1]}* {m[2]} = "
                                   f"reinterpret_cast<{m[1]}*>(::emu::dynamic_shared());", source)

    def shared(match: re.Match) -> str:  # one reference per declarator: float a[32], b[32];
        alignment = f", {match[1]}" if match[1] else ""
        return " ".join(f"auto& {name} = ::emu::shared<{match[2]}{dimensions}, {next(ids)}"
                        f"{alignment}>();"
                        for name, dimensions in NAME_AND_DIMENSIONS.findall(match[3]))

    source = STATIC.sub(shared, source)
    return LAUNCH.sub(lambda m: f"::emu::{launcher}({m[1]}, {m[2]})", source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", action="store_true",
                        help="run each thread to its end in turn (kernels without barriers)")
    parser.add_argument("source", help="the .cu file")
    parser.add_argument("output", help="the .cpp file to write")
    args = parser.parse_args()
    source = Path(args.source)
    text = translate(with_included_sources(source.read_text(encoding="utf-8"), source),
                     "launch_sequential" if args.sequential else "launch")
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(f'#include "emu.h"\n#line 1 "{args.source}"\n{text}')


if __name__ == "__main__":
    main()
