#!/usr/bin/env bash
# The acceptance of the trainer's bf16 attention on Hopper (issue 34, part 3: `--attention flash`
# within 3% of cuDNN's step time): module 07's flash_wgmma and flash_wgmma_backward fast
# references in the reference's flash way, reading the packed qkv in place (flash_wgmma_packed.h).
# One device command on one warm H100, carrying data/shakespeare:
#
#   OUT=dir dev/accept_trainer_attention.sh     # STEPS="build steps-cudnn ..." runs those alone
#
# Steps: the build (build/trainer, sm_90a, the solution and fast variants); the two fast
# references in their checkers (the contract's cases after the 3D tensor maps, the packed entry
# points', the forward at the trainer's shape against cuDNN, the backward's rates, the trainer's
# shape among them); the planted bugs of the packed entry points; trainer_tests' bf16 model and
# exercise tables;
# 20 steps of GPT-2 124M (B 16, T 1024) with --attention cudnn and flash (the `attention:` line
# and the mean step time of each); --kernels profile of both (attention_forward and
# attention_backward per 5 steps); torch_check.py agree with --attention flash (every line ok).
# Logs go to $OUT (default build/accept-trainer-attention): one file per step, and summary.txt
# with each step's exit status and its last lines. Exit status 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-build/accept-trainer-attention}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}
summary=$out/summary.txt
: > "$summary"
status=0
# shellcheck source=dev/named_step.sh
. dev/named_step.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$summary"
bin=build/trainer/bin
gpt2=(-m gpt2-124m -b 16 -t 1024 --val-every 0 --sample-length 0 --no-checkpoint)

build() {
  cmake -S . -B build/trainer -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCOURSE_VARIANTS="solution;fast" -DCOURSE_TEST_GRADER=OFF &&
    ninja -C build/trainer train_gpt trainer_tests 07_attention.flash_wgmma.fast \
      07_attention.flash_wgmma_backward.fast 07_attention.flash_wgmma.solution \
      07_attention.flash_wgmma_backward.solution
}
TAIL=3 step build build || { cat "$summary"; exit 1; }
TAIL=30 step checker-forward "$bin/07_attention.flash_wgmma.fast" \
  --gtest_filter='FlashWgmma.EdgeShapes:FlashWgmma.LargeScores:FlashWgmma.Packed*:FlashWgmma.RateTrainerShape' || status=1
TAIL=30 step checker-backward "$bin/07_attention.flash_wgmma_backward.fast" \
  --gtest_filter='FlashWgmmaBackward.EdgeShapes:FlashWgmmaBackward.LargeScores:FlashWgmmaBackward.Packed*:FlashWgmmaBackward.Rate*' || status=1
# The readable solutions define no packed entry point: their packed cases skip, naming it.
TAIL=6 step checker-readable bash -c "$bin/07_attention.flash_wgmma.solution --gtest_filter='*Packed*' &&
  $bin/07_attention.flash_wgmma_backward.solution --gtest_filter='*Packed*'" || status=1
TAIL=8 step mutant-forward python3 -m grader check 07/flash_wgmma --mutants \
  --mutant packed_output_in_the_next_heads_columns || status=1
TAIL=8 step mutant-backward python3 -m grader check 07/flash_wgmma_backward --mutants \
  --mutant packed_tiles_from_the_next_heads_columns --mutant packed_dk_and_dv_swapped \
  --mutant packed_dq_never_converted || status=1
TAIL=8 step trainer-tests "$bin/trainer_tests" --gtest_filter='GpuModel.Bf16*:ExerciseTables.*' || status=1
for a in cudnn flash; do
  TAIL=4 step "steps-$a" bash -c "$bin/train_gpt ${gpt2[*]} --steps 20 --attention $a --out /tmp/s-$a \
    | grep -E '^attention|^mean over'; exit \${PIPESTATUS[0]}" || status=1
done
for a in cudnn flash; do
  TAIL=6 step "profile-$a" bash -c "$bin/train_gpt ${gpt2[*]} --steps 6 --kernels profile --attention $a \
    --out /tmp/p-$a | grep -E 'attention'; exit \${PIPESTATUS[0]}" || status=1
done
TAIL=12 step agree-flash python3 trainer/torch_check.py agree --train-gpt "$bin/train_gpt" \
  --model small --dtype bf16 --attention flash --out build/agree || status=1
cat "$summary"
exit $status
