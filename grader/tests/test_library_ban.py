"""The library ban decided from the compiler's dependency list (grader/library_ban.py)."""
import pytest

from grader.library_ban import forbidden_header, parse_deps

DEPS = """\
CMakeFiles/01_basics.vector_add.learner.dir/modules/01_basics/vector_add.cu.o: #deps 4, deps mtime 1 (VALID)
    /course/modules/01_basics/vector_add.cu
    /usr/local/cuda/include/cuda_runtime.h
    /usr/local/cuda-13.0/include/cccl/cub/device/device_reduce.cuh

CMakeFiles/01_basics.vector_add.checker.dir/modules/01_basics/tests/vector_add_test.cu.o: #deps 2, deps mtime 1 (VALID)
    /course/modules/01_basics/tests/vector_add_test.cu
    /course/common/include/course/baselines.h
"""


def test_the_dependency_log_is_read_per_object():
    deps = parse_deps(DEPS)
    assert list(deps) == [
        "CMakeFiles/01_basics.vector_add.learner.dir/modules/01_basics/vector_add.cu.o",
        "CMakeFiles/01_basics.vector_add.checker.dir/modules/01_basics/tests/vector_add_test.cu.o"]
    assert deps[next(iter(deps))][-1] == (
        "/usr/local/cuda-13.0/include/cccl/cub/device/device_reduce.cuh")


@pytest.mark.parametrize("path, header", [
    ("/usr/local/cuda-13.0/include/cccl/cub/device/device_reduce.cuh",
     "cub/device/device_reduce.cuh"),
    ("/usr/local/cuda/include/cccl/thrust/sort.h", "thrust/sort.h"),
    ("/opt/cutlass/include/cutlass/gemm/device/gemm.h", "cutlass/gemm/device/gemm.h"),
    ("/usr/local/cuda/include/cublas_v2.h", "cublas_v2.h"),
    ("/usr/include/cudnn.h", "cudnn.h"),
    ("/course/common/include/course/baselines.h", "course/baselines.h"),
    ("/course/common/include/course/baseline_table.h", "course/baseline_table.h"),
    ("/course/modules/01_basics/cub/cub.cuh", "cub/cub.cuh"),
])
def test_library_headers_are_forbidden(path, header):
    assert forbidden_header(path) == header


@pytest.mark.parametrize("path", [
    "/usr/local/cuda/include/cuda_runtime.h",
    "/usr/local/cuda-13.0/include/cccl/cuda/std/type_traits",
    "/usr/local/cuda/include/cooperative_groups.h",
    "/course/common/include/course/exercise.h",
    "/course/modules/01_basics/cubes.h",
    "/usr/include/hipcub/hipcub.hpp",
])
def test_other_headers_are_allowed(path):
    assert forbidden_header(path) is None


def test_only_the_part_below_the_course_root_counts():
    assert forbidden_header("/home/ada/cub/course/common/include/course/exercise.h",
                            "/home/ada/cub/course") is None
    assert forbidden_header("/home/ada/cub/course/modules/01_basics/thrust/sort.h",
                            "/home/ada/cub/course") == "thrust/sort.h"


def test_the_exercises_own_library_passes_and_no_other():
    """module 11's data_parallel_step calls NCCL (its manifest's `library`): NCCL's headers and
    the course's NCCL_CHECK pass for it, cuBLAS does not, and NCCL is refused to the others."""
    for path in ("/usr/local/cuda/include/nccl.h", "/course/common/include/course/nccl.h"):
        assert forbidden_header(path, allowed="nccl") is None
        assert forbidden_header(path) == "nccl.h"
    assert forbidden_header("/usr/local/cuda/include/cublas_v2.h", allowed="nccl") == "cublas_v2.h"
