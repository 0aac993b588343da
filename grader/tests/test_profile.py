"""grader profile: ncu's pages parsed from output recorded on an H100 (fixtures/ncu/, see
fixtures/README.md), the choice of the timed case and kernel, and the command on the fixture
course with a stand-in `ncu` that prints those pages."""
import json
import os
import stat
from pathlib import Path

import pytest

from grader import profile, tools_cli
from grader.cases import kernel_names
from grader.manifest import Exercise
from grader.results import PerfCase

from .conftest import REPO, invoke

NCU = Path(__file__).parent / "fixtures" / "ncu"
RECORDED_ROOT = "/work/main/.carry/tools/"  # where the course was on the GPU machine


def recorded(name: str) -> tuple[profile.KernelProfile, list[profile.SourceLine]]:
    [kernel] = profile.parse_raw_page((NCU / f"{name}.raw.csv").read_text())
    return kernel, profile.parse_source_page((NCU / f"{name}.source.csv").read_text())


def summary(name: str) -> str:
    kernel, lines = recorded(name)
    return "\n".join(profile.summarize(kernel, lines, lambda path: path.replace(RECORDED_ROOT, "")))


def test_the_raw_page_gives_one_launch_with_its_metrics_in_base_units():
    kernel, _ = recorded("transpose_padded")
    assert kernel.kernel.startswith("transpose_kernel(")
    assert kernel.text["Grid Size"] == "(512, 512, 1)"
    assert kernel.get("gpu__time_duration.sum") == 763040  # ns, thousands separators removed
    assert kernel.get("sm__throughput.avg.pct_of_peak_sustained_elapsed") == pytest.approx(47.01)


def test_the_padded_transpose_is_memory_bound_without_bank_conflicts():
    text = summary("transpose_padded")
    assert "memory-bound: DRAM is the busiest unit" in text
    assert "DRAM 83%" in text
    assert "16,777,216 wavefronts, as many as the accesses need: no bank conflicts" in text
    assert "solutions/02_memory/transpose.cu:43" in text  # the global load waits most
    assert "long_scoreboard" in text.split("stalls")[1].splitlines()[1]


def test_the_unpadded_transpose_shows_its_32_way_conflict_and_where():
    text = summary("transpose_unpadded")
    assert "L1/shared memory is the busiest unit" in text
    assert "bank conflicts, the worst at" in text and "transpose.cu:59 (32-way)" in text
    assert "(16.5x)" in text
    top_stalls = text.split("stalls")[1].splitlines()[1:3]
    assert "short_scoreboard" in top_stalls[0] and "mio_throttle" in top_stalls[1]


def test_the_naive_transpose_has_no_shared_memory_and_waits_on_l2():
    text = summary("naive_transpose")
    assert "no shared-memory accesses" in text
    assert "memory-bound: L2 is the busiest unit" in text
    assert "drain" in text.split("stalls")[1].splitlines()[1]


def test_without_the_source_view_bank_conflicts_come_from_the_kernels_metrics():
    padded, _ = recorded("transpose_padded")
    unpadded, _ = recorded("transpose_unpadded")
    padded_text = "\n".join(profile.summarize(padded, []))
    unpadded_text = "\n".join(profile.summarize(unpadded, []))
    # 1.1 wavefronts per load instruction on the padded tile: no conflict to speak of.
    assert "loads 1.1 wavefronts per instruction" in padded_text
    assert "(no bank conflicts to speak of)" in padded_text
    assert "loads 32.5 wavefronts per instruction" in unpadded_text
    assert "(a 32-way bank conflict)" in unpadded_text
    assert "no source line" in unpadded_text


def test_every_stall_reason_of_the_recording_has_its_meaning():
    kernel, _ = recorded("transpose_unpadded")
    reasons = {name for name, _ in profile.stall_reasons(kernel)}
    assert reasons <= set(profile.STALL_MEANINGS)


def test_stall_reasons_are_shares_of_the_stalls_without_selected():
    kernel, _ = recorded("transpose_unpadded")
    reasons = profile.stall_reasons(kernel)
    assert sum(share for _, share in reasons) == pytest.approx(1.0)
    assert "selected" not in dict(reasons) and "not_selected" not in dict(reasons)
    assert [name for name, _ in reasons[:2]] == ["short_scoreboard", "mio_throttle"]


