"""`grader profile`: an exercise's timed case under Nsight Compute (`ncu`), in plain words.

One launch of the exercise's own kernel is profiled (the kernels its stub or solution defines,
found in the source; not the baseline, not the harness's L2 flush), inside the checker's timed
test, with a small set of sections. The report is then read back through `ncu --import` as CSV
(the raw metrics page and the source page) and summarized: DRAM, L2, L1 and SM throughput as %
of peak with the busiest unit, occupancy and its limiter, shared-memory bank conflicts, the top
warp-stall reasons and the source line with the most stall samples (the course builds with
-lineinfo). The parsing functions take ncu's text
and nothing else, so they are tested on recorded output (grader/tests/fixtures/ncu/).
"""
import csv
import io
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from grader.build import Log
from grader.cases import built_tree, checker_cases, kernel_names
from grader.course import Course
from grader.errors import UserError
from grader.manifest import Exercise
from grader.results import FAIL, FAST, PASS, SOLUTION, PerfCase, judged_cases
from grader.tools import require_toolkit_program

SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats",
            "MemoryWorkloadAnalysis_Tables", "SourceCounters")
# Shared-memory instructions and the wavefronts they took, for when the source view is missing:
# one wavefront per 32-bit access instruction is conflict-free, n is an n-way bank conflict.
SHARED_METRICS = ("smsp__sass_inst_executed_op_shared_ld.sum",
                  "smsp__sass_inst_executed_op_shared_st.sum",
                  "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                  "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
PROFILES_DIR = "profiles"
NCU_TIMEOUT_S = 600
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
PERMISSION_FIX = """\
ncu may not read the GPU's performance counters here (ERR_NVGPUCTRPERM): the driver keeps them
for administrators. Either
  - profile as root:  sudo env PATH="$PATH" grader profile {key}{flag}
  - or allow every user, once (Linux, needs root, then a reboot):
      echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' | sudo tee /etc/modprobe.d/nvidia-profiling.conf
      sudo update-initramfs -u     (Debian/Ubuntu; dracut -f on Fedora)
  - on Windows: NVIDIA Control Panel > Desktop > Enable Developer Settings, then Developer >
    Manage GPU Performance Counters > Allow access to all users.
A rented or cloud machine where you are not root: ask its administrator, or use a notebook
(notebooks/free_gpu.ipynb), where you are root.
(`grader doctor` checks this permission.)"""

# What each warp-stall reason means, in one line (names as ncu's metrics spell them).
STALL_MEANINGS = {
    "long_scoreboard": "waiting for a load from global or local memory: memory latency (more "
                       "loads in flight per thread, or more warps, hide it)",
    "short_scoreboard": "waiting for shared memory or a special-math result (bank conflicts "
                        "make it longer)",
    "barrier": "waiting at __syncthreads() for the other warps of the block",
    "membar": "waiting at a memory fence",
    "mio_throttle": "the queue for shared-memory and special-math instructions is full (fewer, "
                    "wider shared accesses, or no bank conflicts, relieve it)",
    "lg_throttle": "the queue for global-memory instructions is full: many small loads or "
                   "stores (float4 makes them fewer)",
    "tex_throttle": "the texture/L1 unit is saturated",
    "math_pipe_throttle": "the arithmetic pipe is busy: the kernel uses the ALUs fully",
    "wait": "a fixed-latency dependency: the next instruction needs a result a few cycles "
            "away (normal in arithmetic code)",
    "dispatch_stall": "the dispatcher could not issue the selected instruction",
    "drain": "at exit, waiting for the warp's stores to drain to memory",
    "imc_miss": "waiting for the constant cache (kernel arguments, __constant__ data)",
    "branch_resolving": "waiting for a branch target to be computed",
    "no_instruction": "the next instruction is not in the instruction cache",
    "no_instructions": "the next instruction is not in the instruction cache",
    "gmma": "waiting for a warpgroup matrix multiply (wgmma) to finish",
    "warpgroup_arrive": "waiting at a warpgroup arrive/wait for wgmma operands",
    "not_selected": "ready, but another warp was chosen: enough warps are eligible (harmless)",
    "selected": "issuing an instruction (not a stall)",
    "sleeping": "the warp sleeps (__nanosleep)",
    "misc": "a reason ncu does not break down further",
}
NOT_STALLS = {"selected", "not_selected"}
# The source page's short labels of the same reasons.
STALL_LABELS = {"stall_barrier": "barrier", "stall_branch_resolving": "branch_resolving",
                "stall_dispatch": "dispatch_stall", "stall_drain": "drain", "stall_imc": "imc_miss",
                "stall_lg": "lg_throttle", "stall_long_sb": "long_scoreboard",
                "stall_math": "math_pipe_throttle", "stall_membar": "membar",
                "stall_mio": "mio_throttle", "stall_misc": "misc", "stall_no_inst": "no_instruction",
                "stall_not_selected": "not_selected", "stall_selected": "selected",
                "stall_short_sb": "short_scoreboard", "stall_sleep": "sleeping",
                "stall_tex": "tex_throttle", "stall_wait": "wait"}
# The stall-reason metric families, best first: ncu's average warps per issued instruction
# (WarpStateStats) and the PC-sampling counts (SourceCounters). Either ranks the reasons.
STALL_FAMILIES = (re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio$"),
                  re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+)$"))
# The source page's stall-sample column, by the names ncu has used.
SAMPLE_COLUMNS = ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)",
                  "# Samples")
