#!/usr/bin/env bash
# The GPU acceptance of issue 28's harness half (inputs that end where unmapped memory begins, two
# input sets in every timed case, the contracts' limits, module 07's diagnoses), in parts that
# each fit one device command on one H100 (estimates from the acceptances in STATUS.md; none has
# run yet):
#
#   OUT=dir dev/accept_rigor.sh refs-a   modules 01-04: every readable solution and fast reference
#                                        passes with its target, every stub reports todo (~280 s)
#   OUT=dir dev/accept_rigor.sh refs-b   module 05 and module 08's four kernel exercises (~280 s)
#   OUT=dir dev/accept_rigor.sh refs-c   module 06 (~250 s)
#   OUT=dir dev/accept_rigor.sh refs-d   module 07 (~260 s)
#   OUT=dir dev/accept_rigor.sh bugs     the planted bugs this work added or changed, 25 of them,
#                                        13 copies of the tree side by side (~330 s)
#   OUT=dir dev/accept_rigor.sh multi-gpu   module 11's two checkers (2 GPUs: nvidia-h100-x2) (~150 s)
#
# Each part is dev/accept.sh without the sm_75 build of the solutions (this work changes the
# checkers and the harness, not the solutions' device code); the parts share the grader's build
# trees on a machine kept warm, so a later part builds only its own exercises. Module 08's
# train_gpt runs the trainer, which the harness does not reach: not here. Logs and tables go to
# $OUT/<part> (default build/accept-rigor/<part>); the end of the output is accept.sh's tables.
# Exit status: accept.sh's.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:-}
# The planted bugs added or changed with the unmapped inputs, the two input sets, the contracts'
# limits and the diagnoses (their exercises: accept.sh finds them).
bugs=(
  look_ahead_read_past_the_end skips_repeated_calls copies_a_kept_result               # 01
  computes_then_copies_a_kept_result load_guard_forgets_columns                        # 01, 02
  tiles_of_16_rows byte_offset_in_32_bits b_path_from_a_pointer b_path_from_k           # 04
  b_fragment_row_major row_state_read_before_posted                                    # 05, 06
  pv_reads_one_key_past_T q_tile_read_past_T no_final_division_by_l L_without_the_max  # 07
  keys_past_T_not_masked no_shared_memory_opt_in no_barrier_after_the_copies_wait      # 07
  scores_in_a_scratch_buffer D_i_dropped dK_without_scale                              # 07
  k_tiles_assumed_whole weight_transpose_kept_across_calls                             # 08
)
kernels_08=(08/gelu 08/embedding 08/adamw 08/linear_backward)
case "$part" in
  refs-a) selection=(01 02 03 04 --no-mutants) ;;
  refs-b) selection=(05 "${kernels_08[@]}" --no-mutants) ;;
  refs-c) selection=(06 --no-mutants) ;;
  refs-d) selection=(07 --no-mutants) ;;
  bugs) selection=(01 02 04 05 06 07 08/linear_backward --only-mutants)
        for name in "${bugs[@]}"; do selection+=(--mutant "$name"); done ;;
  multi-gpu) selection=(11 --no-mutants) ;;
  *) sed -n '2,21p' "$0"; exit 2 ;;
esac
OUT=${OUT:-build/accept-rigor}/$part exec dev/accept.sh "${selection[@]}" --no-oldest-arch
