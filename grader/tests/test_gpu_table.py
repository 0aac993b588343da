"""`grader gpu`: the table from a recorded course_gpu_table output, and the line without a GPU.

data/gpu_table_h100.txt is course_gpu_table's output on the course's H100 80GB HBM3 (device tool).
"""
from pathlib import Path

import pytest

from grader import gpu_table
from grader.tests.conftest import invoke

RECORDED_H100 = Path(__file__).parent / "data" / "gpu_table_h100.txt"


def values(facts: dict[str, str]) -> dict[str, str]:
    return {row.quantity: row.value for row in gpu_table.rows(facts)}


def h100() -> dict[str, str]:
    return gpu_table.parse(RECORDED_H100.read_text(encoding="utf-8"))


def test_the_recorded_h100_gives_the_figures_the_notes_use():
    table = values(h100())
    assert table["SMs"] == "132"
    assert table["threads per SM"] == "2048 (64 warps)"
    assert table["threads resident at once"] == "270,336"
    assert table["shared memory per block"] == "48 KiB; 227 KiB after opting in"
    assert table["L2 cache"] == "50 MiB"
    assert table["memory bandwidth, measured"] == "2,933 GB/s"  # 2 x 512 MiB in 0.366 ms
    assert table["memory bandwidth, on paper"] == "3,352 GB/s"
    assert table["FP32 peak"] == "66.9 TFLOP/s"
    assert table["ridge point"] == "22.8 FLOP/byte"
    assert table["thread block clusters"] == "yes"
    assert table["a 50304-float row (201,216 B) in one block's shared memory"] == "fits"


def test_bandwidth_counts_read_and_write_and_the_ridge_divides_by_it():
    facts = h100() | {"copy_bytes": str(10**9), "copy_median_ms": "1.0"}
    table = values(facts)
    assert table["memory bandwidth, measured"] == "2,000 GB/s"
    assert table["ridge point"] == "33.5 FLOP/byte"  # 66.9 TFLOP/s / 2.0 TB/s


def test_a_t4_like_gpu_has_no_clusters_and_no_room_for_a_long_row():
    facts = h100() | {"compute_capability": "7.5", "multiprocessors": "40",
                      "max_threads_per_sm": "1024", "shared_memory_per_block_optin_bytes": "65536",
                      "cluster_launch": "0", "sm_clock_khz": "1590000"}
    table = values(facts)
    assert table["threads per SM"] == "1024 (32 warps)"
    assert table["FP32 peak"] == "8.1 TFLOP/s"  # 40 x 64 x 2 x 1.59 GHz
    assert table["thread block clusters"] == "no (Hopper and newer)"
    assert table["a 50304-float row (201,216 B) in one block's shared memory"] == "does not fit"


def test_an_unknown_architecture_gets_no_peak_rather_than_a_guess():
    table = values(h100() | {"compute_capability": "11.7"})
    assert table["FP32 peak, ridge point"] == "unknown"
    assert "FP32 peak" not in table


def test_the_program_without_a_gpu_reports_why():
    with pytest.raises(gpu_table.GpuUnavailable, match="driver"):
        gpu_table.parse("unavailable=CUDA driver version is insufficient for CUDA runtime version\n")


def test_without_a_gpu_the_command_says_so_in_one_line(course, monkeypatch):
    monkeypatch.setattr(gpu_table, "gpu_visible", lambda: False)
    result = invoke(course, "gpu")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [gpu_table.NO_GPU]


def test_the_command_prints_the_table(course, monkeypatch):
    monkeypatch.setattr(gpu_table, "measure", lambda course, log: h100())
    result = invoke(course, "gpu")
    assert result.exit_code == 0
    for text in ("NVIDIA H100 80GB HBM3", "66.9 TFLOP/s", "ridge point", "notes/03b"):
        assert text in result.stdout
