#!/usr/bin/env bash
# The acceptance of modules on a GPU in one command (course authors, on the device machine):
# the reference solutions, readable and fast (timed alone), the untouched stubs, then every
# planted bug of the selection, one copy of the tree per exercise, the copies in parallel.
#
#   dev/accept.sh SELECTOR... [--no-mutants]
#     SELECTOR  as for `grader run`: all, a module (06) or an exercise (06/layernorm); several
#               selectors (01 02 03) share one batch of parallel copies
#   OUT=dir     where solutions.txt, stubs.txt and mutants.txt go (default build/accept)
#
# Sequential, `grader check --mutants` for module 06 takes about 15 minutes (40 bugs, a build and a
# checker run each), longer than one device command may run; eight copies side by side take a
# few. The copies go to build/accept-copies (each has its own build/mutants and
# build/mutants-fast). Exit status: 0 when every solution passes (the target met where it is
# judged), every stub reports todo and every planted bug is caught.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
selectors=() mutants=yes
for argument in "$@"; do
  if [ "$argument" = --no-mutants ]; then mutants=no; else selectors+=("$argument"); fi
done
out=${OUT:-build/accept}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
# cuDNN's softmax is a baseline of module 06 when the pip wheel is installed.
if [ -z "${COURSE_CUDNN_ROOT:-}" ]; then
  root=$(python3 -c "import nvidia.cudnn as m; print(list(m.__path__)[0])" 2>/dev/null) &&
    export COURSE_CUDNN_ROOT=$root
fi
status=0

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
: > "$out/solutions.txt"
: > "$out/stubs.txt"
for selector in "${selectors[@]}"; do
  python3 -m grader run "$selector" --solutions >> "$out/solutions.txt" 2>&1 || status=1
  # A judged target not met is a failure too (`grader run` passes it with "not met").
  grep -qE '^\S+.* not met \(>=' "$out/solutions.txt" && status=1
  # The stubs must all report todo, which `grader run` counts as not passing (exit 1).
  python3 -m grader run "$selector" >> "$out/stubs.txt" 2>&1
done
grep -qE '^\S+ +(pass|fail|build error|crash|timeout) ' "$out/stubs.txt" && status=1

if [ "$mutants" = yes ]; then
  # The exercises of the selection that have planted bugs, as module/exercise, found by the
  # grader's own selector and mutant reader.
  mapfile -t exercises < <(python3 - "${selectors[@]}" <<'EOF'
import sys
from pathlib import Path
from grader.course import load_course, select
from grader.mutants import read_mutants
course = load_course(Path.cwd())
selected = [exercise for selector in sys.argv[1:] for exercise in select(course, selector)]
mutants, _ = read_mutants(course, selected)
print("\n".join(dict.fromkeys(mutant.exercise.key for mutant in mutants)))
EOF
)
  copies=build/accept-copies
  rm -rf "$copies" && mkdir -p "$copies"
  for exercise in "${exercises[@]}"; do
    copy=$copies/${exercise//\//.}
    mkdir -p "$copy"
    tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$copy"
    (cd "$copy" && python3 -m grader check --mutants --no-build "$exercise" > check.log 2>&1;
     echo $? > check.rc) &
  done
  wait
  : > "$out/mutants.txt"
  for exercise in "${exercises[@]}"; do
    copy=$copies/${exercise//\//.}
    { echo "== $exercise (exit $(cat "$copy/check.rc"))"; cat "$copy/check.log"; } >> "$out/mutants.txt"
    [ "$(cat "$copy/check.rc")" = 0 ] || status=1
  done
fi

# The tables, without the build's progress lines.
grep -avE '^\[[0-9]+/[0-9]+\]|^ninja: |^configuring ' "$out/solutions.txt" "$out/stubs.txt" |
  sed -E 's/^[^:]*\.txt://'
if [ "$mutants" = yes ]; then
  # One line per planted bug: its name, what was expected, and whether the checker caught it.
  grep -aE '^ [0-9]{2}_[a-z0-9_]+/[a-z0-9_]+:|^== |course OK|problem' "$out/mutants.txt" |
    sed -E 's/ {2,}/  /g' | cut -c1-160
fi
exit $status
