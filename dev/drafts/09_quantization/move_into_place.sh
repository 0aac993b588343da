#!/usr/bin/env bash
# Moves module 09 from its draft folder to where the course picks it up, in the checkout this
# script lies in (or in a copy of it without .git: then with plain mv and patch).
#
#   dev/drafts/09_quantization/move_into_place.sh
#
# Moves modules/09_quantization, solutions/09_quantization, notes/09_quantization.md, the CPU
# references of its formats with their host tests (common/.../reference/quantize.h,
# common/src/reference/quantize.cpp, common/tests/reference_quantize_test.cpp: CMake globs them)
# and the emulator's header for its tensor-core exercises (dev/emu/modules/09_quantization) into
# place, applies course.patch (the shared files that name the module: README and ROADMAP rows, the
# ROADMAP plan, module 11's week, the emulator's list of modules and the intrinsics module 09's
# kernels call), and removes the draft folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
draft=dev/drafts/09_quantization
cd "$root"
[ -d "$draft/modules/09_quantization" ] || { echo "nothing to move: $draft is gone" >&2; exit 2; }
paths=(modules/09_quantization solutions/09_quantization notes/09_quantization.md
       common/include/course/reference/quantize.h common/src/reference/quantize.cpp
       common/tests/reference_quantize_test.cpp dev/emu/modules/09_quantization)
for path in "${paths[@]}"; do
  [ ! -e "$path" ] || { echo "$path exists already" >&2; exit 2; }
done
# A git checkout of its own (not a copy that merely lies inside one, like build/draft09/tree).
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
  move() { git mv "$1" "$2"; }
  apply() { git apply --index "$1"; }
  remove() { git rm -rq "$1"; }
else
  move() { mv "$1" "$2"; }
  apply() { patch -s -p1 < "$1"; }
  remove() { rm -rf "$1"; }
fi
for path in "${paths[@]}"; do move "$draft/$path" "$path"; done
if [ -f "$draft/course.patch" ]; then apply "$draft/course.patch"; fi
remove "$draft"
echo "module 09 moved into place; dev/drafts/README.md still describes it: update that page"
