#!/usr/bin/env bash
# The trainer's generation with a KV cache on a GPU in one command (course authors, on the device
# machine): build; the GPU tests of generation (the reference's generation ops, every decoding
# step's logits against the CPU reference and against generation without the cache, the same
# tokens both ways at batch 1 and 4 past the context, the decoding steps as CUDA graphs against the
# same steps launched op by op, bit for bit; with them the whole of trainer_tests, since the
# model's forward pass was split for the prefill); the command line's (the bench's lines with and
# without graphs, the same text with the cache and without); `small` trained 300 steps on
# data/shakespeare, then 4 samples of 300 tokens from its checkpoint with the cache and without
# (past its context of 256), in fp32 and bf16 (how far they agree, shown); and the bench: GPT-2 124M
# untrained, 1024 new tokens per sequence at batch 1 and 16, with the cache against without (issue
# 33's target: 10x), twice: each decoding step a CUDA graph (the trainer's way), then with
# --no-cuda-graph (its kernels launched one by one), so that the graph's gain shows.
#
#   OUT=dir BUDGET_S=540 dev/accept_generation.sh [tests|bench]   (needs data/shakespeare, made by
#                                     trainer/prepare_data.py): both parts (about 5 minutes on a
#                                     machine whose build/trainer is warm from accept_trainer.sh;
#                                     a cold tree's build adds 3 or 4, so give each part a command:
#                                     `tests` builds and runs everything but the bench, `bench`
#                                     builds what is left and runs the bench both ways, about 3
#                                     minutes)
#   FP16=1 OUT=dir BUDGET_S=540 dev/accept_generation.sh    the T4's mode on this GPU: the trainer
#                                     built for compute_75 alone (the driver compiles its PTX for
#                                     this GPU), its generation tests (fp32 and fp16), and the
#                                     bench of GPT-2 124M in fp16 from it, with graphs and without
#                                     (about 7 minutes)
# Logs go to $OUT (default build/accept-generation): generation.txt holds everything, summary.txt
# the results. Exit status 0 when every check passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
part=${1:-all}
case $part in all | tests | bench) ;; *) echo "usage: $0 [tests|bench]" >&2; exit 2 ;; esac
out=${OUT:-build/accept-generation}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
log=$out/generation.txt summary=$out/summary.txt
work=build/accept-generation-work  # checkpoints and texts: not under $OUT
mkdir -p "$work"
: > "$log"
: > "$summary"
status=0
DEFAULT_TAIL=12
# shellcheck source=dev/budget_step.sh
. dev/budget_step.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$summary"
# The tree of accept_trainer.sh (its options), so that a warm machine builds little.
configure="-G Ninja -DCOURSE_VARIANTS=solution -DCOURSE_TEST_GRADER=OFF"
tree=build/trainer
if [ "${FP16:-0}" = 1 ]; then
  tree=build/trainer-sm75
  configure="$configure -DCMAKE_CUDA_ARCHITECTURES=75"
fi
step build bash -o pipefail -c "cmake -S . -B $tree $configure > /dev/null && \
  ninja -C $tree train_gpt trainer_tests | tail -3" || exit 1
bin=$tree/bin
pytests="generat or bench"
if [ "${FP16:-0}" = 1 ]; then
  # Built for compute_75, bf16 is not the trainer's (its products need sm_80): fp32 and fp16.
  TAIL=6 step gpu-tests "$bin/trainer_tests" \
    --gtest_filter='GenerationOps.*:Generation.*:Sampling.*:KvCache.*-*Bf16*'
  TAIL=4 step pytest env TRAIN_GPT=$bin/train_gpt python3 -m pytest -q -p no:cacheprovider -s \
    trainer/tests/test_cli.py -k "$pytests"
  TAIL=6 step bench-gpt2-fp16 "$bin/train_gpt" --generate-bench 1024 -m gpt2-124m --dtype fp16
  TAIL=6 step bench-gpt2-fp16-no-graph "$bin/train_gpt" --generate-bench 1024 -m gpt2-124m \
    --dtype fp16 --no-cuda-graph
  rm -f "$out/step.txt"
  cat "$summary"
  exit $status
fi
# GPT-2 124M's bench, each decoding step a CUDA graph, then its kernels launched one by one.
bench() {
  TAIL=6 step bench-gpt2 "$bin/train_gpt" --generate-bench 1024 -m gpt2-124m
  TAIL=6 step bench-gpt2-no-graph "$bin/train_gpt" --generate-bench 1024 -m gpt2-124m --no-cuda-graph
}
if [ "$part" = bench ]; then
  bench
  rm -f "$out/step.txt"
  cat "$summary"
  exit $status
fi
TAIL=8 step gpu-tests "$bin/trainer_tests"
# What the tests print: the logits' largest differences, the draws that parted and why, the steps
# a graph ran.
grep -E "largest logit differences|draws differ|the same tokens for|bit for bit" "$log" >> "$summary"
TAIL=6 step pytest env TRAIN_GPT=$bin/train_gpt python3 -m pytest -q -p no:cacheprovider -s \
  trainer/tests/test_cli.py -k "$pytests"
TAIL=4 step train-small "$bin/train_gpt" -m small -b 16 -t 256 --steps 300 --val-every 100 \
  --val-batches 10 --sample-length 0 --out "$work/small"
# 4 samples of 300 tokens (past the context of 256) both ways from the checkpoint, the same seed:
# where the texts part (a draw within the two ways' rounding of a boundary: the tests above hold
# every parting draw to that; here only shown), and the start of the text.
# shellcheck disable=SC2317  # run by step, through bash -c
compare() {  # compare DTYPE
  local generate=("$bin/train_gpt" --generate --resume "$work/small/model.ckpt" --dtype "$1"
    --generate-batch 4 --sample-length 300 --temperature 0.8 --top-k 40 --top-p 0.95 --seed 7)
  "${generate[@]}" > "$work/cached-$1.txt" &&
    "${generate[@]}" --no-kv-cache > "$work/uncached-$1.txt" &&
    python3 - "$work/cached-$1.txt" "$work/uncached-$1.txt" "$1" <<'EOF'
import sys
cached, uncached = (open(path, encoding="utf-8", errors="replace").read() for path in sys.argv[1:3])
split = lambda text: text.split("--- sequence ")[1:]
for b, (c, u) in enumerate(zip(split(cached), split(uncached))):
    same = next((i for i, (x, y) in enumerate(zip(c, u)) if x != y), min(len(c), len(u)))
    print(f"{sys.argv[3]}, sequence {b + 1}: " +
          ("the same text both ways" if c == u else f"the same text for {same} characters"))
print(cached[:600])
EOF
}
export -f compare
export bin work
TAIL=5 step generate-small-fp32 bash -c "compare fp32"
TAIL=5 step generate-small-bf16 bash -c "compare bf16"
[ "$part" = tests ] || bench
rm -f "$out/step.txt"
cat "$summary"
exit $status
