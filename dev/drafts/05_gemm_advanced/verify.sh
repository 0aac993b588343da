#!/usr/bin/env bash
# Module 05's first acceptance, in one device command (course authors, on an H100 machine): a copy
# of the course with the module moved into place (move_into_place.sh), then
#   1. dev/accept.sh 05: the solutions, readable and fast, timed alone against their targets; the
#      same built for sm_75 and run from PTX (the tensor-core rungs skip there, with the reason);
#      the untouched stubs (todo); every planted bug, the two planted hangs included (timeouts);
#   2. the SASS evidence: per kernel, its tensor-core, ldmatrix, cp.async, TMA and mbarrier
#      instructions, registers and local memory (cuobjdump), from the trees step 1 built;
#   3. sgemm_warptile's autotuner, on the readable and the fast reference.
#
#   OUT=$OUT bash dev/drafts/05_gemm_advanced/verify.sh [--no-mutants]
#
# $OUT gets solutions.txt, oldest-arch.txt, stubs.txt, mutants.txt (accept.sh's), sass.txt and
# autotune.txt; the end of the output is the tables. About 8 minutes on a fresh H100 machine (most
# of it the planted bugs: --no-mutants leaves them out). Exit status: accept.sh's.
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-build/verify05}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tree=build/verify05-tree
rm -rf "$tree" && mkdir -p "$tree"
tar --exclude=./build --exclude=./.git --exclude=./.grader -cf - . | tar -xf - -C "$tree"
cd "$tree"
bash dev/drafts/05_gemm_advanced/move_into_place.sh || exit 2

OUT=$out bash dev/accept.sh 05 "$@"
status=$?

# The SASS of every kernel of the module's solutions and fast references.
{
  for binary in build/solutions/bin/05_gemm_advanced.* build/fast/bin/05_gemm_advanced.*; do
    [ -x "$binary" ] || continue
    echo "== $binary"
    cuobjdump -res-usage "$binary" 2>/dev/null | grep -A1 -E "Function .*(gemm|sgemm_warptile)" |
      grep -E "Function|REG" | sed -E 's/ +TEXTURE.*//'
    cuobjdump -sass "$binary" 2>/dev/null |
      grep -oE "(HGMMA|HMMA)[.A-Z0-9x]*|LDSM[.A-Z0-9]*|LDGSTS[.A-Z0-9]*|UTMALDG[.A-Z0-9]*|SYNCS\.[.A-Z0-9]*|USETMAXREG[.A-Z]*|WARPGROUP\.[A-Z]*|FFMA|LDL|STL" |
      sort | uniq -c | sort -rn
  done
} > "$out/sass.txt" 2>&1

# The autotuner: every configuration the file lists, checked, then timed at 4096^3.
{
  for binary in build/solutions/bin/05_gemm_advanced.sgemm_warptile.solution \
                build/fast/bin/05_gemm_advanced.sgemm_warptile.fast; do
    echo "== $binary"
    [ -x "$binary" ] && timeout 180 "$binary" --gtest_also_run_disabled_tests \
      --gtest_filter='*Autotune*' --gtest_color=no 2>&1 | grep -E "autotune|FAILED|wrong|PASSED"
  done
} > "$out/autotune.txt" 2>&1

echo "---- SASS (tensor-core and copy instructions, per binary) ----"
grep -E "^==|HGMMA|HMMA|LDSM|UTMALDG|LDGSTS|LDL|STL" "$out/sass.txt" | sed -E 's/ +/ /g'
echo "---- autotune ----"
cat "$out/autotune.txt"
exit $status
