"""CUDA C++ source -> C++ for the CPU emulator (emu.h): kernel launches and shared declarations.

  kernel<<<grid, block[, bytes]>>>(args)   ->  ::emu::launch(kernel, grid, block[, bytes])(args)
  __shared__ T name[N];                    ->  auto& name = ::emu::shared<T[N], id>();
  extern __shared__ T name[];              ->  T* name = (T*)::emu::dynamic_shared();

Usage: python3 translate.py FILE.cu > FILE.cpp
"""
import itertools
import re
import sys

DYNAMIC = re.compile(r"extern __shared__\s+(?:__align__\(\d+\)\s+)?([\w:<>]+(?:\s+[\w:<>]+)*?)\s+(\w+)\[\];")
STATIC = re.compile(r"__shared__\s+([^;]+?)\s+(\w+)\s*((?:\[[^\]]*\])*)\s*;")
LAUNCH = re.compile(r"([\w:]+(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>", re.S)


def translate(source: str) -> str:
    ids = itertools.count()
    source = DYNAMIC.sub(lambda m: f"{m[1]}* {m[2]} = reinterpret_cast<{m[1]}*>(::emu::dynamic_shared());",
                         source)
    source = STATIC.sub(lambda m: f"auto& {m[2]} = ::emu::shared<{m[1]}{m[3]}, {next(ids)}>();", source)
    return LAUNCH.sub(lambda m: f"::emu::launch({m[1]}, {m[2]})", source)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        sys.stdout.write(translate(f.read()))
