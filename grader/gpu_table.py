"""`grader gpu`: this machine's GPU in the figures that the notes' arithmetic uses.

The figures come from `course_gpu_table` (common/tools/gpu_table.cpp), built in the learner's
tree like the checkers: device properties read from the driver and a timed device-to-device
copy. From them: the peak FP32 rate, the ridge point of the roofline, and what module 06's long
rows can use on this GPU. `measure` and `rows` are separate so that other commands can show the
same table.
"""
import subprocess
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from grader.build import BuildTree, build, configure
from grader.course import Course
from grader.errors import UserError
from grader.results import LEARNER
from grader.tools import gpu_visible, require_build_tools

TARGET = "course_gpu_table"
RUN_TIMEOUT_S = 120
NO_GPU = ("no NVIDIA GPU visible (nvidia-smi): nothing to measure here; the notes' figures are "
          "an H100's")

# FP32 results per clock per SM (an FMA counts once), from the CUDA C++ Programming Guide's
# table of arithmetic instruction throughput. A GPU not listed gets no peak and no ridge point.
FP32_LANES_PER_SM = {"7.0": 64, "7.2": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.7": 128,
                     "8.9": 128, "9.0": 128, "10.0": 128, "12.0": 128}
# Module 06's long rows: GPT-2's vocabulary, 50304 floats.
LONG_ROW_BYTES = 50304 * 4
KIB = 1024


class GpuUnavailable(Exception):
    """No figures: no GPU, or the program could not read it (the reason is the message)."""


@dataclass(frozen=True)
class Row:
    quantity: str
    value: str
    source: str  # how the value was obtained: read from the device, measured, or computed


def parse(output: str) -> dict[str, str]:
    """The `key=value` lines of course_gpu_table."""
    facts = dict(line.split("=", 1) for line in output.splitlines() if "=" in line)
    if "unavailable" in facts:
        raise GpuUnavailable(facts["unavailable"])
    return facts


def measure(course: Course, log) -> dict[str, str]:
    """Builds course_gpu_table in the learner's tree, runs it and returns its figures."""
    if not gpu_visible():
        raise GpuUnavailable(NO_GPU)
    require_build_tools()
    tree = BuildTree.standard(course, LEARNER)
    configure(tree, log)
    failures = build(tree, [TARGET], log)
    if failures:
        raise UserError(f"{TARGET} did not build: " + "; ".join(failures[TARGET].errors))
    try:
        result = subprocess.run([str(tree.path / "bin" / TARGET)], capture_output=True,
                                text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired as error:
        raise GpuUnavailable(f"{TARGET} did not finish in {RUN_TIMEOUT_S} s") from error
    return parse(result.stdout)


def copy_gb_s(facts: dict[str, str]) -> float:
    """The measured copy bandwidth, counting the bytes read and the bytes written."""
    return 2 * int(facts["copy_bytes"]) / (float(facts["copy_median_ms"]) * 1e6)


def fp32_peak_tflop_s(facts: dict[str, str]) -> float | None:
    """SMs x FP32 lanes x 2 FLOP per FMA x the peak clock; None for a GPU not in our table."""
    lanes = FP32_LANES_PER_SM.get(facts["compute_capability"])
    if lanes is None:
        return None
    return int(facts["multiprocessors"]) * lanes * 2 * int(facts["sm_clock_khz"]) / 1e9


def rows(facts: dict[str, str]) -> list[Row]:
    """The learner's GPU table, with the arithmetic spelled out in each derived row."""
    sms = int(facts["multiprocessors"])
    threads_per_sm = int(facts["max_threads_per_sm"])
    registers = int(facts["registers_per_sm"])
    optin = int(facts["shared_memory_per_block_optin_bytes"])
    measured_gb_s = copy_gb_s(facts)
    sm_ghz = int(facts["sm_clock_khz"]) / 1e6
    memory_mhz = int(facts["memory_clock_khz"]) / 1e3
    bus_bits = int(facts["memory_bus_bits"])
    paper_gb_s = 2 * memory_mhz * 1e6 * bus_bits / 8 / 1e9
    capability = facts["compute_capability"]
    device = "read from the device"
    table = [
        Row("GPU", f"{facts['name']}, compute capability {capability}", device),
        Row("SMs", f"{sms}", device),
        Row("threads per SM", f"{threads_per_sm} ({threads_per_sm // 32} warps)", device),
        Row("blocks per SM", facts["max_blocks_per_sm"], device),
        Row("threads resident at once", f"{sms * threads_per_sm:,}",
            f"{sms} SMs x {threads_per_sm} threads"),
        Row("registers per SM", f"{registers:,} x 32 bits ({registers * 4 // KIB} KiB)", device),
        Row("shared memory per SM", f"{int(facts['shared_memory_per_sm_bytes']) // KIB} KiB",
            device),
        Row("shared memory per block", f"48 KiB; {optin // KIB} KiB after opting in",
            device + " (opt-in: cudaFuncSetAttribute)"),
        Row("L2 cache", f"{int(facts['l2_bytes']) / 2**20:g} MiB", device),
        Row("device memory", f"{int(facts['global_memory_bytes']) / 2**30:.1f} GiB", device),
        Row("memory bandwidth, measured", f"{measured_gb_s:,.0f} GB/s",
            f"device-to-device copy of {int(facts['copy_bytes']) // 2**20} MiB, read + write "
            f"counted, median of 21"),
        Row("memory bandwidth, on paper", f"{paper_gb_s:,.0f} GB/s",
            f"2 transfers x {memory_mhz:.0f} MHz x {bus_bits} bits / 8 (memory clock and bus "
            f"width from the device)"),
    ]
    peak_tflop_s = fp32_peak_tflop_s(facts)
    if peak_tflop_s is None:
        table.append(Row("FP32 peak, ridge point", "unknown",
                         f"FP32 lanes per SM of compute capability {capability} not in our table"))
    else:
        lanes = FP32_LANES_PER_SM[capability]
        table += [
            Row("FP32 peak", f"{peak_tflop_s:.1f} TFLOP/s",
                f"{sms} SMs x {lanes} lanes x 2 FLOP per FMA x {sm_ghz:.3f} GHz (peak clock)"),
            Row("ridge point", f"{peak_tflop_s * 1e3 / measured_gb_s:.1f} FLOP/byte",
                "FP32 peak / measured bandwidth"),
        ]
    clusters = facts["cluster_launch"] == "1"
    table += [
        Row("thread block clusters", "yes" if clusters else "no (Hopper and newer)", device),
        Row("a 50304-float row (201,216 B) in one block's shared memory",
            "fits" if optin >= LONG_ROW_BYTES else "does not fit",
            f"module 06's long rows; opt-in limit {optin:,} B"),
    ]
    return table


def print_table(console: Console, table_rows: list[Row]) -> None:
    table = Table(title="Your GPU", title_justify="left")
    for header in ("", "value", "how we know"):
        table.add_column(header)
    for row in table_rows:
        table.add_row(row.quantity, row.value, row.source)
    console.print(table)
    console.print("The notes work through these figures: notes/01_basics.md (roofline, Little's "
                  "law), notes/03b_execution_model.md (occupancy).")