LATENCY_BOUND_PCT = 60.0
# Shared-memory wavefronts per wavefront needed (per 32-bit instruction, without the source
# view) from which a bank conflict is reported: ncu counts a few extra that are no conflict.
CONFLICT_WAYS = 1.5
TOP_STALLS = 3


@dataclass(frozen=True)
class KernelProfile:
    """One profiled launch, from the raw metrics page (names as ncu spells them)."""

    kernel: str
    metrics: dict[str, float]
    text: dict[str, str]  # the non-numeric columns (grid and block size, device)

    def get(self, name: str) -> float | None:
        return self.metrics.get(name)


@dataclass(frozen=True)
class SourceLine:
    file: str
    line: int
    source: str
    samples: float  # warp-stall samples
    reasons: dict[str, float] = field(default_factory=dict)
    # Shared-memory wavefronts the line's accesses took, and the fewest they could have taken:
    # the excess is bank conflicts.
    shared_wavefronts: float = 0.0
    shared_ideal: float = 0.0


def parse_raw_page(text: str) -> list[KernelProfile]:
    """`ncu --import R --page raw --csv --print-units base`: a header row, a units row, then one
    row per profiled launch."""
    rows = [row for row in csv.reader(io.StringIO(_csv_part(text))) if row]
    if not rows:
        return []
    header = rows[0]
    body = rows[1:]
    if body and body[0] and _is_units_row(header, body[0]):
        body = body[1:]
    profiles = []
    for row in body:
        cells = dict(zip(header, row))
        numbers = {name: value for name, value in ((n, _number(v)) for n, v in cells.items())
                   if value is not None}
        texts = {name: value for name, value in cells.items() if name not in numbers}
        profiles.append(KernelProfile(cells.get("Kernel Name", ""), numbers, texts))
    return profiles


def parse_source_page(text: str) -> list[SourceLine]:
    """`ncu --import R --page source --csv --print-source cuda,sass`: per file, a "File Path"
    row, a "Line No" header, then each CUDA line (its number first) followed by its SASS
    instructions (the number empty, the address in the third column). A line's counters are its
    instructions' summed; where ncu leaves them out, they are summed here."""
    lines, header, path = [], None, ""
    for row in csv.reader(io.StringIO(_csv_part(text))):
        if not row:
            continue
        first = row[0].strip()
        if first == "File Path":
            path = row[1].strip() if len(row) > 1 else ""
        elif first == "Line No":
            header = row
        elif header and first.isdigit():
            source = row[1].strip() if len(row) > 1 else ""
            lines.append(_LineCounters(path, int(first), source, _counters(header, row)))
        elif header and lines and len(row) > 2 and row[2].strip().startswith("0x"):
            lines[-1].instructions.append(_counters(header, row))
    return [line.result() for line in lines]


