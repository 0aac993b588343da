"""Reading and validating `modules/NN_topic/module.toml` (the format is in CONTRIBUTING.md)."""
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

DEFAULT_TIMEOUT_S = 120.0
MIN_HINTS = 2
# What grades an exercise: its GoogleTest checker, (module 08's train_gpt) the GPT trainer run
# with the learner's kernels against the reference (grader/trainer.py), or (module 08's
# torch_ops) PyTorch's checks of the learner's kernels as custom operators (grader/torch_ops.py).
CHECKER = "checker"
TRAINER = "trainer"
TORCH = "torch"
KINDS = (CHECKER, TRAINER, TORCH)
MODULE_NAME = re.compile(r"^[0-9]{2}_[a-z0-9_]+$")
EXERCISE_ID = re.compile(r"^[a-z][a-z0-9_]*$")

# key: (accepted types, how a problem names them)
MODULE_SCHEMA = {"title": (str, "a string"), "week": (int, "an integer")}
EXERCISE_SCHEMA = {
    "id": (str, "a string"),
    "title": (str, "a string"),
    "file": (str, "a string"),
    "checker": (str, "a string"),
    "min_sm": (int, "an integer"),
    "metric": (str, "a string"),
    "baseline": (str, "a string"),
    "target": ((int, float), "a number"),
    "timeout_s": ((int, float), "a number"),
    "intensity": ((int, float), "a number"),
    "hints": (list, "a list of strings"),
    "fast_solution": (str, "a string"),
    "fast_arch": (str, "a string"),
    "min_gpus": (int, "an integer"),
    "case_targets": (dict, "a table of timed-case label = ratio"),
    "library": (str, "a string"),
    "stretch": ((int, float), "a number"),
    "kind": (str, "a string"),
}
OPTIONAL_EXERCISE_KEYS = {"timeout_s", "intensity", "fast_solution", "fast_arch", "min_gpus",
                          "case_targets", "library", "stretch", "kind"}
# What `fast_arch` may say: the fast reference has a path in sm_90a's instructions (wgmma, TMA),
# built for 90a where the tree builds for 90 (cmake/Course.cmake), its readable path elsewhere.
FAST_ARCHES = ("90a",)
# The libraries an exercise may be allowed to call (`library`): linked into its learner target
# and let through the library ban (grader/library_ban.py). NCCL: module 11's data_parallel_step
# hands its buckets to NCCL's all-reduce, and is timed against the same all-reduce unoverlapped.
EXERCISE_LIBRARIES = ("nccl",)
# A trainer (or torch) exercise has no checker, and none of the keys that describe one's timed
# cases.
NOT_FOR_TRAINER = ("checker", "fast_solution", "fast_arch", "case_targets", "intensity", "min_gpus",
                   "library", "stretch")

# The keys cmake/Course.cmake reads with a regular expression (it has no TOML parser), matched the
# way it matches them: at the start of a line, on one line.
CMAKE_KEYS = ("id", "file", "checker", "min_sm", "min_gpus", "fast_solution", "fast_arch", "library",
              "kind")
CMAKE_LINE = re.compile(
    r'^(?:(id|file|checker|fast_solution|fast_arch|library|kind) = "([^"\n]*)"'
    r'|(min_sm|min_gpus) = ([0-9]+))')
CMAKE_ENTRY = "[[exercise]]"


# An exercise for an architecture's own instructions (min_sm 90 or more: Hopper's wgmma and
# setmaxnreg) builds for the arch-specific target, 90a where the tree builds for 90
# (cmake/Course.cmake, course_exercise_architectures). Such code runs on that compute capability
# alone: a newer GPU (sm_100) refuses it, so it runs where the GPU's is exactly min_sm.
ARCH_SPECIFIC_MIN_SM = 90


