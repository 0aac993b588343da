#!/usr/bin/env bash
# Times variants of one reference solution's constants in one GPU call (course authors, on the
# device machine: the whole sweep fits one command). The file swept is the exercise's fast
# reference where it has one (the manifest's fast_solution: that is where tuned constants live),
# else its solution.
#
#   dev/sweep.sh EXERCISE FILTER VARIANT...
#     EXERCISE  module/exercise, e.g. 06_softmax_norms/layernorm
#     FILTER    the checker's GoogleTest filter to time, e.g. '*Bandwidth4096x50304*'
#     VARIANT   name[:kConstant=value,kConstant=value...]; a bare name times the file as it is
#   PATCH=file          applied (patch -p2) to the solution before the constants are set
#   CORRECTNESS=filter  the checker's cases each variant must pass first (default: all but
#                       FILTER; "none" skips them, for a diagnostic variant that is wrong on purpose)
#   REPEATS=2           timed rounds; a round runs every variant once, so all see the same clocks
#   OUT=dir             where summary.txt and a tarball of the logs go (the device tool's $OUT)
#
# Every variant is built from a scratch copy of solutions/ (COURSE_SOLUTIONS_DIR, as the mutant
# runner does): the working tree is never edited. A constant must appear exactly once, as
# `constexpr <type> kName = <value>;` at the start of a line.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 3 ] || { sed -n '2,21p' "$0"; exit 2; }
exercise=$1 filter=$2; shift 2
module=${exercise%%/*} id=${exercise##*/}
build=build/sweep
logs=$build/logs
scratch=$build/solutions
rm -rf "$logs" "$scratch" "$build/bins" && mkdir -p "$logs" "$build/bins"
cp -r solutions "$scratch"
# The file and the build variant, from the grader's own manifest reader.
read -r file variant < <(python3 - "$exercise" <<'EOF'
import sys
from pathlib import Path
from grader.course import load_course, select_one
exercise = select_one(load_course(Path.cwd()), sys.argv[1])
print(exercise.fast_solution or exercise.file, "fast" if exercise.fast_solution else "solution")
EOF
)
source_file=$scratch/$module/$file
[ -f "$source_file" ] || { echo "sweep: no solution $source_file" >&2; exit 2; }
# The patch names solutions/<module>/<file>: strip a/solutions/ and apply it to the copy. patch(1),
# not `git apply --directory`, which applies nothing, silently, inside another git checkout.
if [ -n "${PATCH:-}" ]; then
  patch -s -p2 -d "$scratch" < "$PATCH" || { echo "sweep: $PATCH does not apply" >&2; exit 2; }
fi
cp "$source_file" "$build/pristine.cu"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOURSE_VARIANTS="$variant" \
  -DCOURSE_SOLUTIONS_DIR="$PWD/$scratch" -DCOURSE_TEST_GRADER=OFF > "$logs/configure.log" 2>&1 ||
  { tail -20 "$logs/configure.log"; exit 1; }
target=$module.$id.$variant
names=()
for variant in "$@"; do
  name=${variant%%:*} settings=${variant#"$name"}
  settings=${settings#:}
  cp "$build/pristine.cu" "$source_file"
  IFS=, read -ra pairs <<< "$settings"
  for setting in "${pairs[@]}"; do
    constant=${setting%%=*} value=${setting#*=}
    pattern="^constexpr [^=]* $constant = "
    [ "$(grep -c "$pattern" "$source_file")" = 1 ] ||
      { echo "sweep: $name: $constant is not one 'constexpr ... $constant = ...;' line" >&2; exit 2; }
    sed -i -E "s/($pattern).*;/\1$value;/" "$source_file"
  done
  if ninja -C "$build" "$target" > "$logs/build_$name.log" 2>&1; then
    cp "$build/bin/$target" "$build/bins/$name"
    names+=("$name")
  else
    echo "$name: build failed"; grep -m5 "error" "$logs/build_$name.log" || true
  fi
done
cp "$build/pristine.cu" "$source_file"
summary=$logs/summary.txt
correctness=${CORRECTNESS:--$filter}
for name in "${names[@]}"; do
  [ "$correctness" != none ] || break
  status=pass
  "$build/bins/$name" --gtest_filter="$correctness" > "$logs/correct_$name.log" 2>&1 || status=FAIL
  grep -q "^\[  SKIPPED \]" "$logs/correct_$name.log" && status="skipped (no GPU?)"
  echo "$name: correctness $status" | tee -a "$summary"
done
for round in $(seq "${REPEATS:-2}"); do
  for name in "${names[@]}"; do
    "$build/bins/$name" --gtest_filter="$filter" > "$logs/time_${name}_$round.log" 2>&1 || true
    # A variant that printed no [perf] line (it crashed, or skipped) must not end the sweep.
    grep "^\[perf\]" "$logs/time_${name}_$round.log" | sed "s/^\[perf\]/$name round $round:/" |
      tee -a "$summary" || echo "$name round $round: no [perf] line (see time_${name}_$round.log)"
  done
done
if [ -n "${OUT:-}" ]; then
  tag=$id-$(date +%H%M%S)
  cp "$summary" "$OUT/summary-$tag.txt"
  tar czf "$OUT/logs-$tag.tar.gz" -C "$build" logs
fi