@dataclass(frozen=True)
class _Counters:
    samples: float
    reasons: dict[str, float]
    shared_wavefronts: float
    shared_ideal: float


@dataclass
class _LineCounters:
    file: str
    line: int
    source: str
    own: _Counters
    instructions: list[_Counters] = field(default_factory=list)

    def result(self) -> SourceLine:
        own = self.own
        if not (own.samples or own.shared_wavefronts) and self.instructions:
            # No aggregate on the line itself: its instructions' sum.
            reasons = {}
            for counters in self.instructions:
                for reason, value in counters.reasons.items():
                    reasons[reason] = reasons.get(reason, 0.0) + value
            own = _Counters(sum(c.samples for c in self.instructions), reasons,
                            sum(c.shared_wavefronts for c in self.instructions),
                            sum(c.shared_ideal for c in self.instructions))
        return SourceLine(self.file, self.line, self.source, own.samples, own.reasons,
                          own.shared_wavefronts, own.shared_ideal)


def _counters(header: list[str], row: list[str]) -> _Counters:
    """The counters of a source-page row that the summary uses."""
    cells = dict(zip(header[4:], row[4:]))
    reasons = {}
    for name, text in cells.items():
        reason, value = _stall_name(name), _number(text)
        if reason and value:
            reasons[reason] = value
    return _Counters(_first_number(cells, SAMPLE_COLUMNS) or 0.0, reasons,
                     _first_number(cells, ("L1 Wavefronts Shared",)) or 0.0,
                     _first_number(cells, ("L1 Wavefronts Shared Ideal",)) or 0.0)


def stall_reasons(profile: KernelProfile) -> list[tuple[str, float]]:
    """(reason, share of all stalls) from the best family present, largest first."""
    for family in STALL_FAMILIES:
        found = {}
        for name, value in profile.metrics.items():
            match = family.match(name)
            if match and not match[1].endswith("_not_issued"):
                found[match[1]] = found.get(match[1], 0.0) + value
        stalls = {reason: value for reason, value in found.items() if reason not in NOT_STALLS}
        total = sum(stalls.values())
        if total > 0:
            return sorted(((reason, value / total) for reason, value in stalls.items()),
                          key=lambda item: -item[1])
    return []


def hottest_line(lines: list[SourceLine]) -> tuple[SourceLine, float] | None:
    """The line with the most stall samples and its share of them."""
    total = sum(line.samples for line in lines)
    if total <= 0:
        return None
    line = max(lines, key=lambda item: item.samples)
    return line, line.samples / total


def summarize(profile: KernelProfile, lines: list[SourceLine],
              strip_root=lambda path: path) -> list[str]:
    """The plain-words summary of one profiled launch."""
    out = [f"kernel      {profile.kernel}{_launch_shape(profile)}"]
    duration = profile.get("gpu__time_duration.sum")
    if duration:
        out.append(f"time        {duration / 1e6:.3g} ms (one launch, at the profiler's fixed "
                   "clock: compare the percentages, not this time, with `grader run`)")
    out.append(_throughput_line(profile))
    out.append(_occupancy_line(profile))
    out.append(_bank_conflict_line(profile, lines, strip_root))
    stalls = stall_reasons(profile)
    if stalls:
        out.append("stalls      what the warps waited on most (share of stalled warp cycles):")
        for reason, share in stalls[:TOP_STALLS]:
            meaning = STALL_MEANINGS.get(reason, "see the Nsight Compute documentation")
            out.append(f"              {share:4.0%} {reason}: {meaning}")
    else:
        out.append("stalls      not in the report")
    hot = hottest_line(lines)
    if hot:
        line, share = hot
        where = f"{strip_root(line.file)}:{line.line}"
        top = max(line.reasons, key=line.reasons.get) if line.reasons else None
        because = f", mostly {top}" if top else ""
        out.append(f"hottest     {where} ({share:.0%} of the stall samples{because})")
        if line.source:
            out.append(f"              {line.source}")
    else:
        out.append("hottest     no source line (the report has no source view: was it built "
                   "with -lineinfo?)")
    return out


