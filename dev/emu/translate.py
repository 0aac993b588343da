"""CUDA C++ source -> C++ for the CPU emulator (emu.h): kernel launches and shared declarations.

  kernel<<<grid, block[, bytes]>>>(args)   ->  ::emu::launch(kernel, grid, block[, bytes])(args)
  __shared__ T a[N], b;                    ->  auto& a = ::emu::shared<T[N], id>(); auto& b = ...
  extern __shared__ T name[];              ->  T* name = (T*)::emu::dynamic_shared();

With --sequential, launches run each thread to its end in turn (::emu::launch_sequential): for
kernels without barriers or shuffles, such as the harness's fill kernels, which run on large
buffers. A line directive keeps compiler messages pointing at the original file.

Usage: python3 translate.py [--sequential] FILE.cu OUT.cpp
"""
import argparse
import itertools
import re

DYNAMIC = re.compile(r"extern __shared__\s+(?:__align__\(\d+\)\s+)?([\w:<>]+(?:\s+[\w:<>]+)*?)\s+"
                     r"(\w+)\[\];")
DECLARATOR = r"\w+\s*(?:\[[^\]]*\])*"
STATIC = re.compile(rf"__shared__\s+([\w:<>\s]+?)\s+({DECLARATOR}(?:\s*,\s*{DECLARATOR})*)\s*;")
NAME_AND_DIMENSIONS = re.compile(r"(\w+)\s*((?:\[[^\]]*\])*)")
LAUNCH = re.compile(r"([\w:]+(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>", re.S)


def translate(source: str, launcher: str = "launch") -> str:
    ids = itertools.count()
    source = DYNAMIC.sub(lambda m: f"{m[1]}* {m[2]} = "
                                   f"reinterpret_cast<{m[1]}*>(::emu::dynamic_shared());", source)

    def shared(match: re.Match) -> str:  # one reference per declarator: float a[32], b[32];
        return " ".join(f"auto& {name} = ::emu::shared<{match[1]}{dimensions}, {next(ids)}>();"
                        for name, dimensions in NAME_AND_DIMENSIONS.findall(match[2]))

    source = STATIC.sub(shared, source)
    return LAUNCH.sub(lambda m: f"::emu::{launcher}({m[1]}, {m[2]})", source)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequential", action="store_true",
                        help="run each thread to its end in turn (kernels without barriers)")
    parser.add_argument("source", help="the .cu file")
    parser.add_argument("output", help="the .cpp file to write")
    args = parser.parse_args()
    with open(args.source, encoding="utf-8") as f:
        text = translate(f.read(), "launch_sequential" if args.sequential else "launch")
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(f'#include "emu.h"\n#line 1 "{args.source}"\n{text}')


if __name__ == "__main__":
    main()
