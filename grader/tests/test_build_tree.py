"""Build state (issue 11, items 1-5, 12-14): the grader never grades another folder's code, never
blames the learner for the machine, and recovers from trees that are stale or broken."""
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader import tools
from grader.build import BuildTree
from grader.course import load_course
from grader.results import LEARNER
from grader.tests.conftest import REPO, invoke

NVCC = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
SYNTAX_ERROR = "int twice(int x) { return 2 * x }\n"


def status_of(result, exercise: str) -> str:
    row = next(line for line in result.stdout.splitlines() if line.startswith(exercise))
    return re.split(r"\s{2,}", row)[1]


def saved(root: Path) -> dict:
    path = root / ".grader/results.json"
    return json.loads(path.read_text()) if path.exists() else {}


# --- item 1: a configure without nvcc is not remembered -----------------------------------

@pytest.mark.skipif(not os.access(NVCC, os.X_OK), reason="needs nvcc")
def test_nvcc_missing_at_one_configure_is_found_at_the_next(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(probe LANGUAGES CXX)\n"
        f'list(APPEND CMAKE_MODULE_PATH "{REPO}/cmake")\ninclude(Course)\ncourse_enable_cuda()\n')
    build = tmp_path / "build"
    command = ["cmake", "-S", str(tmp_path), "-B", str(build), "-G", "Ninja"]
    no_cuda = {key: value for key, value in os.environ.items() if key != "CUDACXX"}
    no_cuda["PATH"] = os.pathsep.join(folder for folder in os.environ["PATH"].split(os.pathsep)
                                      if not (Path(folder) / "nvcc").exists())
    first = subprocess.run(command, env=no_cuda, capture_output=True, text=True)
    assert first.returncode != 0 and "No CMAKE_CUDA_COMPILER could be found" in first.stderr
    # As the message advises: CUDACXX set, nothing deleted.
    second = subprocess.run(command, env={**no_cuda, "CUDACXX": NVCC}, capture_output=True,
                            text=True)
    assert second.returncode == 0, second.stdout + second.stderr


# --- item 3: a tree that is not this folder's is configured afresh ------------------------

def test_a_copied_clone_builds_its_own_sources(course):
    assert invoke(course, "run", "01/passes").exit_code == 0
    copy = course.parent / "copy"
    shutil.copytree(course, copy, symlinks=True)  # cp -a
    (copy / "modules/01_fixture/passes.cpp").write_text(SYNTAX_ERROR)
    result = invoke(copy, "run", "01/passes")
    assert status_of(result, "passes") == "build error", result.stdout
    assert (f"build/learner: it was configured for the sources in {course}: configuring it "
            "afresh") in result.stderr
    assert invoke(course, "run", "01/passes").exit_code == 0  # the original is untouched


def test_a_moved_clone_builds(course):
    assert invoke(course, "run", "01/passes").exit_code == 0
    moved = course.parent / "moved"
    course.rename(moved)
    result = invoke(moved, "run", "01/passes")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert status_of(result, "passes") == "pass"


def test_a_cache_naming_a_compiler_that_is_gone_is_configured_afresh(course):
    assert invoke(course, "run", "01/passes").exit_code == 0
    cache = course / "build/learner/CMakeCache.txt"
    cache.write_text(re.sub(r"^CMAKE_CXX_COMPILER:(\w+)=.*$",
                            r"CMAKE_CXX_COMPILER:\1=/nonexistent/bin/c++",
                            cache.read_text(), flags=re.M))
    result = invoke(course, "run", "01/passes")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "its compiler /nonexistent/bin/c++ (CMAKE_CXX_COMPILER) is gone" in result.stderr


def test_a_broken_cache_is_configured_afresh(course):
    assert invoke(course, "run", "01/passes").exit_code == 0
    (course / "build/learner/CMakeCache.txt").write_text("garbage\n\x00\x01\n")
    result = invoke(course, "run", "01/passes")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_build_files_that_cannot_regenerate_are_configured_afresh(course):
    assert invoke(course, "run", "01/passes").exit_code == 0
    # What CMake recorded about the compiler, corrupted: ninja re-runs CMake, which reads it and
    # fails; only a fresh configure (which detects the compiler again) recovers.
    [compiler] = (course / "build/learner/CMakeFiles").glob("*/CMakeCXXCompiler.cmake")
    compiler.write_text("message(FATAL_ERROR corrupted)\n")
    os.utime(course / "modules/01_fixture/module.toml")  # a manifest edit makes ninja re-run it
    result = invoke(course, "run", "01/passes")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "its build files could not be regenerated: configuring it afresh" in result.stderr


