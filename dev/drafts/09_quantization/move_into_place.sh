#!/usr/bin/env bash
# Moves module 09 from its draft folder to where the course picks it up, in the checkout this
# script lies in (or in a copy of it without .git, like build/draft09/tree: then outside git's
# index).
#
#   dev/drafts/09_quantization/move_into_place.sh      # PYTHON=... to name the grader's Python
#
# Moves modules/09_quantization, solutions/09_quantization, notes/09_quantization.md, the CPU
# references of its formats with their host tests (common/.../reference/quantize.h,
# common/src/reference/quantize.cpp, common/tests/reference_quantize_test.cpp: CMake globs them)
# and the emulator's header for its tensor-core exercises (dev/emu/modules/09_quantization) into
# place, applies course.patch (the shared files that name the module: the README's rows, the
# emulator's list of modules and what module 09's kernels need of it), writes the grader's blocks
# of progress.md and ROADMAP.md again (dev/regenerate_blocks.py: the module's week, 13, is planned
# in grader/templates/roadmap_checklist.md.j2 already), and removes the draft folder.
#
# The steps, and what stops them with the tree untouched: dev/drafts/move_draft.sh.
exec bash "$(dirname "$0")/../move_draft.sh" 09_quantization \
  common/include/course/reference/quantize.h common/src/reference/quantize.cpp \
  common/tests/reference_quantize_test.cpp
