#!/usr/bin/env bash
# Do the drafts still move? Each draft alone and each pair in both orders (09, 10, 09 then 10,
# 10 then 09) in a copy of this checkout (no .git, no build trees) under build/drafts-moves/, where each draft's
# move_into_place.sh runs; then, in each copy: `grader check --no-build` (manifests and files),
# the ROADMAP and progress blocks as the grader writes them (dev/regenerate_blocks.py changes
# nothing) and the roadmap's and progress's tests. No GPU, no build: about 30 s. Run it after a
# change to main that a course.patch touches, or to a course.patch (dev/drafts/README.md).
#
#   dev/drafts/check_moves.sh                 # PYTHON=... to name the grader's Python
#
# Exit status 0 when every order moved and checked clean, 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
base=$root/build/drafts-moves
drafts=()
for folder in "$root"/dev/drafts/[0-9][0-9]_*/; do
  [ -d "$folder" ] && drafts+=("$(basename "$folder")")
done
rm -rf "$base"
status=0
problem() { echo "  PROBLEM: $*"; status=1; }

orders=()
for a in "${drafts[@]}"; do
  orders+=("$a")
  for b in "${drafts[@]}"; do [ "$a" = "$b" ] || orders+=("$a $b"); done
done
for order in "${orders[@]}"; do
  copy=$base/${order// /+}
  mkdir -p "$copy"
  tar -C "$root" --exclude=./build --exclude=./.git --exclude=./.grader --exclude=./.venv -cf - . |
    tar -xf - -C "$copy"
  echo "== $order"
  for draft in $order; do
    PYTHON=$python bash "$copy/dev/drafts/$draft/move_into_place.sh" > "$copy/move.log" 2>&1 ||
      { problem "$draft did not move: $(tail -1 "$copy/move.log")"; continue 2; }
  done
  (
    cd "$copy" || exit 1
    cp ROADMAP.md build-roadmap.md && cp progress.md build-progress.md
    "$python" dev/regenerate_blocks.py > /dev/null &&
      cmp -s ROADMAP.md build-roadmap.md && cmp -s progress.md build-progress.md ||
      echo "  PROBLEM: the ROADMAP or progress block is not what the grader writes"
    "$python" -m grader check --no-build 2>&1 | tail -1 | sed 's/^/  /'
    # The copy lies inside this checkout: out of git's sight, the tests that read the committed
    # files skip rather than read this checkout's.
    GIT_CEILING_DIRECTORIES=$base "$python" -m pytest -q -p no:cacheprovider \
      grader/tests/test_roadmap.py grader/tests/test_progress.py 2>&1 | tail -1 |
      sed 's/^/  pytest: /'
    grep -E "^### Weeks? 1[3-9]" ROADMAP.md | cut -d, -f1 | sed 's/^### /  /'
  ) | tee "$copy/check.log"
  grep -qE "PROBLEM|failed|error" "$copy/check.log" && status=1
  grep -q "course OK" "$copy/check.log" || status=1
done
exit $status
