#!/usr/bin/env bash
# The acceptance of the fast references' trainer table (issue 27's target: >= 75% of the
# reference table's tokens/s, GPT-2 124M, B 16 x T 1024, bf16) and of the optional bf16 entry
# points that make it (course/entry_point.h), in two device commands on one H100:
#
#   OUT=dir dev/accept_fast_table.sh speed    dev/accept_train_gpt.sh's part speed: `grader train
#                                             --fast` (the reference and the fast table, both
#                                             tokens/s in one command; the op check on step 0
#                                             compares every op of the fast table with the
#                                             reference's on the trainer's own tensors), the same
#                                             binary's tokens/s of both tables, and the GPU time
#                                             per op of each (--profile). Needs data/shakespeare
#                                             (carry it). About 6 minutes from a cold machine.
#   OUT=dir dev/accept_fast_table.sh checks   the checkers of the exercises whose fast references
#                                             gained an entry point, readable and fast, and the
#                                             planted bugs of the new paths (mutants.toml of 01,
#                                             05, 06), in copies of the tree side by side. About 8
#                                             minutes from a cold machine.
#
# Logs go to $OUT (default build/accept-fast-table): one file per step, and summary-PART.txt with
# each step's exit status and its last lines. Exit status 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
part=${1:-}
case "$part" in speed | checks) ;; *) sed -n '2,21p' "$0"; exit 2 ;; esac
out=${OUT:-build/accept-fast-table}
mkdir -p "$out"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 COLUMNS=${COLUMNS:-200}

if [ "$part" = speed ]; then
  OUT="$out" exec dev/accept_train_gpt.sh speed
fi

summary=$out/summary-$part.txt
: > "$summary"
status=0
# shellcheck source=dev/named_step.sh
. dev/named_step.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$summary"

# The planted bugs of the new paths, in copies of the tree (a wgmma_gemm build is more than a
# minute of one core, and a copy runs its bugs one after another): "exercise bug..." per copy,
# started first, in the background, beside the checkers below.
copies=build/accept-fast-table-copies
rm -rf "$copies" && mkdir -p "$copies"
groups=(
  "05/wgmma_gemm mn_major_descriptor_offsets_swapped stream_k_segment_starts_a_k_tile_early"
  "05/wgmma_gemm stream_k_last_arrival_never_seen"
  "05/wgmma_gemm epilogue_bias_dropped gelu_input_stored_after_the_gelu"
  "05/wgmma_gemm accumulate_writes_over_c gelu_derivative_cubic_term"
  "06/layernorm bf16_y_alignment_unchecked bf16_statistics_skip_the_long_row_rest"
  "06/layernorm_backward bf16_dx_written_not_added bf16_dgamma_written_not_added"
  "06/cross_entropy bf16_padding_counted_as_classes bf16_padding_gradient_not_zero"
  "01/vector_add bf16_alignment_of_a_only"
)
for i in "${!groups[@]}"; do
  read -r exercise names <<< "${groups[$i]}"
  copy=$copies/$i
  mkdir -p "$copy"
  tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$copy"
  arguments=()
  for name in $names; do arguments+=(--mutant "$name"); done
  (cd "$copy" && python3 -m grader check --mutants --no-build "$exercise" "${arguments[@]}" \
     > check.log 2>&1; echo $? > check.rc) &
done

# The fast references in full where their float path changed or is new (05 wgmma_gemm: its
# persistent kernel now serves gemm_bf16_epilogue too; 06 layernorm_backward: a new fast
# reference), with their readable solutions and their targets.
TAIL=14 step wgmma-gemm python3 -m grader run 05/wgmma_gemm --solutions || status=1
TAIL=8 step layernorm-backward python3 -m grader run 06/layernorm_backward --solutions || status=1
grep -qE '^\S+.* not met \((>=|per case)' "$out/wgmma-gemm.txt" "$out/layernorm-backward.txt" &&
  status=1
# The others' new cases (their float paths are as they were): each fast reference's bf16 cases
# pass; each readable solution's skip, naming the entry point it lacks.
targets=(01_basics.vector_add 06_softmax_norms.layernorm 06_softmax_norms.cross_entropy
         06_softmax_norms.layernorm_backward 05_gemm_advanced.wgmma_gemm)
step build-checkers bash -c "ninja -C build/fast ${targets[*]/%/.fast} && \
  ninja -C build/solutions ${targets[*]/%/.solution}" || status=1
for target in "${targets[@]:0:3}"; do
  TAIL=6 step "$target.fast" "build/fast/bin/$target.fast" --gtest_filter='*Bf16*' || status=1
done
for target in "${targets[@]}"; do
  filter='*Bf16*'
  [ "$target" = 05_gemm_advanced.wgmma_gemm ] && filter='*Epilogue*'
  TAIL=3 step "$target.solution" "build/solutions/bin/$target.solution" --gtest_filter="$filter" || status=1
  grep -q 'not defined by this file' "$out/$target.solution.txt" || status=1
done

wait
for i in "${!groups[@]}"; do
  copy=$copies/$i
  rc=$(cat "$copy/check.rc")
  { echo "=== planted bugs ${groups[$i]} (exit $rc)"; tail -n 12 "$copy/check.log"; } >> "$summary"
  cp "$copy/check.log" "$out/mutants-$i.txt"
  [ "$rc" = 0 ] || status=1
done

cat "$summary"
exit $status
