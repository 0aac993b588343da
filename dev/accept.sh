#!/usr/bin/env bash
# The acceptance of modules on a GPU in one command (course authors, on the device machine):
# the reference solutions, readable and fast (timed alone), the same solutions built for the
# oldest architecture the course supports and run JIT-compiled on this GPU, the untouched stubs,
# then every planted bug of the selection, one copy of the tree per exercise, the copies in
# parallel.
#
#   dev/accept.sh SELECTOR... [--no-mutants | --only-mutants] [--memcheck] [--mutant NAME]...
#                 [--no-oldest-arch]
#     SELECTOR    as for `grader run`: all, a module (06) or an exercise (06/layernorm); several
#                 selectors (01 02 03) share one batch of parallel copies
#     --only-mutants  the planted bugs alone (a second command when the whole acceptance of
#                 the selection does not fit in one)
#     --mutant NAME   of the selection's planted bugs, only those named so (repeat it): the new
#                 ones of a branch, without the hundreds already proven
#     --no-oldest-arch  without the sm_75 build of the solutions (for a change to the checkers
#                 and the harness's host side, where the solutions' device code is as it was)
#     --memcheck  also run every reference (readable and fast) of the selection under
#                 compute-sanitizer's memcheck, exact allocations, its correctness cases only,
#                 eight at a time (what `grader check` does on a GPU): memcheck.txt
#   OUT=dir       where solutions.txt, oldest-arch.txt, stubs.txt, mutants.txt (and memcheck.txt)
#                 go (default build/accept)
#   Module 11 needs 2 GPUs of one machine (min_gpus): on fewer, its exercises report skipped and
#   its planted bugs are left out, so run it on a machine with several (nvidia-h200-x2).
#
# Sequential, `grader check --mutants` for module 06 takes about 15 minutes (40 bugs, a build and a
# checker run each), longer than one device command may run. So each exercise's planted bugs go
# in groups of MUTANTS_PER_COPY (default 3) to copies of the tree, up to COPIES_AT_ONCE (default:
# the CPU count, at most 14) side by side: module 07's 35 took 410 s so (one copy per exercise ran
# past 600 s). On a machine of several GPUs the copies take turns on them (each sees one, or all
# for an exercise of several: min_gpus), so a multi-GPU kind, whose device time costs what one
# GPU's does, runs them that many times less crowded. Copies that share a GPU slow each other's
# checkers: a planted bug expected to fail may run MUTANT_TIMEOUT_S (default 300) seconds
# (`grader check --timeout`), a planted hang the manifest's timeout_s (module 07's fast planted
# bugs among 13 copies on one GPU ran past 120 s, eleventh session). The copies go to
# build/accept-copies (each has its own build/mutants and build/mutants-fast). Exit status: 0 when
# every solution passes (each readable solution meeting its target, each fast reference its
# stretch goal, or its target where the manifest has no stretch), every stub reports todo and
# every planted bug is caught.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { sed -n '2,24p' "$0"; exit 2; }
selectors=() mutants=yes memcheck=no references=yes names=() oldest=yes
while [ $# -gt 0 ]; do
  case "$1" in
    --no-mutants) mutants=no ;;
    --only-mutants) references=no ;;
    --memcheck) memcheck=yes ;;
    --no-oldest-arch) oldest=no ;;
    --mutant) [ $# -ge 2 ] || { echo "--mutant needs a name" >&2; exit 2; }
              names+=("$2"); shift ;;
    *) selectors+=("$1") ;;
  esac
  shift
done
[ "$references$memcheck" = noyes ] && { echo "--memcheck needs the references' run" >&2; exit 2; }
out=${OUT:-build/accept}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
# NCCL is module 11's baseline; the pip wheel (nvidia-nccl-cu13, or the one PyTorch brought) has it.
if [ -z "${COURSE_NCCL_ROOT:-}" ]; then
  root=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null) &&
    export COURSE_NCCL_ROOT=$root
