#!/usr/bin/env python3
"""Rewrites the grader's blocks of the repository's own progress.md and ROADMAP.md as a fresh
clone's first `grader run` expects them (no results): run it after adding, renaming or retitling
an exercise or a module, or changing a module's goals. grader/tests/test_progress.py fails until
then.

    python3 dev/regenerate_blocks.py
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course import load_course  # noqa: E402
from grader.progress import CHECKLIST_MARKERS, STATUS_MARKERS, _blocks, replace_block  # noqa: E402

blocks = _blocks(load_course(ROOT), {})
for name, markers in (("progress.md", STATUS_MARKERS), ("ROADMAP.md", CHECKLIST_MARKERS)):
    path = ROOT / name
    text = replace_block(path.read_text(encoding="utf-8"), markers, blocks[name])
    if text is None:
        sys.exit(f"{name}: the grader's markers are missing")
    path.write_text(text, encoding="utf-8")
    print(f"{name}: block regenerated")
