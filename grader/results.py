"""What grading one exercise produces: its status, the detail shown, and its timed cases."""
from dataclasses import MISSING, asdict, dataclass, field, fields

from grader.manifest import Exercise

PASS = "pass"
FAIL = "fail"
TODO = "todo"
BUILD_ERROR = "build error"
CRASH = "crash"
TIMEOUT = "timeout"
SKIPPED = "skipped"
STATUSES = (PASS, FAIL, TODO, BUILD_ERROR, CRASH, TIMEOUT, SKIPPED)

LEARNER = "learner"
SOLUTION = "solution"  # the readable reference solution
FAST = "fast"  # the tuned reference beside it (the manifest's fast_solution), where there is one
EMULATED = "emulated"  # the solution on the CPU emulator (dev/emu): no GPU needed


@dataclass(frozen=True)
class PerfCase:
    """One timed case: the checker's `perf_*` GoogleTest properties (CONTRIBUTING.md)."""

    label: str
    metric: str
    value: float | None
    baseline: str
    baseline_value: float | None
    ratio: float | None
    median_ms: float | None = None
    min_ms: float | None = None
    spread_pct: float | None = None
    samples: int | None = None
    baseline_median_ms: float | None = None
    # The GoogleTest name (Suite.Test): `grader profile` and `grader sanitize` select it by name.
    test: str = ""

    @classmethod
    def from_dict(cls, data: dict) -> "PerfCase":
        # Results saved before a field existed lack it: its default, else None.
        return cls(**{f.name: data.get(f.name, None if f.default is MISSING else f.default)
                      for f in fields(cls)})

    def value_text(self) -> str:
        return _with_unit(self.value, self.metric)

    def baseline_text(self) -> str:
        return f"{self.baseline} {_with_unit(self.baseline_value, self.metric)}".strip()

    def percent_text(self) -> str:
        return "-" if self.ratio is None else f"{100 * self.ratio:.1f}%"

    def meets(self, target: float) -> bool:
        return self.ratio is not None and self.ratio >= target


@dataclass(frozen=True)
class Outcome:
    """How a checker run (or its build) ended, per the classification table of CONTRIBUTING.md."""

    status: str
    detail: list[str] = field(default_factory=list)
    perf: list[PerfCase] = field(default_factory=list)
    # Every failure message, cleaned (--verbose and the JSON show them).
    failures: list[str] = field(default_factory=list)
    # The full compiler or checker output, for --verbose.
    output: str = ""
    # The GPU the checker ran on, as the harness names it ("NVIDIA H100 80GB HBM3"); "" when
    # it did not say (no GPU, a build error).
    device: str = ""


@dataclass(frozen=True)
class Result:
    exercise: Exercise
    variant: str
    outcome: Outcome
    exe: str
    duration_s: float | None = None

    @property
    def status(self) -> str:
        return self.outcome.status

    @property
    def passed(self) -> bool:
        return self.status == PASS

    @property
    def judged_on_stretch(self) -> bool:
        """A fast reference is there to show the stretch reachable: where the manifest has one,
        the fast row is judged on it. Everything else (a learner's file, the readable solution)
        is judged on the target, which is what the readable solution reaches."""
        return self.variant == FAST and self.exercise.stretch > 0

    @property
    def target_met(self) -> bool | None:
        """None when there is nothing to judge: no target, no timed case, or not a pass."""
        if not self.passed:
            return None
        return target_met(self.exercise, self.outcome.perf)

    @property
    def stretch_met(self) -> bool | None:
        """Whether every judged case reaches the manifest's stretch; None without a stretch, a
        timed case or a pass."""
        if not (self.passed and self.exercise.stretch > 0):
            return None
        return _all_reach(judged_cases(self.exercise, self.outcome.perf),
                          lambda case: self.exercise.stretch)

    @property
    def goal_met(self) -> bool | None:
        """What the row is judged on: the stretch for a fast reference that has one, else the
        target (`grader check` asks it of every reference)."""
        return self.stretch_met if self.judged_on_stretch else self.target_met

    def to_json(self) -> dict:
        return {
            "exercise": self.exercise.key,
            "variant": self.variant,
            "status": self.status,
            "detail": self.outcome.detail,
            "perf": [asdict(case) for case in self.outcome.perf],
            "target": self.exercise.target,
            "target_met": self.target_met,
            "stretch": self.exercise.stretch,
            "stretch_met": self.stretch_met,
            "exe": self.exe,
            "duration_s": None if self.duration_s is None else round(self.duration_s, 3),
            "device": self.outcome.device,
        }


def judged_cases(exercise: Exercise, perf: list[PerfCase]) -> list[PerfCase]:
    """The timed cases the target is judged on: those against the manifest's baseline and, where
    the manifest has `case_targets`, named there. Cases against other references (a naive kernel
    to beat, the copy bandwidth beside CUB, the fallback where the baseline's library is missing)
    are shown, not judged."""
    named = dict(exercise.case_targets)
    return [case for case in perf
            if case.baseline == exercise.baseline and (not named or case.label in named)]


def case_target(exercise: Exercise, case: PerfCase) -> float:
    """The ratio a judged case must reach: its own in `case_targets`, else the exercise's."""
    return dict(exercise.case_targets).get(case.label, exercise.target)


def target_met(exercise: Exercise, perf: list[PerfCase]) -> bool | None:
    """Met when every judged case (judged_cases) reaches its target; None when none is judged."""
    if exercise.target <= 0:
        return None
    return _all_reach(judged_cases(exercise, perf), lambda case: case_target(exercise, case))


def _all_reach(cases: list[PerfCase], ratio_of) -> bool | None:
    timed = [case for case in cases if case.ratio is not None]
    return all(case.meets(ratio_of(case)) for case in timed) if timed else None


def goal_text(exercise: Exercise, target_met: bool | None, stretch_met: bool | None,
              on_stretch: bool = False) -> str:
    """The target column: "met (>= 40%)", with the stretch beside it where the manifest has one
    ("met (>= 40%; stretch 45%)", "stretch met (>= 45%)"); a fast reference judged on the
    stretch (`on_stretch`) shows only the stretch. "-" when nothing is judged."""
    if on_stretch or stretch_met:
        if stretch_met is None:
            return "-"
        return f"{'stretch met' if stretch_met else 'stretch not met'} ({exercise.stretch_text})"
    if target_met is None:
        return "-"
    beside = f"; stretch {exercise.stretch:.0%}" if exercise.stretch > 0 else ""
    return f"{'met' if target_met else 'not met'} ({exercise.target_text}{beside})"


def format_number(value: float) -> str:
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _with_unit(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{format_number(value)} {unit}".strip()
