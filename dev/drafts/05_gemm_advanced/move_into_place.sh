#!/usr/bin/env bash
# Moves module 05 from its draft folder to where the course picks it up, in the checkout this
# script lies in (or in a copy of it without .git: then with plain mv and patch).
#
#   dev/drafts/05_gemm_advanced/move_into_place.sh
#
# Moves modules/05_gemm_advanced, solutions/05_gemm_advanced and notes/05_gemm_advanced.md into
# place, applies course.patch (the shared files that name the module: README, ROADMAP, the
# grader's ladder, dev/accept.sh, STATUS), and removes the draft folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
draft=dev/drafts/05_gemm_advanced
cd "$root"
[ -d "$draft/modules/05_gemm_advanced" ] || { echo "nothing to move: $draft is gone" >&2; exit 2; }
for path in modules/05_gemm_advanced solutions/05_gemm_advanced notes/05_gemm_advanced.md; do
  [ ! -e "$path" ] || { echo "$path exists already" >&2; exit 2; }
done
# A git checkout of its own (not a copy that merely lies inside one, like build/verify05-tree).
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
  move() { git mv "$1" "$2"; }
  apply() { git apply --index "$1"; }
  remove() { git rm -rq "$1"; }
else
  move() { mv "$1" "$2"; }
  apply() { patch -s -p1 < "$1"; }
  remove() { rm -rf "$1"; }
fi
move "$draft/modules/05_gemm_advanced" modules/05_gemm_advanced
move "$draft/solutions/05_gemm_advanced" solutions/05_gemm_advanced
move "$draft/notes/05_gemm_advanced.md" notes/05_gemm_advanced.md
if [ -f "$draft/course.patch" ]; then apply "$draft/course.patch"; fi
remove "$draft"
echo "module 05 moved into place; dev/drafts/README.md still describes it: update that page"