# --- item 4: a file missing at one configure comes back --------------------------------------

def test_a_missing_stub_is_reported_and_its_target_returns_with_it(course):
    stub = course / "modules/01_fixture/passes.cpp"
    kept = stub.read_text()
    stub.unlink()  # a branch switch, a stash: missing when the tree is configured
    result = invoke(course, "run", "01/passes")
    assert status_of(result, "passes") == "build error"
    assert "    missing: modules/01_fixture/passes.cpp" in result.stdout
    assert "ninja" not in result.stdout
    stub.write_text(kept)
    result = invoke(course, "run", "01/passes")
    assert result.exit_code == 0, result.stdout + result.stderr


def test_a_missing_checker_is_reported(course):
    (course / "modules/01_fixture/tests/mismatch_test.cpp").unlink()
    result = invoke(course, "run", "01/mismatch")
    assert "    missing: modules/01_fixture/tests/mismatch_test.cpp" in result.stdout


# --- item 5: the machine's faults are one line, exit 2, nothing recorded ---------------------

def assert_machine_fault(result, root: Path, *fragments: str):
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stdout == ""
    last = result.stderr.splitlines()[-1]
    assert last.startswith("Error: ")
    for fragment in fragments:
        assert fragment in last
    assert saved(root) == {}
    assert not (root / "progress.md").exists()


def test_a_vanished_build_folder_is_not_the_learners_build_error(course):
    (course / "build").symlink_to(course.parent / "unmounted-scratch-disk" / "build")
    assert_machine_fault(invoke(course, "run", "01/passes"), course,
                         "cannot write in build")


def test_a_build_folder_that_is_a_file_is_not_the_learners_build_error(course):
    (course / "build").write_text("not a folder\n")
    assert_machine_fault(invoke(course, "run", "01/passes"), course, "build")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only folders")
def test_a_read_only_build_folder_is_not_the_learners_build_error(course):
    assert invoke(course, "run", "01/passes").exit_code == 0
    (course / ".grader/results.json").unlink()
    for folder, _, _ in os.walk(course / "build"):
        os.chmod(folder, 0o555)
    try:
        (course / "modules/01_fixture/passes.cpp").write_text("int twice(int x) { return x+x; }\n")
        assert_machine_fault(invoke(course, "run", "01/passes"), course, "build/learner")
    finally:
        for folder, _, _ in os.walk(course / "build"):
            os.chmod(folder, 0o755)


@pytest.mark.parametrize("seed", ["abc", "", "-1", "12x", "99999999999999999999999"])
def test_a_bad_grader_seed_is_one_line_before_anything_is_built(course, seed):
    result = invoke(course, "run", "01/passes", env={"GRADER_SEED": seed})
    assert_machine_fault(result, course, f"GRADER_SEED must be a whole number", f"'{seed}'")
    assert not (course / "build").exists()


def test_a_good_grader_seed_reaches_the_checker(course):
    assert invoke(course, "run", "01/passes", env={"GRADER_SEED": "12345"}).exit_code == 0


def test_build_output_that_blames_the_machine_is_a_machine_fault():
    from grader.build import environment_fault
    assert environment_fault("[1/2] Linking\n/usr/bin/ld: cannot open output file "
                             "bin/x: Read-only file system\n") is not None
    assert environment_fault("ninja: error: loading 'build.ninja': No such file or directory\n")
    assert environment_fault("ninja: fatal: mkdir(bin): Permission denied\n")
    assert environment_fault("x.cpp:1:10: fatal error: y.h: Permission denied\n") is None
    assert environment_fault("x.cpp:4:32: error: expected ';'\n") is None


def test_wgmma_serialized_by_ptxas_is_a_note_naming_the_file_and_the_reason():
    from grader.build import serialized_wgmma_notes
    output = (
        "[1/3] Building CUDA object CMakeFiles/07_attention.flash_wgmma.checker.dir/"
        "modules/07_attention/tests/flash_wgmma_test.cu.o\n"
        "[2/3] Building CUDA object CMakeFiles/07_attention.flash_wgmma.learner.dir/"
        "modules/07_attention/flash_wgmma.cu.o\n"
        "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
        "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
        "between start and end of the pipeline stage in the function '_Z6kernelILi64EEvv'\n"
        "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
        "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
        "between start and end of the pipeline stage in the function '_Z6kernelILi128EEvv'\n"
        "[3/3] Linking CXX executable bin/07_attention.flash_wgmma.learner\n")
    notes = serialized_wgmma_notes(output)
    assert len(notes) == 1  # one per file and reason, not per instantiation
    assert "modules/07_attention/flash_wgmma.cu (C7515: non wgmma instructions defining" in notes[0]
    assert "_Z6kernel" not in notes[0]
    assert serialized_wgmma_notes("[1/1] Building CUDA object CMakeFiles/a.dir/a.cu.o\n") == []
    registers = serialized_wgmma_notes(
        "ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async instructions are "
        "serialized due to insufficient register resources for the wgmma pipeline in the "
        "function 'f'\n")
    assert "(C7511: insufficient register resources" in registers[0]
    assert "setmaxnreg" in registers[0]