# Each unit's throughput as % of its peak (SpeedOfLight). DRAM has had two names across ncu
# versions (the first found is used).
MEMORY_UNITS = (("DRAM", ("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                          "dram__throughput.avg.pct_of_peak_sustained_elapsed")),
                ("L2", ("lts__throughput.avg.pct_of_peak_sustained_elapsed",)),
                ("L1/shared memory", ("l1tex__throughput.avg.pct_of_peak_sustained_elapsed",)))
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def _throughput_line(profile: KernelProfile) -> str:
    units = {}
    for unit, names in MEMORY_UNITS:
        value = next((profile.get(name) for name in names if profile.get(name) is not None),
                     None)
        if value is not None:
            units[unit] = value
    sm = profile.get(SM_THROUGHPUT)
    if not units or sm is None:
        return "throughput  not in the report"
    figures = ", ".join(f"{unit} {value:.0f}%" for unit, value in units.items())
    busiest = max(units, key=units.get)
    if max(units[busiest], sm) < LATENCY_BOUND_PCT:
        verdict = ("nothing is busy: latency-bound, too little work in flight (see occupancy "
                   "and stalls)")
    elif units[busiest] >= sm:
        verdict = f"memory-bound: {busiest} is the busiest unit"
    else:
        verdict = "compute-bound: the SMs are the busiest unit"
    return f"throughput  {figures} of peak; SM {sm:.0f}%: {verdict}"


def _occupancy_line(profile: KernelProfile) -> str:
    achieved = profile.get("sm__warps_active.avg.pct_of_peak_sustained_active")
    theoretical = profile.get("sm__maximum_warps_per_active_cycle_pct")
    if achieved is None:
        return "occupancy   not in the report"
    text = f"occupancy   {achieved:.1f}% of the warps an SM can hold are active"
    if theoretical is not None:
        text += f" (at most {theoretical:.0f}% for this launch"
        limiter = occupancy_limiter(profile)
        text += f", limited by {limiter})" if limiter else ")"
    return text


def occupancy_limiter(profile: KernelProfile) -> str | None:
    """What caps the blocks per SM: the smallest of ncu's four block limits."""
    limits = {
        "registers": "launch__occupancy_limit_registers",
        "shared memory": "launch__occupancy_limit_shared_mem",
        "warps per SM (the block size)": "launch__occupancy_limit_warps",
        "blocks per SM": "launch__occupancy_limit_blocks",
    }
    values = {name: profile.get(metric) for name, metric in limits.items()}
    known = {name: value for name, value in values.items() if value is not None}
    if not known:
        return None
    fewest = min(known.values())
    names = [name for name, value in known.items() if value == fewest]
    details = {
        "registers": f"{_int(profile.get('launch__registers_per_thread'))} registers per thread",
        "shared memory": f"{_int(_shared_bytes(profile))} bytes of shared memory per block",
    }
    parts = [f"{name} ({details[name]})" if name in details else name for name in names]
    return f"{' and '.join(parts)}: {int(fewest)} blocks per SM"


def _shared_bytes(profile: KernelProfile) -> float | None:
    parts = [profile.get("launch__shared_mem_per_block_static"),
             profile.get("launch__shared_mem_per_block_dynamic")]
    known = [part for part in parts if part is not None]
    return sum(known) if known else None


def _bank_conflict_line(profile: KernelProfile, lines: list[SourceLine],
                        strip_root=lambda path: path) -> str:
    """Bank conflicts from the source view (wavefronts against the fewest the accesses need,
    whatever their width), else from the kernel's metrics (per 32-bit instruction)."""
    wavefronts = sum(line.shared_wavefronts for line in lines)
    ideal = sum(line.shared_ideal for line in lines)
    if wavefronts and ideal:
        if wavefronts < CONFLICT_WAYS * ideal:
            return (f"shared      {_int(wavefronts)} wavefronts, as many as the accesses need: "
                    "no bank conflicts")
        worst = max(lines, key=lambda line: line.shared_wavefronts - line.shared_ideal)
        ways = worst.shared_wavefronts / worst.shared_ideal if worst.shared_ideal else 0
        return (f"shared      {_int(wavefronts)} wavefronts where {_int(ideal)} would do "
                f"({wavefronts / ideal:.1f}x): bank conflicts, the worst at "
                f"{strip_root(worst.file)}:{worst.line} ({ways:.0f}-way)")
    parts = []
    for op, word in (("ld", "loads"), ("st", "stores")):
        instructions = profile.get(f"smsp__sass_inst_executed_op_shared_{op}.sum")
        op_wavefronts = profile.get(f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum")
        if not instructions or op_wavefronts is None:
            continue
        ways = op_wavefronts / instructions
        # A little over 1 is normal: ncu counts a few extra wavefronts that are no conflict.
        verdict = ("no bank conflicts to speak of" if ways < CONFLICT_WAYS
                   else f"a {ways:.0f}-way bank conflict")
        parts.append(f"{word} {ways:.1f} wavefronts per instruction, 1 for 32-bit accesses "
                      f"without conflicts ({verdict})")
    if not parts:
        return "shared      no shared-memory accesses"
    return "shared      " + "; ".join(parts)


def _launch_shape(profile: KernelProfile) -> str:
    grid, block = profile.text.get("Grid Size"), profile.text.get("Block Size")
    return f", grid {grid}, block {block}" if grid and block else ""


def _stall_name(column: str) -> str | None:
    """A per-line stall column, as ncu labels it (`stall_long_sb`) or names its metric
    (`smsp__pcsamp_warps_issue_stalled_long_scoreboard`), as a reason name; None for others and
    for the not-issued subsets."""
    if "not_issued" in column or "Not Issued" in column:
        return None
    match = STALL_FAMILIES[1].match(column)
    if match:
        return match[1]
    return STALL_LABELS.get(column.strip())


def _csv_part(text: str) -> str:
    """ncu's CSV without the `==PROF==`/`==WARNING==` lines it may print around it."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("=="))


def _is_units_row(header: list[str], row: list[str]) -> bool:
    cells = dict(zip(header, row))
    return cells.get("ID", "x") == "" or cells.get("Kernel Name", "x") == ""


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def _first_number(cells: dict[str, str], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in cells and (value := _number(cells[name])) is not None:
            return value
    return None


def _int(value: float | None) -> str:
    return "?" if value is None else f"{value:,.0f}"


# --- running ncu --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfileRun:
    exercise: Exercise
    variant: str
    case: PerfCase
    kernels: list[str]
    report: Path  # the .ncu-rep
    profiles: list[KernelProfile]
    lines: list[SourceLine]


def choose_case(exercise: Exercise, timed: list[PerfCase], label: str | None) -> PerfCase:
    """The case named `label`, else the first timed against the manifest's baseline."""
    if not timed:
        raise UserError(f"{exercise.key} has no timed case to profile")
    if label is not None:
        for case in timed:
            if label in (case.label, case.test):
                return case
        names = ", ".join(f"'{case.label}'" for case in timed)
        raise UserError(f"{exercise.key} has no timed case '{label}': its cases are {names}")
    return (judged_cases(exercise, timed) or timed)[0]


def ncu_command(ncu: str, exe: Path, test: str, kernels: list[str], report: Path,
                launches: int) -> list[str]:
    names = "|".join(re.escape(kernel) for kernel in kernels)
    command = [ncu, "--kernel-name-base", "function", "--kernel-name", f"regex:^({names})(<.*)?$",
               "--launch-count", str(launches), "--import-source", "yes", "--force-overwrite",
               "--export", str(report)]
    for section in SECTIONS:
        command += ["--section", section]
    command += ["--metrics", ",".join(SHARED_METRICS)]
    return command + [str(exe), f"--gtest_filter={test}", "--gtest_color=no"]


def profile(course: Course, exercise: Exercise, variant: str, log: Log, case_label: str | None,
            kernel: str | None, launches: int) -> ProfileRun:
    ncu = require_toolkit_program("ncu", "ncu (Nsight Compute)")
    tree = built_tree(course, exercise, variant, log)
    cases = checker_cases(tree, exercise, log)
    if cases.status not in (PASS, FAIL):
        raise UserError(f"{exercise.key} reports {cases.status}: there is nothing to profile until "
                        f"its checker runs your kernel (`grader run {exercise.key}` says why)")
    case = choose_case(exercise, cases.timed, case_label)
    source = course.source(exercise, variant)
    kernels = [kernel] if kernel else kernel_names(source)
    if not kernels:
        raise UserError(f"no __global__ kernel found in {course.relative(source)}: name the one "
                        "to profile with --kernel")
    report = tree.path / PROFILES_DIR / f"{tree.target(exercise)}.ncu-rep"
    report.parent.mkdir(parents=True, exist_ok=True)
    command = ncu_command(ncu, tree.executable(exercise), case.test, kernels, report, launches)
    log(f"profiling {', '.join(kernels)} in {case.test} ({case.label}) under ncu")
    output = _run_ncu(command, tree.path)
    if not report.is_file() and "metric" in output.lower():
        # An ncu without one of the shared-memory metrics: the sections alone still say most.
        log("ncu refused a metric; profiling with its sections only")
        output = _run_ncu([part for part in command if part not in ("--metrics",
                                                                   ",".join(SHARED_METRICS))],
                          tree.path)
    if PERMISSION_ERROR in output:
        flag = {SOLUTION: " --solutions", FAST: " --fast"}.get(variant, "")
        raise UserError(PERMISSION_FIX.format(key=exercise.key, flag=flag))
    if not report.is_file():
        raise UserError(no_profile_message(output, kernels))
    raw = _import_page(ncu, report, ["--page", "raw", "--csv", "--print-units", "base"])
    source_page = _import_page(ncu, report, ["--page", "source", "--csv", "--print-source",
                                             "cuda,sass"])
    profiles = parse_raw_page(raw)
    if not profiles:
        raise UserError(no_profile_message(output, kernels))
    return ProfileRun(exercise, variant, case, kernels, report, profiles,
                      parse_source_page(source_page))


def _run_ncu(command: list[str], cwd: Path) -> str:
    try:
        run = subprocess.run(command, cwd=cwd, capture_output=True, text=True, errors="replace",
                             timeout=NCU_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise UserError(f"ncu did not finish in {NCU_TIMEOUT_S} s") from None
    return run.stdout + run.stderr


def no_profile_message(output: str, kernels: list[str]) -> str:
    errors = [line for line in output.splitlines() if "==ERROR==" in line or "==WARNING==" in line]
    why = f" (ncu said: {errors[0].strip()})" if errors else ""
    return (f"ncu profiled no launch of {', '.join(kernels)}{why}: if your kernel has another "
            "name, pass it with --kernel NAME")


def _import_page(ncu: str, report: Path, page: list[str]) -> str:
    run = subprocess.run([ncu, "--import", str(report), *page], capture_output=True, text=True,
                         errors="replace", timeout=NCU_TIMEOUT_S)
    return run.stdout