def test_the_occupancy_limiter_names_every_limit_that_ties():
    kernel, _ = recorded("transpose_padded")
    assert profile.occupancy_limiter(kernel) == (
        "registers (32 registers per thread) and warps per SM (the block size): 8 blocks per SM")
    naive, _ = recorded("naive_transpose")
    assert profile.occupancy_limiter(naive) == "warps per SM (the block size): 8 blocks per SM"


def test_a_source_line_without_its_own_counters_sums_its_instructions():
    page = "\n".join([
        '"File Path","/c/k.cu"',
        '"Line No","Source","Address","Source","Warp Stall Sampling (All Samples)","stall_wait",'
        '"stall_wait (Not Issued)","L1 Wavefronts Shared","L1 Wavefronts Shared Ideal"',
        '"7","x = y;","-","-","","","","",""',
        '"","","0x10","LDS R1","3","2","9","64","2"',
        '"","","0x20","STS R1","4","0","0","2","2"',
        '"8","}","-","-","1","0","0","0","0"'])
    first, second = profile.parse_source_page(page)
    assert (first.file, first.line, first.samples) == ("/c/k.cu", 7, 7)
    assert first.reasons == {"wait": 2}  # the not-issued subset is left out
    assert (first.shared_wavefronts, first.shared_ideal) == (66, 4)
    assert second.samples == 1
    line, share = profile.hottest_line([first, second])
    assert line is first and share == pytest.approx(7 / 8)


def test_ncus_banner_lines_around_the_csv_are_ignored():
    raw = (NCU / "transpose_padded.raw.csv").read_text()
    noisy = "==PROF== Connected to process\n" + raw + "==WARNING== something\n"
    assert profile.parse_raw_page(noisy) == profile.parse_raw_page(raw)


def test_kernels_are_found_in_the_source_whatever_the_launch_bounds(tmp_path):
    assert kernel_names(REPO / "solutions/02_memory/transpose.cu") == ["transpose_kernel"]
    source = tmp_path / "k.cu"
    source.write_text("// __global__ void commented_out(int)\n"
                      "__global__ void __launch_bounds__(256) first(float* x) {}\n"
                      "template <int N>\n__global__ __launch_bounds__(384, 3) void second(int n) {}\n"
                      "__global__ void __launch_bounds__(128, 65536 / (64 * 128))\n    third(int n) {}\n"
                      "/* __global__ void also_commented(int) */\n"
                      "__global__ void first(float* x, int n) {}\n")
    assert kernel_names(source) == ["first", "second", "third"]


def _exercise(baseline: str = "copy") -> Exercise:
    return Exercise("02_memory", "transpose", "t", "transpose.cu", "tests/t.cu", 75, "GB/s",
                    baseline, 0.9, 120.0, ("a", "b"))


def _case(label: str, baseline: str, test: str) -> PerfCase:
    return PerfCase(label, "GB/s", 1.0, baseline, 1.0, 1.0, test=test)


def test_the_default_case_is_the_first_judged_one():
    cases = [_case("vs naive", "naive_transpose", "T.Naive"), _case("big", "copy", "T.Copy")]
    assert profile.choose_case(_exercise(), cases, None).test == "T.Copy"
    assert profile.choose_case(_exercise(), cases, "vs naive").test == "T.Naive"
    assert profile.choose_case(_exercise(), cases, "T.Naive").label == "vs naive"
    with pytest.raises(Exception, match="its cases are 'vs naive', 'big'"):
        profile.choose_case(_exercise(), cases, "nope")


def test_the_ncu_command_selects_the_test_and_the_kernels(tmp_path):
    command = profile.ncu_command("ncu", tmp_path / "exe", "T.Copy", ["k1", "k2"],
                                  tmp_path / "r.ncu-rep", 2)
    assert "--gtest_filter=T.Copy" in command
    assert command[command.index("--kernel-name") + 1] == "regex:^(k1|k2)(<.*)?$"
    assert command[command.index("--launch-count") + 1] == "2"
    assert "SourceCounters" in command and "--import-source" in command


# --- the command, on the fixture course, with a stand-in ncu -------------------------------------


