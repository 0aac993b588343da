#!/usr/bin/env bash
# One quick round of trainer tuning on the GPU (course authors): build, the GPU tests, the PyTorch
# agreement of the `small` model (fp32 and bf16), GPT-2 124M's ms/step alone (20 steps, B=16,
# T=1024, bf16), and its GPU time kernel by kernel under ncu (one step; dev/kernel_times.py).
# For the acceptance with PyTorch's figures beside ours, dev/accept_trainer.sh.
#   OUT=dir dev/trainer_round.sh        (needs data/shakespeare, made by trainer/prepare_data.py)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/trainer-round}
work=build/trainer-round-work
mkdir -p "$out" "$work"
bin=build/trainer/bin
cmake -S . -B build/trainer -G Ninja -DCOURSE_VARIANTS=solution -DCOURSE_TEST_GRADER=OFF > /dev/null &&
  ninja -C build/trainer train_gpt trainer_tests course_cudnn_attention_test | tail -1 || exit 1
build/trainer/common/course_cudnn_attention_test > "$out/cudnn_test.txt" 2>&1; echo "cudnn attention test exit $?: $(tail -1 "$out/cudnn_test.txt")"
"$bin/trainer_tests" > "$out/tests.txt" 2>&1; echo "trainer_tests exit $?: $(tail -1 "$out/tests.txt")"
for dtype in fp32 bf16; do
  python3 trainer/torch_check.py agree --train-gpt $bin/train_gpt --model small --dtype $dtype \
    --out "$work" > "$out/agree_$dtype.txt" 2>&1
  echo "agree $dtype exit $?"; grep -E "ok|FAIL|limit" "$out/agree_$dtype.txt" | head -5
done
"$bin/train_gpt" -m gpt2-124m -b 16 -t 1024 --steps 20 --val-every 0 --sample-length 0 \
  --no-checkpoint --out "$work/bench" > "$out/bench.txt" 2>&1; tail -2 "$out/bench.txt"
ncu --metrics gpu__time_duration.sum --clock-control none --cache-control none --csv \
  --log-file "$out/ncu.csv" "$bin/train_gpt" -m gpt2-124m -b 16 -t 1024 --steps 1 --val-every 0 \
  --sample-length 0 --no-checkpoint --out "$work/ncu" > /dev/null 2>&1
python3 dev/kernel_times.py "$out/ncu.csv" --top 30
