#!/usr/bin/env bash
# Moves module 10 from its draft folder to where the course picks it up, in the checkout this
# script lies in (or in a copy of it without .git, like build/draft10/tree: then outside git's
# index).
#
#   dev/drafts/10_inference/move_into_place.sh         # PYTHON=... to name the grader's Python
#
# Moves modules/10_inference, solutions/10_inference, notes/10_inference.md and the CPU references
# of its exercises with their host tests (common/.../reference/inference.h,
# common/src/reference/inference.cpp, common/tests/reference_inference_test.cpp: CMake globs
# them) and the emulator's header for pairwise_cosine's tensor cores (dev/emu/modules/10_inference)
# into place, applies course.patch (the shared files that name the module: the README's sentence
# and rows, the emulator's list of modules and dev/README.md's paragraph on it), writes the
# grader's blocks of progress.md and ROADMAP.md again (dev/regenerate_blocks.py: the module's
# week, 14, is planned in grader/templates/roadmap_checklist.md.j2 already), and removes the draft
# folder.
#
# The steps, and what stops them with the tree untouched: dev/drafts/move_draft.sh.
exec bash "$(dirname "$0")/../move_draft.sh" 10_inference \
  common/include/course/reference/inference.h common/src/reference/inference.cpp \
  common/tests/reference_inference_test.cpp
