"""ROADMAP.md's checkpoints are the modules' targets, word for word: the grader writes them from
the manifests (grader/templates/roadmap_checklist.md.j2, progress.target_phrase), and the
committed ROADMAP.md holds what it writes."""
import re
from dataclasses import replace

from grader.course import load_course
from grader.progress import CHECKLIST_MARKERS, _blocks, block_of, target_phrase
from grader.tests.conftest import REPO
from grader.tests.test_stretch import MMA_PIPELINE


def unticked(text: str) -> str:
    return text.replace("- [x] ", "- [ ] ").strip()


def test_the_committed_roadmap_is_what_the_grader_writes_from_the_manifests():
    course = load_course(REPO)
    written = _blocks(course, {})["ROADMAP.md"]
    committed = block_of((REPO / "ROADMAP.md").read_text(encoding="utf-8"), CHECKLIST_MARKERS)
    assert committed is not None
    # A learner's ticks aside: after a change to a target, regenerate the block (`grader run`
    # rewrites it) and commit it.
    assert unticked(committed) == unticked(written)


def test_each_module_starts_in_the_week_its_manifest_gives():
    course = load_course(REPO)
    written = _blocks(course, {})["ROADMAP.md"]
    first_weeks = {}
    for weeks, module in re.findall(r"^### Weeks? ([0-9]+)(?:-[0-9]+)?: ([0-9]{2}_[a-z0-9_]+)",
                                    written, flags=re.MULTILINE):
        first_weeks.setdefault(module, int(weeks))
    assert {module.name: module.week for module in course.modules} == {
        module.name: first_weeks[module.name] for module in course.modules}


def test_every_exercise_of_a_module_is_in_its_weeks():
    course = load_course(REPO)
    written = _blocks(course, {})["ROADMAP.md"]
    for exercise in course.exercises:
        assert written.count(f"`{exercise.key}`") == 1, exercise.key


def test_a_target_in_words():
    assert target_phrase(replace(MMA_PIPELINE, stretch=0.0)) == "`mma_pipeline` at 40% of cuBLAS bf16"
    assert target_phrase(MMA_PIPELINE) == "`mma_pipeline` at 40% of cuBLAS bf16, stretch 45%"
    per_case = replace(MMA_PIPELINE, baseline="cudnn_attention_bf16", stretch=0.5,
                       case_targets=(("D128", 0.4), ("D128 causal", 0.45)))
    assert target_phrase(per_case) == ("`mma_pipeline` at 40% of cuDNN's fused attention on D128 "
                                       "and 45% on D128 causal, stretch 50%")
    assert target_phrase(replace(MMA_PIPELINE, baseline="my_lib", stretch=0.0)) == (
        "`mma_pipeline` at 40% of my_lib")
