#!/usr/bin/env bash
# Why is train_gpt on 2 GPUs slower with the gradients summed during the backward than after it?
# One device command (several GPUs): GPT-2 124M, B 16 per GPU, 20 steps of each configuration:
# bucket sizes, NCCL's channel count (SMs its kernels take), the communication stream's priority.
# Expects build/trainer/bin/train_gpt (dev/accept_multi_gpu.sh's build). Results go to
# dev/tuning/11_multi_gpu.md; this script goes once the question is decided.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=build/trainer/bin/train_gpt
run() {  # run NAME GPUS [env...] -- [options...]
  local name=$1 n=$2
  shift 2
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local line
  line=$(env "${envs[@]}" TRAIN_GPT=${TRAIN_GPT:-$bin} trainer/launch.sh "$n" -m gpt2-124m -b 16 \
    --steps 20 --val-every 0 --sample-length 0 --no-checkpoint --out build/sweep "$@" 2>&1 |
    grep '^mean over')
  printf '%-46s %s\n' "$name" "${line#mean over 19 steps: }"
}
run "2 GPUs, after the backward" 2 -- --bucket-mb 0
run "2 GPUs, buckets 25 MB" 2 -- --bucket-mb 25
run "2 GPUs, buckets 100 MB" 2 -- --bucket-mb 100
run "2 GPUs, one bucket at the end (1 GB)" 2 -- --bucket-mb 1000
run "2 GPUs, buckets 25 MB, NCCL_MAX_NCHANNELS=4" 2 NCCL_MAX_NCHANNELS=4 -- --bucket-mb 25
run "2 GPUs, buckets 25 MB, NCCL_MAX_NCHANNELS=8" 2 NCCL_MAX_NCHANNELS=8 -- --bucket-mb 25
run "2 GPUs, buckets 100 MB, NCCL_MAX_NCHANNELS=8" 2 NCCL_MAX_NCHANNELS=8 -- --bucket-mb 100
run "2 GPUs, after, NCCL_MAX_NCHANNELS=8" 2 NCCL_MAX_NCHANNELS=8 -- --bucket-mb 0
if [ -x build/trainer-nopri/bin/train_gpt ]; then
  TRAIN_GPT=build/trainer-nopri/bin/train_gpt run "2 GPUs, buckets 25 MB, normal priority" 2 -- --bucket-mb 25
  TRAIN_GPT=build/trainer-nopri/bin/train_gpt run "2 GPUs, buckets 100 MB, normal priority" 2 -- --bucket-mb 100
fi
run "4 GPUs, after the backward" 4 -- --bucket-mb 0
run "4 GPUs, buckets 25 MB" 4 -- --bucket-mb 25
run "4 GPUs, buckets 100 MB, NCCL_MAX_NCHANNELS=8" 4 NCCL_MAX_NCHANNELS=8 -- --bucket-mb 100