fi
status=0

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
# Several GPUs (module 11): how they are connected (NV# = NVLink, PIX/PHB/SYS = PCIe paths).
[ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" -gt 1 ] && nvidia-smi topo -m
if [ "$references" = yes ]; then
  : > "$out/solutions.txt"
  : > "$out/oldest-arch.txt"
  : > "$out/stubs.txt"
  : > "$out/checking.txt"
  # What a configure without a GPU makes (sm_75, the course's oldest), run on this GPU from PTX: the
  # host must take the paths the device code was compiled for (course::clusters_available).
  oldest_tree=build/accept-oldest-arch
  if [ "$oldest" = yes ]; then
    rm -rf "$oldest_tree" && mkdir -p "$oldest_tree"
    tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$oldest_tree"
  fi
  for selector in "${selectors[@]}"; do
    COURSE_CHECKING_LOG=$(cd "$out" && pwd)/checking.txt \
      python3 -m grader run "$selector" --solutions >> "$out/solutions.txt" 2>&1 || status=1
    # A target (readable) or stretch (fast) not met is a failure too: `grader run` passes the
    # solution and says "not met (>= 40%; ...)" or "stretch not met (>= 45%)".
    grep -qE '^\S+.* not met \((>=|per case)' "$out/solutions.txt" && status=1
    # Exercises whose instructions sm_75 lacks (module 05's mma_pipeline and wgmma_gemm: cp.async,
    # wgmma) skip there with the reason; only a failure counts. The tensor-core exercises of
    # modules 05 and 07 run there in fp16 (course/tensor_element.h).
    if [ "$oldest" = yes ]; then
      (cd "$oldest_tree" && CUDAARCHS=75 python3 -m grader run "$selector" --solutions) \
        > "$out/oldest-arch.part" 2>&1
      cat "$out/oldest-arch.part" >> "$out/oldest-arch.txt"
      grep -qE '^\S+( \((readable|fast)\))? +(fail|build error|crash|timeout) ' \
        "$out/oldest-arch.part" && status=1
      rm -f "$out/oldest-arch.part"
    fi
    # The stubs must all report todo, which `grader run` counts as not passing (exit 1).
    python3 -m grader run "$selector" >> "$out/stubs.txt" 2>&1
  done
  grep -qE '^\S+ +(pass|fail|build error|crash|timeout) ' "$out/stubs.txt" && status=1
fi

if [ "$memcheck" = yes ]; then
  # Each reference of the selection under memcheck (the timed cases left out, as the results of
  # the run above name them), eight processes at a time, one line each in memcheck.txt; in the
  # background, beside the planted bugs' copies (it reads only the trees of this folder).
  python3 - "${selectors[@]}" > "$out/memcheck.txt" 2> "$out/memcheck.log" <<'EOF' &
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from grader.build import BuildTree
from grader.cases import checker_cases
from grader.course import load_course, select
from grader.results import FAST, SOLUTION
from grader.sanitize import describe, memcheck_summary
course = load_course(Path.cwd())
log = lambda line: print(line, file=sys.stderr)
selected = list(dict.fromkeys(e for s in sys.argv[1:] for e in select(course, s)))
jobs = [(BuildTree.standard(course, variant), exercise) for variant in (SOLUTION, FAST)
        for exercise in selected if variant == SOLUTION or exercise.fast_solution]
def one(job):
    tree, exercise = job
    timed = [case.test for case in checker_cases(tree, exercise, log).timed]
    summary = memcheck_summary(tree, exercise, timed, log)
    return f"memcheck {exercise.key} ({tree.variant}): {describe(summary)}"
with ThreadPoolExecutor(8) as pool:
    for line in pool.map(one, jobs):
        print(line, flush=True)
EOF
fi

if [ "$mutants" = yes ]; then
  # The planted bugs of the selection (those --mutant names, where it names some), one line per
  # group of an exercise's: module/exercise, then the group's --mutant arguments; found by the
  # grader's own selector and mutant reader.
  at_once=${COPIES_AT_ONCE:-$(( $(nproc) < 14 ? $(nproc) : 14 ))}
  mapfile -t lines < <(NAMES="${names[*]}" MUTANTS_PER_COPY=${MUTANTS_PER_COPY:-3} \
                       python3 - "${selectors[@]}" <<'EOF'
import os
import sys
from pathlib import Path
from grader.course import load_course, select
from grader.mutants import read_mutants
course = load_course(Path.cwd())
selected = [exercise for selector in sys.argv[1:] for exercise in select(course, selector)]
mutants, _ = read_mutants(course, selected)
names = os.environ["NAMES"].split()
if unknown := set(names) - {mutant.name for mutant in mutants}:
    sys.exit(f"no planted bug named {', '.join(sorted(unknown))} in {' '.join(sys.argv[1:])}")
per_exercise = {}
for mutant in mutants:
    if not names or mutant.name in names:
        per_exercise.setdefault(mutant.exercise, {})[mutant.name] = None
size = int(os.environ["MUTANTS_PER_COPY"])
for exercise, found in per_exercise.items():
    found = list(found)
    for start in range(0, len(found), size):
        print(" ".join([exercise.key, str(exercise.min_gpus)] +
                       [f"--mutant {name}" for name in found[start:start + size]]))
EOF
  )
  [ "${#lines[@]}" -gt 0 ] || { echo "no planted bugs in the selection" >&2; exit 2; }
  copies=build/accept-copies
  rm -rf "$copies" && mkdir -p "$copies"
  # The GPUs the copies take turns on (CUDA_VISIBLE_DEVICES's list where it is set), so that
  # on a machine of several each GPU runs its share of the checkers; an exercise that needs more
  # than one GPU (min_gpus) sees them all.
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -ra gpus <<< "$CUDA_VISIBLE_DEVICES"
  else
    mapfile -t gpus < <(nvidia-smi --query-gpu=index --format=csv,noheader)
  fi
  [ "${#gpus[@]}" -gt 0 ] || gpus=(0)
  # Group `index`'s copy of the tree, its exercise, the GPUs it needs and --mutant arguments.
  group() {
    read -r exercise needs arguments <<< "${lines[$1]}"
    copy=$copies/$1.${exercise//\//.}
  }
  for index in "${!lines[@]}"; do
    group "$index"
    mkdir -p "$copy"
    tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$copy"
    while [ "$(jobs -rp | wc -l)" -ge "$at_once" ]; do wait -n; done
    visible=$(IFS=,; echo "${gpus[*]}")
    [ "$needs" -gt 1 ] || visible=${gpus[index % ${#gpus[@]}]}
    # $arguments unquoted: its --mutant NAME pairs, one word each.
    (cd "$copy" && CUDA_VISIBLE_DEVICES=$visible python3 -m grader check --mutants --no-build \
       "$exercise" $arguments --timeout "${MUTANT_TIMEOUT_S:-300}" > check.log 2>&1
     echo $? > check.rc) &
  done
  wait
  : > "$out/mutants.txt"
  for index in "${!lines[@]}"; do
    group "$index"
    { echo "== $exercise ${arguments//--mutant /} (exit $(cat "$copy/check.rc"))"
      cat "$copy/check.log"; } >> "$out/mutants.txt"
    [ "$(cat "$copy/check.rc")" = 0 ] || status=1
  done
fi
wait  # the memcheck pass
[ "$memcheck" = yes ] && grep -qvE ': 0 errors$' "$out/memcheck.txt" && status=1

if [ "$references" = yes ]; then
  # The tables, without the build's progress lines.
  grep -avE '^\[[0-9]+/[0-9]+\]|^ninja: |^configuring |^collecting ' "$out/solutions.txt" \
    "$out/oldest-arch.txt" "$out/stubs.txt" |
    sed -E 's/^[^:]*\.txt://'
  # What checking every timed call cost the solutions' run (course/bench.h).
  awk '{calls += $(NF - 5); seconds += substr($(NF - 1), 2)}
       END {if (NR) printf "timed calls checked: %d in %d timed cases, +%.1f s in all\n", calls, NR, seconds}' \
    "$out/checking.txt"
fi
[ "$memcheck" = yes ] && cat "$out/memcheck.txt"
if [ "$mutants" = yes ]; then
  # One line per planted bug: its name, what was expected, and whether the checker caught it.
  grep -aE '^ [0-9]{2}_[a-z0-9_]+/[a-z0-9_]+:|^== |course OK|problem' "$out/mutants.txt" |
    sed -E 's/ {2,}/  /g' | cut -c1-160
fi
exit $status
