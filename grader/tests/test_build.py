"""What the build step reads: compiler errors and forbidden includes; how it stops."""
import sys
import time
from pathlib import Path

import pytest

from grader.build import _started, compiler_errors, forbidden_includes

NVCC_LOG = """[1/3] Building CUDA object vector_add.cu.o
FAILED: CMakeFiles/01_basics.vector_add.learner.dir/modules/01_basics/vector_add.cu.o
/usr/local/cuda/bin/nvcc -forward-unknown-to-host-compiler -O3 -c modules/01_basics/vector_add.cu
modules/01_basics/vector_add.cu(14): error: identifier "idx" is undefined
      c[idx] = a[idx] + b[idx];
        ^
modules/01_basics/vector_add.cu(15): warning #177-D: variable "i" was declared but never referenced
1 error detected in the compilation of "modules/01_basics/vector_add.cu".
ninja: build stopped: subcommand failed.
"""
GCC_LOG = """FAILED: x.o
modules/01_fixture/syntax_error.cpp: In function 'int twice(int)':
modules/01_fixture/syntax_error.cpp:4:32: error: expected ';' before '}' token
common/include/course/missing.h:1:10: fatal error: nope.h: No such file or directory
"""
LINKER_LOG = """[2/2] Linking CXX executable bin/01_basics.vector_add.learner
/usr/bin/ld: vector_add_test.cu.o: in function `VectorAdd_Edge_Test::TestBody()':
vector_add_test.cu:(.text+0x1f): undefined reference to `vector_add(float const*, float*)'
collect2: error: ld returned 1 exit status
"""


@pytest.mark.parametrize("log, first", [
    (NVCC_LOG, 'modules/01_basics/vector_add.cu(14): error: identifier "idx" is undefined'),
    (GCC_LOG, "modules/01_fixture/syntax_error.cpp:4:32: error: expected ';' before '}' token"),
    (LINKER_LOG,
     "vector_add_test.cu:(.text+0x1f): undefined reference to `vector_add(float const*, float*)'"),
    ("ninja: error: unknown target 'x'\n", "ninja: error: unknown target 'x'"),
])
def test_the_first_compiler_error_is_found(log, first):
    assert compiler_errors(log)[0] == first


def test_only_error_lines_are_kept_and_no_more_than_a_few():
    assert compiler_errors(GCC_LOG) == [
        "modules/01_fixture/syntax_error.cpp:4:32: error: expected ';' before '}' token",
        "common/include/course/missing.h:1:10: fatal error: nope.h: No such file or directory"]
    assert len(compiler_errors(GCC_LOG * 10)) == 5


def test_without_an_error_line_the_end_of_the_log_is_shown():
    assert compiler_errors("a\nb\n\nc\n", limit=2) == ["b", "c"]


@pytest.mark.parametrize("line, header", [
    ("#include <cublas_v2.h>", "cublas_v2.h"),
    ('#include "cudnn.h"', "cudnn.h"),
    ("  #  include <cub/block/block_reduce.cuh>", "cub/block/block_reduce.cuh"),
    ("#include <thrust/device_vector.h>", "thrust/device_vector.h"),
    ("#include <cutlass/gemm/device/gemm.h>", "cutlass/gemm/device/gemm.h"),
    ('#include "course/baselines.h"', "course/baselines.h"),
])
def test_library_headers_are_forbidden(line, header):
    assert forbidden_includes(f"// stub\n{line}\nint x;\n") == [header]


@pytest.mark.parametrize("line", [
    '#include "course/exercise.h"',
    "#include <cuda_runtime.h>",
    "#include <hipcub/hipcub.hpp>",
    "// #include <cublas_v2.h>  (no: you write the GEMM)",
    "const char* note = \"cublas\";",
])
def test_other_includes_are_allowed(line):
    assert forbidden_includes(line) == []


# Issue 28: Ctrl-C during a build. ninja runs each compiler in a process group of its own, which
# killing ninja's group leaves running; asked to stop (SIGTERM), ninja stops them. This stand-in
# does the same: a "compiler" in a session of its own, stopped by the stand-in's SIGTERM handler.
FAKE_NINJA = """\
import os, signal, subprocess, sys, time
compiler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            start_new_session=True)
open(sys.argv[1], "w").write(str(compiler.pid))
def stop(number, frame):
    os.killpg(compiler.pid, signal.SIGTERM)
    compiler.wait()
    sys.exit(1)
signal.signal(signal.SIGTERM, stop)
print("[1/2] Building CUDA object", flush=True)
time.sleep(60)
"""


def test_an_interrupted_build_leaves_no_compiler_running(tmp_path):
    script, pid_file = tmp_path / "fake_ninja.py", tmp_path / "compiler.pid"
    script.write_text(FAKE_NINJA)
    with pytest.raises(KeyboardInterrupt):
        with _started([sys.executable, str(script), str(pid_file)]) as process:
            assert process.stdout.readline().startswith("[1/2]")
            raise KeyboardInterrupt  # what Ctrl-C raises in the grader
    compiler = int(pid_file.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{compiler}").exists() or "Z" in _state(compiler)


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
