#!/usr/bin/env bash
# The trainer's data parallelism on a machine of several GPUs, in one command (course authors, on
# the device machine): its tests (trainer/tests/test_data_parallel.py), the scaling table of GPT-2
# 124M (B 16 per GPU, T 1024: tokens/s per GPU at 1, 2 and 4 GPUs, the gradients summed in
# buckets during the backward, after it, and with ZeRO-1), and the loss curve of 2 GPUs against
# one GPU at the same global batch (B 16 x 2 micro-batches) over TRAIN_STEPS steps.
#
#   OUT=dir BUDGET_S=560 dev/accept_multi_gpu.sh [TRAIN_STEPS]   (default 1000; needs
#                        data/shakespeare with GPT-2's tokenizer, made by trainer/prepare_data.py)
# Module 11's exercises are dev/accept.sh 11's. Logs go to $OUT: multi_gpu.txt holds everything,
# summary.txt the tables. Exit status 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/accept-multi-gpu}
steps=${1:-1000}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -z "${COURSE_NCCL_ROOT:-}" ]; then
  root=$(python3 -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null) &&
    export COURSE_NCCL_ROOT=$root
fi
log=$out/multi_gpu.txt summary=$out/summary.txt
work=build/accept-multi-gpu-work
: > "$log"
: > "$summary"
status=0
DEFAULT_TAIL=6
# shellcheck source=dev/budget_step.sh
. dev/budget_step.sh
gpus=$(nvidia-smi -L | grep -c '^GPU ')
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1 >> "$summary"
echo "$gpus GPUs" >> "$summary"
step build bash -o pipefail -c "cmake -S . -B build/trainer -G Ninja -DCOURSE_VARIANTS=solution \
  -DCOURSE_TEST_GRADER=OFF > /dev/null && ninja -C build/trainer train_gpt | tail -2" || exit 1
bin=build/trainer/bin
export TRAIN_GPT=$bin/train_gpt
TAIL=3 step tests python3 -m pytest -q -p no:cacheprovider trainer/tests/test_data_parallel.py

# The scaling table: 30 steps of each (the first, which makes the plans, is not in the mean).
gpt2=(-m gpt2-124m -b 16 -t 1024 --steps 30 --val-every 0 --sample-length 0 --no-checkpoint)
table=$out/scaling.txt
printf '%-34s %10s %14s %14s %12s %s\n' configuration ms/step tokens/s "tok/s per GPU" "% of 1 GPU" \
  "MFU per GPU, memory" > "$table"
one_gpu=0
scale() {  # scale NAME N [options]: one row of the table
  local name=$1 n=$2
  shift 2
  local run=$work/$name
  if [ "$n" = 1 ]; then
    TAIL=3 step "$name" "$bin/train_gpt" "${gpt2[@]}" --out "$run" "$@"
  else
    TAIL=3 step "$name" trainer/launch.sh "$n" "${gpt2[@]}" --out "$run" "$@"
  fi
  local mean
  mean=$(grep '^mean over' "$out/step.txt") || return
  local ms tok
  ms=$(sed -E 's/.*: ([0-9.]+) ms\/step.*/\1/' <<< "$mean")
  tok=$(sed -E 's/.* ms\/step, ([0-9]+) tok\/s.*/\1/' <<< "$mean")
  local per=$((tok / n))
  [ "$n" = 1 ] && one_gpu=$per
  local rest
  rest=$(sed -E 's/.*MFU ([0-9.]+%)[^;]*; GPU memory in use after the first step: ([0-9.]+ GiB).*/\1, \2/' <<< "$mean")
  printf '%-34s %10s %14s %14s %11s%% %s\n' "$name" "$ms" "$tok" "$per" \
    "$(python3 -c "print(f'{100 * $per / max($one_gpu, 1):.1f}')")" "$rest" >> "$table"
}
scale "1 GPU" 1
for n in 2 4; do
  [ "$gpus" -ge $n ] || continue
  scale "$n GPUs, buckets of 25 MB (overlap)" $n
  scale "$n GPUs, one all-reduce after" $n --bucket-mb 0
  scale "$n GPUs, ZeRO-1" $n --zero 1
done
grep 'optimizer moments' "$log" | sort | uniq -c >> "$table"
cat "$table" >> "$summary"

# The loss curves: 2 GPUs at B 16 each against one GPU at B 16 x 2 micro-batches (the same data
# in the same order, the same steps).
curve=(-m gpt2-124m -b 16 -t 1024 --steps "$steps" --val-every 250 --no-checkpoint)
TAIL=14 step "curve 2 GPUs" trainer/launch.sh 2 "${curve[@]}" --sample-length 96 --out "$work/curve2"
TAIL=3 step "curve 1 GPU" "$bin/train_gpt" "${curve[@]}" --grad-accum 2 --sample-length 0 \
  --out "$work/curve1"
cp "$work/curve2/loss.csv" "$out/loss_2gpus.csv" 2>/dev/null
cp "$work/curve1/loss.csv" "$out/loss_1gpu_accum2.csv" 2>/dev/null
TAIL=8 step "curves compared" python3 - "$out/loss_1gpu_accum2.csv" "$out/loss_2gpus.csv" <<'EOF'
import csv, sys
def read(path):
    rows = list(csv.DictReader(open(path)))
    train = [float(r["train_loss"]) for r in rows if r["train_loss"]]
    val = {int(r["step"]): float(r["val_loss"]) for r in rows if r["val_loss"]}
    return train, val
(one, one_val), (two, two_val) = read(sys.argv[1]), read(sys.argv[2])
n = min(len(one), len(two))
means = lambda xs: [sum(xs[i:i + 10]) / 10 for i in range(0, n - 9, 10)]
gaps = [abs(a - b) for a, b in zip(means(one), means(two))]
single = [abs(a - b) for a, b in zip(one[:n], two[:n])]
worst = max(range(len(gaps)), key=gaps.__getitem__)
print(f"{n} steps; identical losses at {sum(a == b for a, b in zip(one, two))} of them")
print(f"largest gap of 10-step means: {gaps[worst]:.2e} (steps {10 * worst + 1}-{10 * worst + 10}); "
      f"of single steps: {max(single):.2e}")
for step in sorted(one_val):
    if step in two_val:
        print(f"val loss at step {step}: 1 GPU {one_val[step]:.4f}, 2 GPUs {two_val[step]:.4f}, "
              f"gap {abs(one_val[step] - two_val[step]):.2e}")
EOF
rm -f "$out/step.txt"
cat "$summary"
exit $status
