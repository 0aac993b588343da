"""`grader report`: the learner's results as a Markdown (or HTML) page with pictures.

Sections: one table per module (status, figure, % of baseline, % of the GPU's measured roofline,
target), the roofline of the learner's GPU with each graded exercise placed on it (roofline.py),
and each module's ladder where the module has one: `grader.ladder` (module 04's SGEMM ladder)
gives its table and its plot.

The pictures need matplotlib (the `report` optional group); without it the page has the tables
and says what to install. Everything is rendered from Section values through two Jinja2
templates, so that Markdown and HTML say the same.
"""
import importlib.util
import io
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from rich.console import Console

from grader import ladder, roofline
from grader.course import Course
from grader.manifest import Exercise, Module
from grader.results import PASS, SOLUTION, PerfCase, format_number, goal_text, judged_cases

INSTALL_PLOTS = ("The pictures need matplotlib: python3 -m pip install -e '.[plot]' "
                 "(then run `grader report` again).")
ROOFLINE_IMAGE = "roofline.png"
TEXT_WIDTH = 120  # of a table drawn as text

_templates = Environment(loader=PackageLoader("grader", "templates"), undefined=StrictUndefined,
                         trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                         autoescape=select_autoescape(["html.j2"]))


@dataclass(frozen=True)
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    images: list[str] = field(default_factory=list)  # file names beside the report
    preformatted: str = ""  # a table drawn as text (a ladder)


def plots_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def cases_of(entry: dict | None) -> list[PerfCase]:
    return [PerfCase.from_dict(case) for case in entry.get("perf", [])] if entry else []


def module_table(module: Module, entries: dict[str, dict], roofs: roofline.Roofs) -> Section:
    header = ["exercise", "status", "case", "figure", "% of baseline", "% of roofline", "target"]
    rows = []
    for exercise in module.exercises:
        entry = entries.get(exercise.key)
        if entry is None:
            rows.append([exercise.id, "not run", "", "", "", "", ""])
            continue
        cases = cases_of(entry) if entry["status"] == PASS else []
        target = _target(entry, exercise)
        if not cases:
            rows.append([exercise.id, entry["status"], "", "", "", "", target])
        for index, case in enumerate(cases):
            on_roof = roofline.percent_of_roofline(case, exercise.intensity, roofs)
            rows.append([exercise.id if index == 0 else "", entry["status"] if index == 0 else "",
                         case.label, case.value_text(), f"{case.baseline} {case.percent_text()}",
                         "-" if on_roof is None else f"{on_roof:.0f}%",
                         target if index == 0 else ""])
    return Section(f"{module.name}: {module.title}", header=header, rows=rows)


def _target(entry: dict, exercise: Exercise) -> str:
    return goal_text(exercise, entry.get("target_met"), entry.get("stretch_met"))


def roofline_section(course: Course, entries: dict[str, dict], roofs: roofline.Roofs,
                     gpu_name: str, out_dir: Path, plots: bool) -> Section:
    """The roofline picture and the table of what is on it."""
    points = []
    for exercise in course.exercises:
        entry = entries.get(exercise.key)
        if entry and entry["status"] == PASS:
            for case in judged_cases(exercise, cases_of(entry))[:1]:
                points.append(roofline.place(exercise, case, roofs))
    paragraphs = [_roofs_text(roofs)]
    unplaced = [point.label for point in points if not point.flop_s]
    if unplaced:
        paragraphs.append("Not drawn (no floating-point arithmetic, or no `intensity` in the "
                          f"manifest): {', '.join(unplaced)}; their % of roofline is against "
                          "the copy bandwidth.")
    images = []
    if not plots:
        paragraphs.append(INSTALL_PLOTS)
    elif points and (roofs.copy_gb_s or roofs.sgemm_tflop_s):
        roofline.plot(points, roofs, gpu_name, out_dir / ROOFLINE_IMAGE)
        images.append(ROOFLINE_IMAGE)
    header = ["exercise", "FLOP/byte", "achieved", "% of roofline"]
    rows = [[point.label, _maybe(point.intensity), _flops_text(point.flop_s),
             "-" if point.percent_of_roofline is None else f"{point.percent_of_roofline:.0f}%"]
            for point in points]
    return Section(f"Roofline of {gpu_name}", paragraphs, header, rows, images)