@dataclass(frozen=True)
class Exercise:
    module: str
    id: str
    title: str
    file: str
    checker: str
    min_sm: int
    metric: str
    baseline: str
    target: float
    timeout_s: float
    hints: tuple[str, ...]
    # The tuned reference beside the readable one (solutions/<module>/<fast_solution>), where the
    # target needs more than the lesson; "" when the readable solution is the only reference.
    fast_solution: str = ""
    # FLOP per byte of the timed case's compulsory DRAM traffic (`grader report`'s roofline);
    # None when the manifest does not say.
    intensity: float | None = None
    # GPUs of one machine the checker needs (module 11's collectives: 2); with fewer, the grader
    # skips the exercise unrun, with the reason.
    min_gpus: int = 1
    # Where the target differs between timed cases: (case label, ratio) for each judged case (the
    # others are shown, not judged); empty when every case is judged against `target`.
    case_targets: tuple[tuple[str, float], ...] = ()
    # The one library the exercise may call (EXERCISE_LIBRARIES), "" for none: linked into its
    # targets, let through the library ban.
    library: str = ""
    # The fast reference's figure, shown beside the target as a stretch goal: the ratio every
    # judged case of the fast reference reaches (0: none). The target itself is what the readable
    # solution, the one the hints lead to, reaches.
    stretch: float = 0.0
    # CHECKER, or TRAINER: graded by the GPT trainer (grader/trainer.py), `file` the learner's
    # choice of kernels and `checker` empty, or TORCH: graded by PyTorch's checks
    # (grader/torch_ops.py), `file` the binding's Python half and `checker` empty.
    kind: str = CHECKER

    @property
    def is_trainer(self) -> bool:
        return self.kind == TRAINER

    @property
    def is_torch(self) -> bool:
        return self.kind == TORCH

    @property
    def has_checker(self) -> bool:
        """Graded by its GoogleTest checker (not by the trainer or by PyTorch's checks)."""
        return self.kind == CHECKER

    @property
    def key(self) -> str:
        return f"{self.module}/{self.id}"

    @property
    def target_text(self) -> str:
        """The target as the tables show it: ">= 90%", or "per case" where the cases differ."""
        return "per case" if self.case_targets else f">= {self.target:.0%}"

    @property
    def stretch_text(self) -> str:
        """The stretch as the tables show it: ">= 50%"."""
        return f">= {self.stretch:.0%}"


@dataclass(frozen=True)
class Module:
    name: str
    title: str
    week: int
    exercises: tuple[Exercise, ...]


def read_module(module_dir: Path) -> tuple[Module | None, list[str]]:
    """The module of `module_dir`, or None and every problem of its manifest."""
    where = f"modules/{module_dir.name}/module.toml"
    text = (module_dir / "module.toml").read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        return None, [f"{where}: not valid TOML ({error})"]
    problems = manifest_problems(module_dir.name, data, text)
    if problems:
        return None, [f"{where}: {problem}" for problem in problems]
    return _module(module_dir.name, data), []


def manifest_problems(module_name: str, data: dict, text: str) -> list[str]:
    problems = []
    if not MODULE_NAME.match(module_name):
        problems.append(f"the folder name '{module_name}' is not NN_topic (zero-padded number)")
    problems += [f"unknown top-level key '{key}'" for key in data.keys() - {"module", "exercise"}]
    header = data.get("module")
    if isinstance(header, dict):
        problems += _schema_problems("[module]", header, MODULE_SCHEMA, optional=set())
    else:
        problems.append("missing the [module] table (title, week)")
    entries = data.get("exercise")
    if not (isinstance(entries, list) and entries and all(isinstance(e, dict) for e in entries)):
        return problems + ["no [[exercise]] tables"]
    for number, entry in enumerate(entries, start=1):
        problems += _exercise_problems(f"exercise '{entry.get('id', f'#{number}')}'", entry)
    problems += _duplicate_id_problems(entries)
    return problems + _one_line_form_problems(text, entries)


def _has_type(value, types) -> bool:
    # TOML booleans are Python bools, which are ints too: `min_sm = true` is not a number.
    return not isinstance(value, bool) and isinstance(value, types)


def _schema_problems(where: str, table: dict, schema: dict, optional: set) -> list[str]:
    problems = []
    for key, (types, type_name) in schema.items():
        if key not in table:
            if key not in optional:
                problems.append(f"{where}: missing key '{key}'")
        elif not _has_type(table[key], types):
            problems.append(f"{where}: '{key}' must be {type_name}")
    problems += [f"{where}: unknown key '{key}'" for key in sorted(table.keys() - schema.keys())]
    return problems


