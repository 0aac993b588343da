"""A module's optimization ladder, from the results the runs saved (`.grader/results.json`): each
rung's TFLOP/s and % of the baseline at each square size, as a table, and as a plot of TFLOP/s
against size (with matplotlib). `grader report 04` (grader/learner_report.py) shows module 04's,
the SGEMM ladder with module 01's naive_matmul at its foot and module 05's sgemm_warptile at its
top; `grader report 05` module 05's tensor-core ladder against cuBLAS in the build's 16-bit type
(bf16, fp16 on a T4)."""
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table
from rich.text import Text

from grader.course import Course
from grader.results import PASS


@dataclass(frozen=True)
class Ladder:
    """Which rungs a module's ladder has, and what they are compared with."""

    # The baseline of every rung, by its name in the table and the plot: cases recorded under a
    # name or one starting with it (04's sweep sizes are `cublas_sgemm_sweep`, so that its target
    # is judged on 4096^3 alone). Several where the build chooses the baseline: module 05's
    # tensor-core rungs are timed against cuBLAS in bf16, or fp16 in a build for a T4.
    baselines: dict[str, str]
    foot: tuple[str, ...] = ()  # rungs of other modules (module/id) below the module's own ...
    top: tuple[str, ...] = ()  # ... and above them: shown where their module exists
    exercises: tuple[str, ...] | None = None  # the module's own rungs (ids); None: all of them


# The modules that have a ladder.
LADDERS = {
    "04_sgemm": Ladder({"cublas_sgemm": "cuBLAS"}, foot=("01_basics/naive_matmul",),
                       top=("05_gemm_advanced/sgemm_warptile",)),
    "05_gemm_advanced": Ladder(
        {"cublas_gemm_bf16": "cuBLAS bf16", "cublas_gemm_fp16": "cuBLAS fp16"},
        exercises=("wmma_gemm", "mma_gemm", "mma_pipeline", "wgmma_gemm")),
}
# A timed case on a square product, labelled "MxNxK" by the checkers: "4096x4096x4096".
SQUARE_CASE = re.compile(r"^(\d+)x\1x\1$")


@dataclass(frozen=True)
class Point:
    """One rung at one size: its rate and the baseline's, timed in the same process."""

    size: int
    value: float
    baseline_value: float | None
    baseline: str  # which of the ladder's baselines (its name in Ladder.baselines)

    @property
    def ratio(self) -> float | None:
        return self.value / self.baseline_value if self.baseline_value else None


@dataclass(frozen=True)
class Rung:
    key: str                    # module/id
    status: str                 # of its last run, "-" if it never ran
    points: tuple[Point, ...]   # by size; only when the last run passed


def read_ladder(course: Course, module: str, entries: dict[str, dict]) -> list[Rung]:
    """The rungs of `module`'s ladder, foot first. `entries`: one variant's saved results
    ({"module/id": entry}, as grader.state.load_results gives them)."""
    ladder = LADDERS[module]
    exercises = next(m.exercises for m in course.modules if m.name == module)
    own = [exercise.key for exercise in exercises
           if ladder.exercises is None or exercise.id in ladder.exercises]
    modules = {m.name for m in course.modules}
    foot, top = ([key for key in keys if key.split("/")[0] in modules]
                 for keys in (ladder.foot, ladder.top))
    return [_rung(key, entries.get(key), ladder.baselines) for key in (*foot, *own, *top)]


def baseline_curve(rungs: list[Rung]) -> dict[int, float]:
    """The baseline's rate at each size: the median of what each rung's run measured beside it."""
    by_size: dict[int, list[float]] = {}
    for rung in rungs:
        for point in rung.points:
            if point.baseline_value:
                by_size.setdefault(point.size, []).append(point.baseline_value)
    return {size: statistics.median(values) for size, values in sorted(by_size.items())}


def baseline_label(module: str, rungs: list[Rung]) -> str:
    """The name of the baseline the rungs' points were timed against (the first of the ladder's
    when none was, or each of those that were)."""
    names = LADDERS[module].baselines
    timed = {point.baseline for rung in rungs for point in rung.points}
    return " / ".join(label for name, label in names.items() if name in timed) or \
        next(iter(names.values()))


def ladder_table(module: str, rungs: list[Rung], unit: str = "TFLOP/s") -> Table:
    """A row per rung (and one for the baseline), a column per size: rate and % of the baseline."""
    label = baseline_label(module, rungs)
    baseline = baseline_curve(rungs)
    sizes = sorted({point.size for rung in rungs for point in rung.points} | set(baseline))
    table = Table(box=None, header_style="bold", pad_edge=False,
                  title=f"{module}: {unit} (% of {label} in the same run), M = N = K",
                  title_justify="left")
    table.add_column(module, no_wrap=True)
    table.add_column("status", no_wrap=True)
    for size in sizes:
        table.add_column(str(size), justify="right", no_wrap=True)
    for rung in rungs:
        at = {point.size: point for point in rung.points}
        table.add_row(rung.key, Text(rung.status, style="green" if rung.status == PASS else ""),
                      *(_cell(at.get(size)) for size in sizes))
    table.add_row(label, "", *(_number(baseline[size]) if size in baseline else "-"
                                        for size in sizes))
    return table


def plot_ladder(module: str, rungs: list[Rung], path: Path, unit: str = "TFLOP/s") -> None:
    """Writes the plot (PNG) of each passing rung's rate against size, and the baseline's.
    Raises ImportError when matplotlib is not installed."""
    from matplotlib.figure import Figure  # optional: the `plot` extra of pyproject.toml

    label = baseline_label(module, rungs)
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    for rung in rungs:
        if rung.points:
            axes.plot([p.size for p in rung.points], [p.value for p in rung.points], marker="o",
                      label=rung.key)
    baseline = baseline_curve(rungs)
    if baseline:
        axes.plot(list(baseline), list(baseline.values()), color="black", linestyle="--",
                  marker="s", label=label)
    sizes = sorted({point.size for rung in rungs for point in rung.points} | set(baseline))
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [str(size) for size in sizes])
    axes.set_xlabel("M = N = K")
    axes.set_ylabel(unit)
    axes.set_ylim(bottom=0)
    axes.set_title(f"{module}: each rung against {label}")
    axes.grid(True, alpha=0.3)
    axes.legend(loc="upper left", fontsize="small")
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def _rung(key: str, entry: dict | None, baselines: dict[str, str]) -> Rung:
    if entry is None:
        return Rung(key, "-", ())
    if entry["status"] != PASS:
        return Rung(key, entry["status"], ())
    points = {}
    for case in entry["perf"]:
        # The timed case's name, saved as "label" (as "case" in older results).
        square = SQUARE_CASE.match(case.get("label") or case.get("case") or "")
        baseline = next((name for name in baselines if case["baseline"].startswith(name)), None)
        if square and baseline and case["value"] is not None:
            size = int(square[1])
            points[size] = Point(size, case["value"], case["baseline_value"], baseline)
    return Rung(key, PASS, tuple(points[size] for size in sorted(points)))


def _cell(point: Point | None) -> str:
    if point is None:
        return "-"
    ratio = point.ratio
    return _number(point.value) + ("" if ratio is None else f" ({100 * ratio:.0f}%)")


def _number(value: float) -> str:
    return f"{value:.1f}" if value >= 1 else f"{value:.2f}"
