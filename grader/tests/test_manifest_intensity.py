"""The manifest's optional `intensity` (FLOP per byte of the timed case, for the roofline)."""
from grader.manifest import read_module

from .test_manifest import EXERCISE, HEADER


def read(tmp_path, extra: str):
    module_dir = tmp_path / "01_basics"
    module_dir.mkdir(parents=True)
    text = HEADER + EXERCISE.format(id="vector_add").replace("target = 0.9\n",
                                                             f"target = 0.9\n{extra}")
    (module_dir / "module.toml").write_text(text)
    return read_module(module_dir)


def test_intensity_is_optional_and_read_as_a_number(tmp_path):
    module, problems = read(tmp_path, "intensity = 0.083  # 1 add per 12 bytes\n")
    assert problems == [] and module.exercises[0].intensity == 0.083
    module, _ = read(tmp_path / "b", "")
    assert module.exercises[0].intensity is None


def test_a_negative_or_textual_intensity_is_a_problem(tmp_path):
    assert read(tmp_path, "intensity = -1\n")[1] == [
        "modules/01_basics/module.toml: exercise 'vector_add': intensity must be >= 0"]
    assert read(tmp_path / "b", 'intensity = "low"\n')[1] == [
        "modules/01_basics/module.toml: exercise 'vector_add': 'intensity' must be a number"]
