"""grader doctor: each check against a made-up machine (a Probe that answers from a table), and
the command on this machine."""
from grader import doctor
from grader.doctor import OK, PROBLEM, WARNING

from .conftest import invoke

SMI_HEADER = "| NVIDIA-SMI 580.159.04   Driver Version: 580.159.04   CUDA Version: 13.0 |"


class FakeProbe(doctor.Probe):
    def __init__(self, outputs=None, files=None, packages=None, root=False, python=(3, 12)):
        self.outputs = {
            "cmake --version": "cmake version 3.28.3",
            "ninja --version": "1.11.1",
            "c++ --version": "c++ (Ubuntu 13.3.0) 13.3.0",
            "nvcc --version": "Cuda compilation tools, release 13.0, V13.0.48",
            "nvidia-smi": SMI_HEADER,
            "nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader":
                "Tesla T4, 7.5, 580.95.05",
            "ncu --version": "Version 2025.3.1.0 (build 1)",
            "compute-sanitizer --version": "Version 2025.3.1.0 (build 2)",
            **(outputs or {})}
        self.files = files or {}
        self.packages = {"click": "8.1", "jinja2": "3.1", "rich": "13", "watchfiles": "1.0",
                         "matplotlib": "3.9", "pytest": "8", **(packages or {})}
        self.root, self.python = root, python

    def output(self, command):
        return self.outputs.get(" ".join(command))

    def read(self, path):
        return self.files.get(str(path))

    def package_version(self, name):
        return self.packages.get(name)

    def is_root(self):
        return self.root

    def python_version(self):
        return self.python


def checks(probe, root=None) -> dict[str, doctor.Check]:
    return {check.name: check for check in doctor.run_checks(probe, root)}


def test_a_ready_machine_has_no_problem():
    found = checks(FakeProbe(files={str(doctor.PROFILING_PARAMS): "RmProfilingAdminOnly: 0"}))
    assert all(check.status == OK for check in found.values()), found
    assert found["GPU"].detail == "Tesla T4, compute capability 7.5"
    assert found["driver and toolkit"].detail == "driver supports CUDA 13.0, toolkit is 13.0"


def test_a_driver_of_an_older_cuda_major_is_a_problem_with_its_fix():
    smi = SMI_HEADER.replace("13.0", "12.4")
    check = checks(FakeProbe({"nvidia-smi": smi}))["driver and toolkit"]
    assert check.status == PROBLEM
    assert "too old for CUDA 13" in check.fix and "update the NVIDIA driver" in check.fix


def test_an_older_minor_version_is_only_a_warning():
    toolkit = {"nvcc --version": "Cuda compilation tools, release 13.1, V13.1.1"}
    assert checks(FakeProbe(toolkit))["driver and toolkit"].status == WARNING


def test_a_gpu_below_turing_is_a_problem():
    old = {"nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader":
           "Tesla V100, 7.0, 580.1"}
    check = checks(FakeProbe(old))["GPU"]
    assert check.status == PROBLEM and "7.5 or newer" in check.fix


def test_no_gpu_is_a_warning_that_points_at_the_notebook():
    found = checks(FakeProbe({"nvidia-smi": None}))
    assert found["GPU"].status == WARNING and "notebooks/free_gpu.ipynb" in found["GPU"].fix
    assert "driver and toolkit" not in found


def test_restricted_counters_are_a_problem_for_a_user_not_for_root():
    params = {str(doctor.PROFILING_PARAMS): "RmProfilingAdminOnly: 1\n"}
    user = checks(FakeProbe(files=params))["GPU performance counters"]
    assert user.status == PROBLEM and "NVreg_RestrictProfilingToAdminUsers=0" in user.fix
    assert checks(FakeProbe(files=params, root=True))["GPU performance counters"].status == OK


def test_missing_tools_and_old_cmake_come_with_their_fixes():
    found = checks(FakeProbe({"cmake --version": "cmake version 3.22.1", "ninja --version": None,
                              "ncu --version": None}, packages={"rich": None,
                                                                "watchfiles": None}))
    assert found["CMake"].status == PROBLEM and "3.25" in found["CMake"].fix
    assert found["Ninja"].status == PROBLEM and "pip install ninja" in found["Ninja"].fix
    assert found["Python package rich"].status == PROBLEM
    assert found["Python package watchfiles"].status == WARNING
    assert found["Python package watchfiles"].fix == "python3 -m pip install -e '.[watch]'"
    assert found["Nsight Compute (ncu)"].status == WARNING
    assert "GPU performance counters" not in found


def test_a_build_tree_for_another_gpu_is_reported_with_the_fix(tmp_path):
    cache = {str(tmp_path / "build/learner/CMakeCache.txt"): "CMAKE_CUDA_ARCHITECTURES:STRING=90\n",
             str(tmp_path / "build/solutions/CMakeCache.txt"): "CMAKE_CUDA_ARCHITECTURES:STRING=75\n"}
    found = checks(FakeProbe(files=cache), tmp_path)
    assert found["build/learner architecture"].status == WARNING
    assert found["build/learner architecture"].fix.startswith("rm -rf build/learner")
    assert found["build/solutions architecture"].status == OK


def test_gpus_are_read_from_nvidia_smis_csv():
    assert doctor.parse_gpus("NVIDIA H100 80GB HBM3, 9.0, 580.159.04\nbad line\n") == [
        {"name": "NVIDIA H100 80GB HBM3", "compute_cap": "9.0", "driver": "580.159.04"}]


def test_the_command_prints_every_check_and_the_fixes(course, monkeypatch):
    monkeypatch.setattr(doctor, "Probe", lambda: FakeProbe({"ninja --version": None}))
    run = invoke(course, "doctor")
    assert run.exit_code == 1
    assert "Ninja" in run.stdout and "problem" in run.stdout
    assert "Ninja (problem): python3 -m pip install ninja" in run.stdout
    # The counter permission cannot be told from a made-up /proc: a warning.
    assert run.stdout.rstrip().endswith("1 problem, 1 warning")
