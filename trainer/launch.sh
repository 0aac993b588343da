#!/usr/bin/env bash
# Data-parallel training on N GPUs of this machine: N train_gpt processes, one per GPU, that find
# each other through a fresh rendezvous folder (trainer/data_parallel.h) and sum their gradients
# with NCCL every step. Rank 0 prints, validates, samples and writes --out; the others only train.
#
#   trainer/launch.sh N [train_gpt options...]
#   trainer/launch.sh 2 -m gpt2-124m -b 8 --steps 1000    # the step of -b 16 on one GPU
#
# -b is per GPU: N GPUs at -b B take the steps of one GPU at -b N*B, on the same data in the same
# order. TRAIN_GPT names the program (default build/trainer/bin/train_gpt). The exit status is
# the first failing rank's; when one rank fails, the others are stopped.
set -uo pipefail
if [ $# -lt 1 ] || ! [[ $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: trainer/launch.sh N [train_gpt options...]  (N: the number of GPUs)" >&2
  exit 2
fi
gpus=$1
shift
program=${TRAIN_GPT:-build/trainer/bin/train_gpt}
rendezvous=$(mktemp -d "${TMPDIR:-/tmp}/train_gpt_rendezvous.XXXXXX") || exit 1
trap 'rm -rf "$rendezvous"' EXIT
pids=()
for ((rank = 0; rank < gpus; ++rank)); do
  RANK=$rank WORLD_SIZE=$gpus RENDEZVOUS=$rendezvous "$program" "$@" &
  pids+=($!)
done
status=0
while [ ${#pids[@]} -gt 0 ]; do
  wait -n -p finished "${pids[@]}"
  code=$?
  remaining=()
  for pid in "${pids[@]}"; do [ "$pid" != "$finished" ] && remaining+=("$pid"); done
  pids=("${remaining[@]}")
  if [ $code -ne 0 ] && [ $status -eq 0 ]; then
    status=$code
    [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2> /dev/null
  fi
done
exit $status