def _exercise_problems(where: str, entry: dict) -> list[str]:
    if entry.get("kind") in (TRAINER, TORCH):
        return _trainer_problems(where, entry)
    problems = _schema_problems(where, entry, EXERCISE_SCHEMA, OPTIONAL_EXERCISE_KEYS)
    if problems:
        return problems
    if entry.get("kind", CHECKER) not in KINDS:
        problems.append(f"{where}: 'kind' is one of {', '.join(KINDS)}")
    if not EXERCISE_ID.match(entry["id"]):
        problems.append(f"{where}: the id must be snake_case")
    hints = entry["hints"]
    if len(hints) < MIN_HINTS or not all(isinstance(hint, str) and hint for hint in hints):
        problems.append(f"{where}: 'hints' needs at least {MIN_HINTS} non-empty strings")
    if entry["min_sm"] < 0 or entry["target"] < 0 or entry.get("timeout_s", 1) <= 0:
        problems.append(f"{where}: min_sm and target must be >= 0, timeout_s > 0")
    if entry.get("min_gpus", 1) < 1:
        problems.append(f"{where}: min_gpus must be >= 1")
    if entry.get("intensity", 0) < 0:
        problems.append(f"{where}: intensity must be >= 0")
    if (entry["metric"] == "") != (entry["baseline"] == ""):
        problems.append(f"{where}: 'metric' and 'baseline' go together (both set or both empty)")
    if entry["target"] > 0 and not entry["baseline"]:
        problems.append(f"{where}: a 'target' needs a 'baseline' (it is a ratio to the baseline)")
    problems += _case_target_problems(where, entry)
    if entry.get("library", EXERCISE_LIBRARIES[0]) not in EXERCISE_LIBRARIES:
        problems.append(f"{where}: 'library' may be {', '.join(EXERCISE_LIBRARIES)}")
    problems += _stretch_problems(where, entry)
    fast = entry.get("fast_solution")
    if fast is not None and (Path(fast).suffix != Path(entry["file"]).suffix or "/" in fast
                             or fast == entry["file"]):
        problems.append(f"{where}: 'fast_solution' names a file of solutions/<module>/, beside "
                        f"the readable solution and with its ending (e.g. {entry['id']}_fast"
                        f"{Path(entry['file']).suffix})")
    if "fast_arch" in entry and (fast is None or entry["fast_arch"] not in FAST_ARCHES):
        problems.append(f"{where}: 'fast_arch' may be {', '.join(FAST_ARCHES)}, beside a "
                        f"'fast_solution' (the fast reference's sm_90a path)")
    return problems


# A trainer or torch exercise's file: its ending, and what it is.
PROGRAM_FILES = {TRAINER: (".toml", "the learner's choice of kernels, a .toml file"),
                 TORCH: (".py", "the binding's Python half, a .py file (its C++ half beside it, "
                                "the same name with .cpp)")}


def _trainer_problems(where: str, entry: dict) -> list[str]:
    """A trainer or torch exercise: the checker's keys absent, its file the learner's choice of
    kernels (trainer: a .toml) or the binding's Python half (torch: a .py), the rest as for any
    exercise."""
    kind = entry["kind"]
    problems = _schema_problems(where, entry, EXERCISE_SCHEMA,
                                OPTIONAL_EXERCISE_KEYS | set(NOT_FOR_TRAINER))
    grader = "the trainer grades it" if kind == TRAINER else "PyTorch's checks grade it"
    problems += [f"{where}: a {kind} exercise has no '{key}' ({grader})"
                 for key in NOT_FOR_TRAINER if key in entry]
    if problems:
        return problems
    if not EXERCISE_ID.match(entry["id"]):
        problems.append(f"{where}: the id must be snake_case")
    suffix, what = PROGRAM_FILES[kind]
    if not entry["file"].endswith(suffix):
        problems.append(f"{where}: a {kind} exercise's file is {what}")
    if len(entry["hints"]) < MIN_HINTS or not all(isinstance(h, str) and h for h in entry["hints"]):
        problems.append(f"{where}: 'hints' needs at least {MIN_HINTS} non-empty strings")
    if entry["min_sm"] < 0 or entry["target"] < 0 or entry.get("timeout_s", 1) <= 0:
        problems.append(f"{where}: min_sm and target must be >= 0, timeout_s > 0")
    if (entry["metric"] == "") != (entry["baseline"] == ""):
        problems.append(f"{where}: 'metric' and 'baseline' go together (both set or both empty)")
    return problems


