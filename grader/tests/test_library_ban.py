"""The library ban decided from the compiler's dependency list and the learner's object file
(grader/library_ban.py)."""
import pytest

from grader.library_ban import BANS, forbidden_header, forbidden_symbol, parse_deps, parse_undefined

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
    found, _ = forbidden_header(path)
    assert found == header


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
                            "/home/ada/cub/course")[0] == "thrust/sort.h"


# `nm -u -C` of an object that calls cuBLAS through dlopen/dlsym, beside what every nvcc object
# calls.
NM = """                 U cudaLaunchKernel
                 U __cudaRegisterFatBinary
                 U dlopen
                 U dlsym
                 U course::baseline::cublas_sgemm(int, int, int, float const*, float const*, float*)
                 w __gmon_start__
                 U cublasSgemm_v2
                 U cudaGetDriverEntryPoint_ptsz
"""


def test_the_undefined_names_of_an_object_are_read():
    names = parse_undefined(NM)
    assert names[0] == "cudaLaunchKernel"
    assert ("course::baseline::cublas_sgemm(int, int, int, float const*, float const*, float*)"
            in names)


@pytest.mark.parametrize("name, library", [
    ("dlopen", "a library loaded at run time"),
    ("dlsym", "a library loaded at run time"),
    ("cudaGetDriverEntryPoint_ptsz", "a library loaded at run time"),
    ("cudaGetDriverEntryPointByVersion", "a library loaded at run time"),
    ("cuGetProcAddress_v2", "a library loaded at run time"),
    ("cublasSgemm_v2", "cuBLAS"),
    ("cublasLtMatmul", "cuBLAS"),
    ("cudnnCreate", "cuDNN"),
    ("ncclAllReduce", "NCCL"),
    ("course::baseline::cublas_sgemm(int, int, int, float const*, float const*, float*)",
     "the course's baselines"),
])
def test_calls_into_a_library_are_forbidden(name, library):
    assert forbidden_symbol(name).library == library


@pytest.mark.parametrize("name", ["cudaLaunchKernel", "__cudaRegisterFatBinary", "cudaMalloc",
                                  "__gmon_start__", "course::NotImplemented::~NotImplemented()",
                                  "dlerror_of_my_own", "cudaGetDevice"])
def test_what_every_object_calls_is_allowed(name):
    assert forbidden_symbol(name) is None


def test_an_exercise_exempt_from_a_library_may_use_it():
    # module 11's data_parallel_step and NCCL: its row of the table, by key.
    assert "nccl" in {ban.key for ban in BANS}
    assert forbidden_symbol("ncclAllReduce", frozenset({"nccl"})) is None
    assert forbidden_header("/usr/include/nccl.h", "/", frozenset({"nccl"})) is None
    assert forbidden_symbol("cublasSgemm_v2", frozenset({"nccl"})).library == "cuBLAS"


def test_the_course_nccl_check_header_is_ncclS():
    """course/nccl.h (NCCL_CHECK) is NCCL's for the ban: it passes for the exercise exempt from
    NCCL (module 11's data_parallel_step), and is refused to the others."""
    path = "/course/common/include/course/nccl.h"
    assert forbidden_header(path, "/", frozenset({"nccl"})) is None
    assert forbidden_header(path)[0] == "nccl.h"
