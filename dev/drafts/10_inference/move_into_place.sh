#!/usr/bin/env bash
# Moves module 10 from its draft folder to where the course picks it up, in the checkout this
# script lies in (or in a copy of it without .git: then with plain mv and patch).
#
#   dev/drafts/10_inference/move_into_place.sh
#
# Moves modules/10_inference, solutions/10_inference, notes/10_inference.md and the CPU references
# of its exercises with their host tests (common/.../reference/inference.h,
# common/src/reference/inference.cpp, common/tests/reference_inference_test.cpp: CMake globs
# them) and the emulator's header for pairwise_cosine's tensor cores (dev/emu/modules/10_inference)
# into place, applies course.patch where there is one (the shared files that name the
# module), and removes the draft folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
draft=dev/drafts/10_inference
cd "$root"
[ -d "$draft/modules/10_inference" ] || { echo "nothing to move: $draft is gone" >&2; exit 2; }
paths=(modules/10_inference solutions/10_inference notes/10_inference.md
       common/include/course/reference/inference.h common/src/reference/inference.cpp
       common/tests/reference_inference_test.cpp dev/emu/modules/10_inference)
for path in "${paths[@]}"; do
  [ ! -e "$path" ] || { echo "$path exists already" >&2; exit 2; }
done
# A git checkout of its own (not a copy that merely lies inside one, like build/draft10/tree).
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
echo "module 10 moved into place; dev/drafts/README.md still describes it: update that page"
