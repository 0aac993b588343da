"""The learner's tricks against the library ban, on a copy of the real course (module 01 only):
CUB included behind a macro is refused from the compiler's dependency list; a hand-declared
course::baseline::cublas_sgemm (which would not link: the learner's executable does not link the
baselines library), cuBLAS reached through dlopen and dlsym, and <cublas_v2.h> included and
called (which would not link either) are refused from the object's undefined names, each with
its "refused: ..." line. Needs nvcc (skipped without it); no GPU: the builds are what is tested.
About three minutes on 2 cores (a CUDA configure, the harness, four exercises)."""
import shutil
from pathlib import Path

import pytest

from grader.tests.conftest import REPO, invoke

NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                if Path("/usr/local/cuda/bin/nvcc").exists() else None)
COPIED = ("CMakeLists.txt", "cmake", "common", "dev/emu", "modules/01_basics")

CUB_BEHIND_A_MACRO = """\
#include "course/exercise.h"
#include "vector_add.h"
#define LIBRARY <cub/device/device_reduce.cuh>
#include LIBRARY

__global__ void vector_add_kernel(const float* a, const float* b, float* c, std::size_t n) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}

void vector_add(const float* a, const float* b, float* c, std::size_t n) {
    vector_add_kernel<<<static_cast<unsigned>(course::ceil_div(n, 256)), 256>>>(a, b, c, n);
    CUDA_CHECK_LAUNCH();
}
"""

HAND_DECLARED_BASELINE = """\
#include "course/exercise.h"
#include "naive_matmul.h"

namespace course::baseline {
void cublas_sgemm(int M, int N, int K, const float* A, const float* B, float* C);
}

void naive_matmul(int M, int N, int K, const float* A, const float* B, float* C) {
    course::baseline::cublas_sgemm(M, N, K, A, B, C);
}
"""

CUBLAS_BY_DLOPEN = """\
#include <dlfcn.h>

#include "course/exercise.h"
#include "saxpy_vec4.h"

using Saxpy = int (*)(void*, int, const float*, const float*, int, float*, int);

void saxpy_vec4(float a, const float* x, float* y, std::size_t n) {
    void* cublas = dlopen("libcublas.so.13", RTLD_NOW);
    const auto saxpy = reinterpret_cast<Saxpy>(dlsym(cublas, "cublasSaxpy_v2"));
    saxpy(nullptr, static_cast<int>(n), &a, x, 1, y, 1);
}
"""

CUBLAS_INCLUDED = """\
#include <cublas_v2.h>

#include "course/exercise.h"
#include "matrix_add_2d.h"

void matrix_add_2d(const float* A, const float* B, float* C, int rows, int cols, int ld) {
    cublasHandle_t handle;
    cublasCreate(&handle);
    const float one = 1.0f;
    cublasSgeam(handle, CUBLAS_OP_N, CUBLAS_OP_N, cols, rows, &one, A, ld, &one, B, ld, C, ld);
}
"""


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the real course cannot build")
def test_the_library_tricks_of_a_learner_fail_clearly(tmp_path, monkeypatch):
    course = tmp_path / "course"
    for part in COPIED:
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, course / part)
        else:
            (course / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, course / part)
    module = course / "modules/01_basics"
    (module / "vector_add.cu").write_text(CUB_BEHIND_A_MACRO)
    (module / "naive_matmul.cu").write_text(HAND_DECLARED_BASELINE)
    (module / "saxpy_vec4.cu").write_text(CUBLAS_BY_DLOPEN)
    (module / "matrix_add_2d.cu").write_text(CUBLAS_INCLUDED)
    monkeypatch.setenv("CUDACXX", NVCC)

    cub = invoke(course, "run", "01/vector_add")
    assert cub.exit_code == 1
    assert ("refused: modules/01_basics/vector_add.cu includes <cub/device/device_reduce.cuh>; "
            "an exercise may not call the library it is measured against") in cub.stdout

    baseline = invoke(course, "run", "01/naive_matmul")
    assert baseline.exit_code == 1
    assert "build error" in baseline.stdout
    assert ("refused: modules/01_basics/naive_matmul.cu calls course::baseline::cublas_sgemm "
            "(the course's baselines); an exercise may not call the library it is measured "
            "against") in baseline.stdout

    loaded = invoke(course, "run", "01/saxpy_vec4")
    assert loaded.exit_code == 1
    assert ("refused: modules/01_basics/saxpy_vec4.cu calls dlopen (a library loaded at run "
            "time); an exercise may not load a library at run time") in loaded.stdout

    included = invoke(course, "run", "01/matrix_add_2d")
    assert included.exit_code == 1
    assert ("refused: modules/01_basics/matrix_add_2d.cu includes <cublas_v2.h>; an exercise may "
            "not call the library it is measured against") in included.stdout
    assert "undefined reference" not in included.stdout