# --- item 11: the build tree is locked ------------------------------------------------------

def test_a_second_grader_waits_for_the_build_tree(course):
    from filelock import FileLock
    assert invoke(course, "run", "01/passes").exit_code == 0
    lock = FileLock(course / "build/.learner.lock")
    with lock:
        process = subprocess.Popen(
            ["python3", "-m", "grader", "--root", str(course), "run", "01/passes"], cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=4)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stdout + stderr
    assert "waiting for another grader run to finish with build/learner" in stderr


# --- item 12: a build for another architecture says so ---------------------------------------

def tree_with_architectures(root: Path, architectures: str) -> BuildTree:
    tree = BuildTree.standard(load_course(root), LEARNER)
    tree.path.mkdir(parents=True)
    (tree.path / "CMakeCache.txt").write_text(
        f"CMAKE_CUDA_ARCHITECTURES:STRING={architectures}\n")
    return tree


@pytest.mark.parametrize("architectures, gpu, warned", [
    ("75", 90, True), ("80-virtual", 90, True), ("90-virtual", 90, True), ("75;90", 90, False),
    ("90", 90, False), ("native", 90, False), ("all-major", 90, False), ("75", None, False),
    ("90a", 90, False), ("86", 86, False), ("80", 86, True),
])
def test_the_architecture_note(course, architectures, gpu, warned):
    from grader.build import cuda_architecture_note
    note = cuda_architecture_note(tree_with_architectures(course, architectures), gpu)
    assert (note is not None) == warned
    if warned:
        assert note.startswith("note: build/learner is built for ")
        assert f" and this GPU is sm_{gpu}: its code runs JIT-compiled from PTX" in note
        assert note.endswith(f"cmake build/learner -DCMAKE_CUDA_ARCHITECTURES={gpu}")


def test_a_run_on_a_gpu_of_another_architecture_says_how_to_rebuild(course, gpu, monkeypatch):
    from grader import cli
    monkeypatch.setattr(cli, "gpu_sm", lambda: 90)
    assert invoke(course, "run", "01/passes").exit_code == 0
    cache = course / "build/learner/CMakeCache.txt"
    cache.write_text(cache.read_text() + "CMAKE_CUDA_ARCHITECTURES:STRING=75\n")
    result = invoke(course, "run", "01/passes")
    assert ("note: build/learner is built for sm_75 and this GPU is sm_90: its code runs "
            "JIT-compiled from PTX, on the older architecture's paths; to build for this GPU: "
            "cmake build/learner -DCMAKE_CUDA_ARCHITECTURES=90") in result.stderr


# --- item 13: the CMake minimum --------------------------------------------------------------

def test_an_old_cmake_is_one_line(course, tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "cmake").write_text("#!/bin/sh\necho 'cmake version 3.22.1'\n")
    (fake / "cmake").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    tools.cmake_version.cache_clear()
    try:
        result = invoke(course, "run", "01/passes")
    finally:
        tools.cmake_version.cache_clear()
    assert_machine_fault(result, course, "cmake 3.22 is too old", "3.25")


def test_the_stated_cmake_minimum_is_the_one_the_presets_need():
    presets = json.loads((REPO / "CMakePresets.json").read_text())
    needed = presets["cmakeMinimumRequired"]
    minimum = f"{needed['major']}.{needed['minor']}"
    assert tools.MIN_CMAKE == (needed["major"], needed["minor"])
    assert f"cmake_minimum_required(VERSION {minimum})" in (REPO / "CMakeLists.txt").read_text()
    assert f"CMake {minimum} or newer" in (REPO / "README.md").read_text()


# --- item 14: downloads are pinned -----------------------------------------------------------

def test_every_download_has_a_hash():
    for path in (REPO / "cmake").glob("*.cmake"):
        for declaration in re.findall(r"FetchContent_Declare\((.*?)\)", path.read_text(), re.S):
            assert re.search(r"URL_HASH SHA256=[0-9a-f]{64}", declaration), path.name
