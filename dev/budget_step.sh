# step NAME COMMAND...: runs COMMAND within what is left of BUDGET_S seconds (default 3600), its
# output to $log, its exit status and last ${TAIL:-$DEFAULT_TAIL} lines to $summary; sets status=1
# when it fails or no time is left. Sourced by the acceptance scripts of dev/ (accept_trainer.sh,
# accept_multi_gpu.sh), which set out, log, summary, status and DEFAULT_TAIL first.
step() {
  local name=$1
  shift
  echo "=== $name: $*" >> "$log"
  local start=$SECONDS left=$((${BUDGET_S:-3600} - SECONDS - 15))
  [ $left -gt 10 ] || { echo "=== $name: no time left" >> "$summary"; status=1; return 1; }
  timeout "$left" "$@" > "$out/step.txt" 2>&1
  local rc=$?
  cat "$out/step.txt" >> "$log"
  { echo "=== $name (exit $rc, $((SECONDS - start)) s)"; tail -n "${TAIL:-$DEFAULT_TAIL}" "$out/step.txt"; } >> "$summary"
  [ $rc -eq 0 ] || status=1
  return $rc
}
