#!/usr/bin/env bash
# Module 10's first acceptance, in device commands (course authors, on an H100 machine): a copy of
# the course with the module moved into place (move_into_place.sh), then
#   1. dev/accept.sh 10: the readable solutions timed alone against their (provisional) targets;
#      the same built for sm_75 and run from PTX (pairwise_cosine skips there, naming sm_80); the
#      untouched stubs (todo); every planted bug (or a part of these: the options go to
#      accept.sh, e.g. --no-mutants, --only-mutants, --memcheck, --mutant NAME; exercises named
#      as 10/pairwise_cosine take the whole module's place);
#   2. the distribution lines of sample's and speculative_verify's statistical tests and the
#      timed lines of the five checkers (figures.txt);
#   3. the SASS evidence (sass.txt): per kernel of the module, registers, local memory (LDL/STL:
#      none expected), the 16-byte loads of the caches (LDG.E.128), the shuffles and the shared
#      atomics of the selects and of the first rejection (ATOMS), pairwise_cosine's tensor-core
#      instructions (HMMA, LDSM: ldmatrix, LDGSTS: cp.async).
#
#   OUT=$OUT bash dev/drafts/10_inference/verify.sh --no-mutants --memcheck
#   OUT=$OUT bash dev/drafts/10_inference/verify.sh --only-mutants
#
# $OUT gets accept.sh's files (solutions.txt, oldest-arch.txt, stubs.txt, checking.txt,
# mutants.txt, memcheck.txt), figures.txt and sass.txt; the end of the output is the tables.
# Exit status: accept.sh's. (ACCEPTANCE.md has the commands of the next run and what their output
# must show. The figures and the SASS come from the solutions' build, so the --only-mutants run
# leaves them empty.)
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-build/verify10}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tree=build/verify10-tree
rm -rf "$tree" && mkdir -p "$tree"
tar --exclude=./build --exclude=./.git --exclude=./.grader --exclude=./.venv -cf - . |
  tar -xf - -C "$tree"
cd "$tree"
bash dev/drafts/10_inference/move_into_place.sh || exit 2

# Exercises of the module named (10/<exercise>) take its place; the other arguments are accept.sh's.
selectors=() options=()
for argument in "$@"; do
  case $argument in
    10/*) selectors+=("$argument") ;;
    *) options+=("$argument") ;;
  esac
done
[ ${#selectors[@]} -gt 0 ] || selectors=(10)
OUT=$out bash dev/accept.sh "${selectors[@]}" "${options[@]}"
status=$?

binaries=(build/solutions/bin/10_inference.*.solution)
if [ -x "${binaries[0]}" ]; then
  # The timed figures and the chi-square lines, from the solutions' own runs.
  for binary in "${binaries[@]}"; do
    echo "== $binary"
    "$binary" --gtest_color=no 2>&1 |
      grep -E "^\[distribution\]|GB/s|TFLOP/s|FAILED|^\[  PASSED|SKIPPED \]"
  done > "$out/figures.txt" 2>&1

  {
    for binary in "${binaries[@]}"; do
      echo "== $binary"
      cuobjdump -res-usage "$binary" 2>/dev/null |
        grep -A1 -E "Function .*(decode|sample|speculative|topk|pairwise|inverse_norms)" | grep -E "Function|REG" |
        sed -E 's/ +TEXTURE.*//'
      cuobjdump -sass "$binary" 2>/dev/null | awk '
        /Function :/ { kernel = $3; keep = kernel ~ /decode|sample|speculative|topk|pairwise|inverse_norms/ }
        keep && match($0, /(LDG\.E\.128|LDG\.E\.64|LDG\.E|SHFL\.[A-Z]+|ATOMS\.[A-Z0-9.]+|MUFU\.EX2|HMMA\.[0-9A-Z.]+|LDSM\.[0-9A-Z.]+|LDGSTS[.A-Z0-9]*|LDL|STL)[.A-Z0-9_]*/) {
          count[kernel " " substr($0, RSTART, RLENGTH)]++
        }
        END { for (k in count) print "  " count[k], k }' | sort -k2,2 -k1,1nr
    done
  } > "$out/sass.txt" 2>&1
fi

echo "---- figures (timed cases, chi-square) ----"
cat "$out/figures.txt" 2>/dev/null
echo "---- SASS (16-byte loads, shuffles, shared atomics, local memory; per kernel) ----"
cat "$out/sass.txt" 2>/dev/null
exit $status
