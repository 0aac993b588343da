"""The course on disk: where it is, its modules, where each exercise's files are, and selectors."""
from dataclasses import dataclass
from pathlib import Path

from grader.errors import UserError
from grader.manifest import Exercise, Module, read_module

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


def module_dirs(root: Path) -> list[Path]:
    # The same set as the top-level CMakeLists.txt's glob: modules/*/module.toml, sorted.
    return sorted(path.parent for path in (root / "modules").glob("*/module.toml"))


def load_course(root: Path) -> Course:
    """The course at `root`; a broken manifest stops here with its first problem."""
    modules = []
    for folder in module_dirs(root):
        module, problems = read_module(folder)
        if problems:
            raise UserError(f"{problems[0]} (`grader check --no-build` lists every problem)")
        modules.append(module)
    return Course(root=root, modules=tuple(modules))


def select(course: Course, selector: str) -> list[Exercise]:
    """The exercises named by all, 01, 01_basics, 01/vector_add or 01_basics/vector_add."""
    if not course.exercises:
        raise UserError(f"{course.root} has no exercises: no modules/NN_topic/module.toml lists "
                        "one")
    if selector == ALL:
        return course.exercises
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
    if not selector.partition("/")[2]:
        example = course.exercises[0].key if course.exercises else "01_basics/vector_add"
        raise UserError(f"'{selector}' is not one exercise: write module/exercise, e.g. {example}")
    return select(course, selector)[0]


def _find_module(course: Course, name: str) -> Module:
    for module in course.modules:
        if name == module.name or module.name.startswith(f"{name}_"):
            return module
    valid = ", ".join(module.name for module in course.modules)
    raise UserError(f"unknown module '{name}': valid modules are {valid} (or {ALL})")
