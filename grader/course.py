"""The course on disk: where it is, its modules, where each exercise's files are, and selectors."""
from dataclasses import dataclass
from pathlib import Path

from grader.errors import UserError
from grader.manifest import Exercise, Module, read_module
from grader.results import FAST, LEARNER

ALL = "all"


@dataclass(frozen=True)
class Course:
    root: Path
    modules: tuple[Module, ...]

    @property
    def exercises(self) -> list[Exercise]:
        return [exercise for module in self.modules for exercise in module.exercises]

    def module_dir(self, exercise: Exercise) -> Path:
        return self.root / "modules" / exercise.module

    def stub(self, exercise: Exercise) -> Path:
        return self.module_dir(exercise) / exercise.file

    def contract(self, exercise: Exercise) -> Path:
        return self.module_dir(exercise) / f"{exercise.id}.h"

    def checker(self, exercise: Exercise) -> Path:
        return self.module_dir(exercise) / exercise.checker

    def solution(self, exercise: Exercise) -> Path:
        return self.root / "solutions" / exercise.module / exercise.file

    def fast_solution(self, exercise: Exercise) -> Path | None:
        """The tuned reference beside the readable solution, None where there is none."""
        if not exercise.fast_solution:
            return None
        return self.root / "solutions" / exercise.module / exercise.fast_solution

    def source(self, exercise: Exercise, variant: str) -> Path:
        """The file a tree of `variant` builds for `exercise`: the learner's stub, the fast
        reference, or the readable solution (the solution and emulated trees)."""
        if variant == LEARNER:
            return self.stub(exercise)
        return self.fast_solution(exercise) if variant == FAST else self.solution(exercise)

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root))

    def strip_root(self, text: str) -> str:
        """`text` with absolute paths into the course made repo-relative (compilers print them)."""
        return text.replace(f"{self.root}/", "")


def is_course_root(folder: Path) -> bool:
    return (folder / "CMakeLists.txt").is_file() and (folder / "modules").is_dir()


def find_root(explicit: Path | None, start: Path) -> Path:
    """`explicit` (--root, GRADER_ROOT) if given, else the first course folder up from `start`."""
    if explicit is not None:
        root = explicit.resolve()
        if not is_course_root(root):
            raise UserError(f"{root} is not a course root (it needs CMakeLists.txt and modules/)")
        return root
    for folder in (start.resolve(), *start.resolve().parents):
        if is_course_root(folder):
            return folder
    raise UserError(f"no course found from {start} upwards (a folder with CMakeLists.txt and "
                    "modules/): cd into the course or pass --root")


def other_clones_grader(root: Path) -> str | None:
    """A note when the grader running is not the course's own (a clone copied with its .venv:
    the editable install names the original clone's folder), with what to do; None otherwise."""
    running = Path(__file__).resolve().parent
    own = root / "grader"
    if not (own / "cli.py").is_file() or own.resolve() == running:
        return None
    return (f"note: the grader running is {running}, not this course's {own} (a clone copied "
            "with its .venv runs the original's grader): give this clone its own environment, "
            "python3 -m venv --clear .venv && . .venv/bin/activate && python -m pip install -e .")


def module_dirs(root: Path) -> list[Path]:
    # The same set as the top-level CMakeLists.txt's glob: modules/*/module.toml, sorted.
    return sorted(path.parent for path in (root / "modules").glob("*/module.toml"))


def unlisted_module_dirs(root: Path) -> list[Path]:
    """Module folders (modules/NN_topic with sources) without a module.toml: CMake and the
    grader see no exercise there (a manifest deleted by mistake, a branch half switched)."""
    return sorted(folder for folder in (root / "modules").glob("[0-9][0-9]_*")
                  if folder.is_dir() and not (folder / "module.toml").exists()
                  and any(path.suffix in (".cu", ".cpp", ".h") for path in folder.iterdir()))