def fake_ncu(folder: Path, profile_output: str = "==PROF== done") -> None:
    """An `ncu` that writes the report it is asked for and prints the recorded pages."""
    script = folder / "ncu"
    script.write_text(f"""#!/bin/sh
if [ "$1" = "--import" ]; then
  case "$*" in
    *"--page raw"*) cat "{NCU}/transpose_unpadded.raw.csv" ;;
    *"--page source"*) cat "{NCU}/transpose_unpadded.source.csv" ;;
  esac
  exit 0
fi
echo "$@" > "{folder}/ncu-arguments"
echo '{profile_output}'
case "{profile_output}" in *ERR_*) exit 1 ;; esac
while [ $# -gt 0 ]; do [ "$1" = "--export" ] && touch "$2"; shift; done
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def tools_on_path(tmp_path, monkeypatch):
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: True)
    return folder


def test_profile_runs_the_timed_case_and_prints_the_summary(course, tools_on_path):
    fake_ncu(tools_on_path)
    run = invoke(course, "profile", "01/passes", "--kernel", "twice")
    assert run.exit_code == 0, run.stderr
    arguments = (tools_on_path / "ncu-arguments").read_text()
    assert "--gtest_filter=Twice.SmallCase" in arguments  # the first case timed against copy
    assert "regex:^(twice)(<.*)?$" in arguments
    assert "timed case 'n=2^10' (Twice.SmallCase)" in run.stdout
    assert "(32-way)" in run.stdout
    assert "full report: build/learner/profiles/01_fixture.passes.learner.ncu-rep" in run.stdout
    # The timed cases came from a run of the checker, whose results name their tests.
    assert "running 01_fixture/passes's checker once" in run.stderr


def test_profile_uses_the_stored_test_names_without_running_the_checker(course, tools_on_path):
    fake_ncu(tools_on_path)
    assert invoke(course, "run", "01/passes").exit_code == 0
    stored = json.loads((course / ".grader/results.json").read_text())
    assert [case["test"] for case in stored["learner"]["01_fixture/passes"]["perf"]] == [
        "Twice.SmallCase", "Twice.LargeCase"]
    run = invoke(course, "profile", "01/passes", "--kernel", "twice", "--case", "n=2^20")
    assert run.exit_code == 0, run.stderr
    assert "checker once" not in run.stderr
    assert "--gtest_filter=Twice.LargeCase" in (tools_on_path / "ncu-arguments").read_text()


def test_a_counter_permission_error_says_exactly_what_to_do(course, tools_on_path):
    fake_ncu(tools_on_path, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission")
    run = invoke(course, "profile", "01/passes", "--solutions", "--kernel", "twice")
    assert run.exit_code == 2
    assert "NVreg_RestrictProfilingToAdminUsers=0" in run.stderr
    assert "sudo env PATH=\"$PATH\" grader profile 01_fixture/passes --solutions" in run.stderr


def test_an_exercise_that_is_todo_has_nothing_to_profile(course, tools_on_path):
    fake_ncu(tools_on_path)
    run = invoke(course, "profile", "01/todo", "--kernel", "twice")
    assert run.exit_code == 2
    assert "01_fixture/todo reports todo: there is nothing to profile" in run.stderr


def test_fast_profiles_the_fast_reference_where_there_is_one(course, tools_on_path):
    fake_ncu(tools_on_path)
    run = invoke(course, "profile", "01/passes", "--fast", "--solutions")
    assert run.exit_code == 2 and "give one of them" in run.stderr
    run = invoke(course, "profile", "01/mismatch", "--fast")
    assert run.exit_code == 2
    assert ("01_fixture/mismatch has no fast reference (its manifest names no fast_solution): "
            "--solutions profiles its reference solution") in run.stderr
    assert not (tools_on_path / "ncu-arguments").exists()
    # Its kernels are looked for in the fast reference's file, built in build/fast.
    run = invoke(course, "profile", "01/passes", "--fast")
    assert run.exit_code == 2
    assert "no __global__ kernel found in solutions/01_fixture/passes_fast.cpp" in run.stderr
    run = invoke(course, "profile", "01/passes", "--fast", "--kernel", "twice")
    assert run.exit_code == 0, run.stderr
    assert "01_fixture/passes (fast), timed case" in run.stdout
    assert "full report: build/fast/profiles/01_fixture.passes.fast.ncu-rep" in run.stdout


def test_profile_without_a_gpu_or_ncu_is_one_line(course, monkeypatch, tmp_path):
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: False)
    run = invoke(course, "profile", "01/passes")
    assert run.exit_code == 2 and "needs an NVIDIA GPU" in run.stderr
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: True)
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu (and no cmake: ncu is checked first)
    monkeypatch.setattr(tools_cli, "require_build_tools", lambda: None)
    run = invoke(course, "profile", "01/passes")
    assert run.exit_code == 2 and "ncu (Nsight Compute) not found" in run.stderr
