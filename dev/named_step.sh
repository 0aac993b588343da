# shellcheck shell=bash disable=SC2154  # out and summary: set by the script that sources this
# step NAME COMMAND...: runs COMMAND, its output to $out/NAME.txt, its exit status, seconds and last
# ${TAIL:-15} lines to $summary; returns COMMAND's status. Sourced by the acceptance scripts of
# dev/ whose steps each keep a log of their own (accept_train_gpt.sh, accept_fast_table.sh), which
# set out and summary first; dev/budget_step.sh is the same with a time budget and one log.
# With STEPS set (names separated by spaces), a step not named there is skipped, and says so.
step() {
  local name=$1
  shift
  if [[ -n ${STEPS:-} && " $STEPS " != *" $name "* ]]; then
    echo "=== $name (skipped: not in STEPS)" >> "$summary"
    return 0
  fi
  local start=$SECONDS
  "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  { echo "=== $name (exit $rc, $((SECONDS - start)) s): $*"; tail -n "${TAIL:-15}" "$out/$name.txt"; } >> "$summary"
  return $rc
}