def _roofs_text(roofs: roofline.Roofs) -> str:
    parts = []
    if roofs.copy_gb_s:
        parts.append(f"memory roof: the device copy at {roofs.copy_gb_s:,.0f} GB/s")
    else:
        parts.append("no memory roof yet (grade a memory-bound exercise, e.g. 01/vector_add: "
                     "its copy baseline measures it)")
    if roofs.sgemm_tflop_s:
        parts.append(f"compute roof: cuBLAS SGEMM at {roofs.sgemm_tflop_s:.1f} TFLOP/s")
    else:
        parts.append("no compute roof yet (grade a matrix product, e.g. 01/naive_matmul: its "
                     "cuBLAS baseline measures it)")
    if roofs.tensor_tflop_s:
        parts.append(f"the tensor cores' compute roof: {roofs.tensor_label} at "
                     f"{roofs.tensor_tflop_s:.0f} TFLOP/s (module 05's tensor-core exercises are "
                     "judged against it)")
    ridge = f"; they meet at {roofs.ridge:.1f} FLOP/byte" if roofs.ridge else ""
    paper = (f" For scale, the FP32 peak on paper (`grader gpu`) is {roofs.paper_tflop_s:.1f} "
             "TFLOP/s." if roofs.paper_tflop_s else "")
    return ("Both roofs were measured on this GPU by the course's own runs: "
            + "; ".join(parts) + ridge + ". Each exercise sits at its arithmetic intensity "
            "(FLOP per byte of compulsory DRAM traffic) and its achieved FLOP/s; the % of "
            "roofline is its figure against the roof above it." + paper)


def _maybe(value: float | None) -> str:
    return "-" if value is None else format_number(value)


def _flops_text(flop_s: float | None) -> str:
    if not flop_s:
        return "-"
    if flop_s >= 1e12:
        return f"{format_number(flop_s / 1e12)} TFLOP/s"
    return f"{format_number(flop_s / 1e9)} GFLOP/s"


def ladder_sections(course: Course, modules: list[Module], entries: dict[str, dict],
                    out_dir: Path, plots: bool) -> list[Section]:
    """Each selected module's ladder, where grader.ladder knows one (ladder.LADDERS): its table
    as ladder.ladder_table draws it, and its plot beside the report."""
    sections = []
    for module in modules:
        if module.name not in ladder.LADDERS:
            continue
        rungs = ladder.read_ladder(course, module.name, entries)
        console = Console(width=TEXT_WIDTH, record=True, file=io.StringIO())
        console.print(ladder.ladder_table(module.name, rungs))
        images = []
        if plots and any(rung.points for rung in rungs):
            image = f"{module.name}_ladder.png"
            ladder.plot_ladder(module.name, rungs, out_dir / image)
            images.append(image)
        sections.append(Section(f"{module.name}: the ladder",
                                preformatted=_text_of(console), images=images))
    return sections


def _text_of(console: Console) -> str:
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()).strip("\n")


def build_report(course: Course, modules: list[Module], entries: dict[str, dict],
                 gpu_name: str, out_dir: Path, plots: bool, gpu: dict[str, str] | None = None
                 ) -> list[Section]:
    """The report's sections; `gpu`: grader gpu's figures of the GPU at hand, if any."""
    all_cases = [case for entry in entries.values() for case in cases_of(entry)]
    roofs = roofline.measured_roofs(all_cases, gpu)
    sections = [module_table(module, entries, roofs) for module in modules]
    sections.append(roofline_section(course, {key: entry for key, entry in entries.items()
                                              if any(key.startswith(f"{m.name}/")
                                                     for m in modules)},
                                     roofs, gpu_name, out_dir, plots))
    return sections + ladder_sections(course, modules, entries, out_dir, plots)


def measured_on(entries: dict[str, dict]) -> str:
    """The GPU most of `entries` were measured on (the checkers name it, results keep it)."""
    devices = [entry.get("device") or (entry.get("best") or {}).get("device")
               for entry in entries.values()]
    named = Counter(device for device in devices if device)
    return named.most_common(1)[0][0] if named else "the GPU these results were measured on"


def title_of(variant: str, gpu_name: str) -> str:
    whose = "The reference solutions" if variant == SOLUTION else "Your results"
    return f"{whose} on {gpu_name}"


def render(sections: list[Section], title: str, html: bool) -> str:
    template = _templates.get_template("report.html.j2" if html else "report.md.j2")
    return template.render(title=title, sections=sections,
                            generated=datetime.now().astimezone().isoformat(timespec="minutes"))
