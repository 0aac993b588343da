"""The roofline of the learner's GPU, measured, and where each graded exercise sits under it.

Both roofs come from the course's own runs on that GPU, not from a datasheet:
- the memory roof is the device copy bandwidth (baseline `copy`), timed beside the memory-bound
  exercises in the same process;
- the compute roof is cuBLAS SGEMM (baseline `cublas_sgemm`), timed beside the matrix products:
  what FP32 CUDA-core code reaches on that GPU in practice;
- a second compute roof, the tensor cores', is cuBLAS's 16-bit GEMM (baseline `cublas_gemm_bf16`,
  module 05; `cublas_gemm_fp16` in a build for a T4, which has no bf16): the exercises timed
  against a 16-bit library (module 05's GEMMs, module 07's tensor-core attention against cuDNN or
  cuBLAS: a baseline whose name has `_bf16` or `_fp16`) are judged against it.
The best figure each baseline reached in the results is used. Where the GPU is at hand,
`grader gpu`'s figures (gpu_table.py) add the FP32 peak on paper, drawn above the measured roof,
and stand in for the copy bandwidth when no result has timed one.

An exercise is placed by its arithmetic intensity (FLOP per byte of the timed case's compulsory
DRAM traffic: the manifest's optional `intensity`) and its achieved FLOP/s. The recorded metric
gives one of the two quantities and the intensity the other:
- GB/s: FLOP/s = intensity x GB/s (the bytes are the metric's; median time x GB/s = bytes);
- TFLOP/s: the FLOP/s are the metric's; bytes = FLOPs / intensity.
The % of roofline needs the intensity only to know which roof applies: a GB/s exercise below the
ridge point is judged against the copy bandwidth, a TFLOP/s exercise above it against cuBLAS.
"""
from dataclasses import dataclass

from grader import gpu_table
from grader.manifest import Exercise
from grader.results import PerfCase

COPY = "copy"
SGEMM = "cublas_sgemm"
# The tensor cores' roof by baseline, and its 16-bit type: a run times one of them (the build's).
TENSOR = {"cublas_gemm_bf16": "bf16", "cublas_gemm_fp16": "fp16"}
GB = 1e9
TERA = 1e12


@dataclass(frozen=True)
class Roofs:
    copy_gb_s: float | None  # measured device copy bandwidth
    sgemm_tflop_s: float | None  # measured cuBLAS SGEMM rate
    paper_tflop_s: float | None = None  # the FP32 peak on paper (grader gpu), drawn only
    tensor_tflop_s: float | None = None  # measured cuBLAS 16-bit GEMM rate: the tensor cores' roof
    tensor_type: str = "bf16"  # its 16-bit type (TENSOR)

    @property
    def tensor_label(self) -> str:
        return f"cuBLAS {self.tensor_type}"

    @property
    def ridge(self) -> float | None:
        """FLOP per byte where the two roofs meet."""
        if not (self.copy_gb_s and self.sgemm_tflop_s):
            return None
        return self.sgemm_tflop_s * TERA / (self.copy_gb_s * GB)

    def roof_flop_s(self, intensity: float, tensor: bool = False) -> float | None:
        """The roof above `intensity`: the CUDA cores' (cuBLAS SGEMM), or with `tensor` the
        tensor cores' (cuBLAS's 16-bit GEMM), under the memory roof."""
        compute = self.tensor_tflop_s if tensor else self.sgemm_tflop_s
        roofs = [value for value in (
            self.copy_gb_s * GB * intensity if self.copy_gb_s else None,
            compute * TERA if compute else None) if value is not None]
        return min(roofs) if roofs else None


def measured_roofs(cases: list[PerfCase], gpu: dict[str, str] | None = None) -> Roofs:
    """The best copy and cuBLAS SGEMM figures among the baselines of `cases`; `gpu`, grader
    gpu's figures of the GPU at hand, if any, for the peak on paper and a missing copy figure."""
    def best(name: str) -> float | None:
        values = [case.baseline_value for case in cases
                  if case.baseline == name and case.baseline_value]
        return max(values) if values else None
    copy = best(COPY) or (gpu_table.copy_gb_s(gpu) if gpu else None)
    tensor = max(((value, kind) for name, kind in TENSOR.items() if (value := best(name))),
                 default=(None, "bf16"))
    paper = gpu_table.fp32_peak_tflop_s(gpu) if gpu else None
    return Roofs(copy, best(SGEMM), paper, *tensor)


@dataclass(frozen=True)
class Point:
    """An exercise's timed case on the roofline."""

    label: str
    intensity: float | None  # FLOP/byte; None when the manifest gives none
    flop_s: float | None  # achieved
    percent_of_roofline: float | None