def missing_manifest_message(root: Path, folder: Path) -> str:
    relative = folder.relative_to(root)
    return (f"{relative} has no module.toml, so none of its exercises is built or graded: "
            f"restore it (git checkout -- {relative}/module.toml)")


def load_course(root: Path) -> Course:
    """The course at `root`; a broken manifest stops here with its first problem."""
    modules = []
    for folder in module_dirs(root):
        module, problems = read_module(folder)
        if problems:
            raise UserError(f"{problems[0]} (`grader check --no-build` lists every problem)")
        modules.append(module)
    return Course(root=root, modules=tuple(modules))


def select(course: Course, selector: str, cwd: Path | None = None) -> list[Exercise]:
    """The exercises named by all, 01, 01_basics, 01/vector_add or 01_basics/vector_add, or by
    a path (what tab completion gives): modules/01_basics, modules/01_basics/vector_add.cu, its
    contract, its checker or its solution, relative to `cwd` or to the course."""
    if not course.exercises:
        unlisted = unlisted_module_dirs(course.root)
        if unlisted:
            raise UserError(missing_manifest_message(course.root, unlisted[0]))
        raise UserError(f"{course.root} has no exercises: no modules/NN_topic/module.toml lists "
                        "one")
    if selector == ALL:
        return course.exercises
    by_path = _select_path(course, selector, cwd or Path.cwd())
    if by_path is not None:
        return by_path
    module_part, _, exercise_part = selector.partition("/")
    module = _find_module(course, module_part)
    if not exercise_part:
        return list(module.exercises)
    for exercise in module.exercises:
        if exercise.id == exercise_part:
            return [exercise]
    valid = ", ".join(exercise.key for exercise in module.exercises)
    raise UserError(f"unknown exercise '{exercise_part}' in {module.name}: valid ids are {valid}")


def select_one(course: Course, selector: str) -> Exercise:
    chosen = select(course, selector) if selector.rstrip("/").partition("/")[2] else []
    if len(chosen) != 1:
        example = course.exercises[0].key if course.exercises else "01_basics/vector_add"
        raise UserError(f"'{selector}' is not one exercise: write module/exercise, e.g. {example}")
    return chosen[0]


def _find_module(course: Course, name: str) -> Module:
    for module in course.modules:
        if name == module.name or module.name.startswith(f"{name}_"):
            return module
    for folder in unlisted_module_dirs(course.root):
        if name == folder.name or folder.name.startswith(f"{name}_"):
            raise UserError(missing_manifest_message(course.root, folder))
    valid = ", ".join(module.name for module in course.modules)
    raise UserError(f"unknown module '{name}': valid modules are {valid} (or {ALL})")


def _select_path(course: Course, selector: str, cwd: Path) -> list[Exercise] | None:
    """The exercises a path names (a module folder, or one of an exercise's files), None when
    `selector` is no path into modules/ or solutions/."""
    if "/" not in selector.rstrip("/") and not selector.endswith((".cu", ".h", ".cpp", ".py")):
        return None
    for base in (cwd, course.root):
        path = (base / selector).resolve()
        try:
            parts = path.relative_to(course.root.resolve()).parts
        except ValueError:
            continue
        if len(parts) < 2 or parts[0] not in ("modules", "solutions") or not path.exists():
            continue
        module = _find_module(course, parts[1])
        if len(parts) == 2:
            return list(module.exercises)
        inside = "/".join(parts[2:])
        # A checker shared by several exercises (module 04's rungs) names them all; a torch
        # exercise's file is the binding's Python half, its C++ half beside it.
        named = [exercise for exercise in module.exercises
                 if inside in {exercise.file, f"{exercise.id}.h", exercise.checker,
                               exercise.fast_solution or exercise.file,
                               f"{exercise.id}.cpp" if exercise.is_torch else exercise.file}]
        if named:
            return named
        raise UserError(f"{selector} is not a file of an exercise of {module.name}: name one by "
                        f"its stub, contract, checker or solution, or as {module.name}/<id>")
    return None
