# Sourced by a draft's verify.sh (dev/drafts/NN_topic/verify.sh), the part every draft's first
# acceptance shares: a copy of the checkout with the draft moved into place (build/verifyNN-tree,
# the working directory afterwards), then dev/accept.sh on it, its files going to "$out".
# Exercises of the module named NN/<exercise> take the whole module's place; the other arguments
# are accept.sh's. Sets `status` to accept.sh's exit status; exits 2 when the move fails.
#
#   draft_acceptance 09_quantization "$@"

draft_acceptance() {
  local draft=$1 number=${1%%_*} argument
  shift
  local tree=build/verify$number-tree selectors=() options=()
  rm -rf "$tree" && mkdir -p "$tree"
  tar --exclude=./build --exclude=./.git --exclude=./.grader --exclude=./.venv -cf - . |
    tar -xf - -C "$tree"
  cd "$tree" || exit 2
  bash "dev/drafts/$draft/move_into_place.sh" || exit 2
  for argument in "$@"; do
    case $argument in
      "$number"/*) selectors+=("$argument") ;;
      *) options+=("$argument") ;;
    esac
  done
  [ ${#selectors[@]} -gt 0 ] || selectors=("$number")
  OUT=$out bash dev/accept.sh "${selectors[@]}" "${options[@]}"
  status=$?
}