def place(exercise: Exercise, case: PerfCase, roofs: Roofs) -> Point:
    intensity = exercise.intensity
    flop_s = None
    if case.value is not None and intensity is not None:
        if case.metric == "GB/s":
            flop_s = case.value * GB * intensity
        elif case.metric == "TFLOP/s":
            flop_s = case.value * TERA
    return Point(exercise.id, intensity, flop_s, percent_of_roofline(case, intensity, roofs))


def is_tensor_core(case: PerfCase) -> bool:
    """Whether the case is tensor-core work: timed against a 16-bit library (module 05's GEMMs,
    module 07's tensor-core attention; bf16, or fp16 on a T4), so the tensor cores' roof is the
    one above it."""
    return any(f"_{kind}" in case.baseline for kind in TENSOR.values())


def percent_of_roofline(case: PerfCase, intensity: float | None, roofs: Roofs) -> float | None:
    """The case's throughput as % of the roof above it (see the module's docstring)."""
    if case.value is None:
        return None
    if case.metric == "GB/s":
        ridge = roofs.ridge
        if roofs.copy_gb_s and (intensity is None or ridge is None or intensity <= ridge):
            return 100 * case.value / roofs.copy_gb_s
        if intensity is not None and roofs.sgemm_tflop_s:  # above the ridge: compute-bound
            return 100 * case.value * GB * intensity / (roofs.sgemm_tflop_s * TERA)
        return None
    if case.metric == "TFLOP/s":
        tensor = is_tensor_core(case)
        if intensity is not None:
            roof = roofs.roof_flop_s(intensity, tensor)
            return None if roof is None else 100 * case.value * TERA / roof
        compute = roofs.tensor_tflop_s if tensor else roofs.sgemm_tflop_s
        return 100 * case.value / compute if compute else None
    return None


def plot(points: list[Point], roofs: Roofs, gpu_name: str, path) -> None:
    """Draws the roofline and the points to `path` (PNG). Needs matplotlib."""
    import matplotlib
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    placed = [point for point in points if point.intensity is not None and point.flop_s]
    low, high = 1 / 32, 4096.0
    figure, axes = plt.subplots(figsize=(8, 5.5))
    xs = [low * (high / low) ** (step / 200) for step in range(201)]
    if roofs.copy_gb_s or roofs.sgemm_tflop_s:
        axes.plot(xs, [roofs.roof_flop_s(x) for x in xs], color="black", linewidth=2,
                  label=_roof_label(roofs))
    if roofs.tensor_tflop_s:
        axes.plot(xs, [roofs.roof_flop_s(x, tensor=True) for x in xs], color="black",
                  linestyle="--", linewidth=1.5,
                  label=f"tensor cores: {roofs.tensor_label} {roofs.tensor_tflop_s:.0f} TFLOP/s")
    if roofs.paper_tflop_s:
        axes.axhline(roofs.paper_tflop_s * TERA, color="grey", linestyle="--", linewidth=1,
                     label=f"FP32 peak on paper {roofs.paper_tflop_s:.1f} TFLOP/s")
    if roofs.ridge:
        axes.axvline(roofs.ridge, color="grey", linestyle=":", linewidth=1)
        axes.annotate(f"ridge {roofs.ridge:.0f} FLOP/B", (roofs.ridge, _bottom(placed, roofs)),
                      rotation=90, fontsize=8, color="grey", va="bottom", ha="right")
    for point in placed:
        x = max(point.intensity, low)
        axes.scatter([x], [point.flop_s], zorder=3)
        note = f"{point.label} ({point.percent_of_roofline:.0f}%)" \
            if point.percent_of_roofline is not None else point.label
        axes.annotate(note, (x, point.flop_s), textcoords="offset points", xytext=(5, 4),
                      fontsize=8)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_xlabel("arithmetic intensity (FLOP per byte of DRAM traffic)")
    axes.set_ylabel("FLOP/s achieved")
    # Two lines: a GPU's name ("NVIDIA H100 80GB HBM3") and the rest do not fit one at 8 inches.
    axes.set_title(f"Roofline of {gpu_name}\nmeasured by the course (copy bandwidth, cuBLAS SGEMM)",
                   fontsize=11)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _roof_label(roofs: Roofs) -> str:
    parts = []
    if roofs.copy_gb_s:
        parts.append(f"copy {roofs.copy_gb_s:,.0f} GB/s")
    if roofs.sgemm_tflop_s:
        parts.append(f"cuBLAS SGEMM {roofs.sgemm_tflop_s:.1f} TFLOP/s")
    return "roof: " + ", ".join(parts)


def _bottom(points: list[Point], roofs: Roofs) -> float:
    values = [point.flop_s for point in points if point.flop_s]
    if roofs.copy_gb_s:
        values.append(roofs.copy_gb_s * GB / 32)
    return min(values) if values else 1e9