def _case_target_problems(where: str, entry: dict) -> list[str]:
    targets = entry.get("case_targets")
    if targets is None:
        return []
    if not targets or not all(_has_type(ratio, (int, float)) and ratio > 0
                              for ratio in targets.values()):
        return [f"{where}: 'case_targets' maps timed-case labels to ratios > 0"]
    if entry["target"] != min(targets.values()):
        return [f"{where}: 'target' must be the lowest of 'case_targets' ({min(targets.values())}"
                f"), the figure the tables show"]
    return []


def _stretch_problems(where: str, entry: dict) -> list[str]:
    stretch = entry.get("stretch")
    if stretch is None:
        return []
    if "fast_solution" not in entry:
        return [f"{where}: a 'stretch' is the fast reference's figure: it needs a 'fast_solution'"]
    # With case_targets, `target` is the lowest of them: the stretch reaches every case's target
    # and goes past the lowest (module 06: 90% on both shapes, the short rows' target already).
    highest = max([entry["target"], *(ratio for ratio in entry.get("case_targets", {}).values()
                                      if _has_type(ratio, (int, float)))])
    if entry["target"] <= 0:
        return [f"{where}: a 'stretch' goes beside a 'target' (a ratio > 0)"]
    if stretch < highest or stretch <= entry["target"]:
        return [f"{where}: 'stretch' must be above the target ({highest}): the target is what "
                f"the readable solution reaches, the stretch what the fast reference adds"]
    return []


def _duplicate_id_problems(entries: list[dict]) -> list[str]:
    ids = [entry.get("id") for entry in entries]
    duplicates = sorted({i for i in ids if isinstance(i, str) and ids.count(i) > 1})
    return [f"exercise id '{i}' is used more than once" for i in duplicates]


def cmake_view(text: str) -> list[dict[str, str]]:
    """The exercises as cmake/Course.cmake reads them: per [[exercise]], its one-line keys."""
    entries: list[dict[str, str]] = []
    for line in text.splitlines():
        if line.startswith(CMAKE_ENTRY):
            entries.append({})
        elif entries and (match := CMAKE_LINE.match(line)):
            key, value = (match[1], match[2]) if match[1] else (match[3], match[4])
            entries[-1][key] = value
    return entries


def _one_line_form_problems(text: str, entries: list[dict]) -> list[str]:
    seen_by_cmake = cmake_view(text)
    if len(seen_by_cmake) != len(entries):
        return [f"CMake sees {len(seen_by_cmake)} [[exercise]] entries, TOML {len(entries)}: "
                f"write each `{CMAKE_ENTRY}` at column 0"]
    problems = []
    for entry, cmake_entry in zip(entries, seen_by_cmake):
        for key in CMAKE_KEYS:
            if key in entry and cmake_entry.get(key) != str(entry[key]):
                line = f"{key} = {_toml_value(entry[key])}"
                problems.append(f"exercise '{entry.get('id')}': write {key} on one line at column "
                                f"0 as `{line}` (CMake reads it with a regex)")
    return problems


def _toml_value(value) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _module(name: str, data: dict) -> Module:
    exercises = tuple(
        Exercise(
            module=name,
            id=entry["id"],
            title=entry["title"],
            file=entry["file"],
            checker=entry.get("checker", ""),
            min_sm=entry["min_sm"],
            metric=entry["metric"],
            baseline=entry["baseline"],
            target=float(entry["target"]),
            timeout_s=float(entry.get("timeout_s", DEFAULT_TIMEOUT_S)),
            hints=tuple(entry["hints"]),
            fast_solution=entry.get("fast_solution", ""),
            intensity=None if "intensity" not in entry else float(entry["intensity"]),
            min_gpus=entry.get("min_gpus", 1),
            case_targets=tuple((label, float(ratio))
                               for label, ratio in entry.get("case_targets", {}).items()),
            library=entry.get("library", ""),
            stretch=float(entry.get("stretch", 0)),
            kind=entry.get("kind", CHECKER),
        )
        for entry in data["exercise"]
    )
    header = data["module"]
    return Module(name=name, title=header["title"], week=header["week"], exercises=exercises)
