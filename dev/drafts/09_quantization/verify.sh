#!/usr/bin/env bash
# Module 09's first acceptance, in device commands (course authors, on an H100 machine): a copy of
# the course with the module moved into place (move_into_place.sh), then
#   1. dev/accept.sh 09: the readable solutions timed alone against their (provisional) targets;
#      the same built for sm_75 and run from PTX (the two tensor-core exercises skip there, with
#      the reason); the untouched stubs (todo); every planted bug (or a part of these: the
#      options go to accept.sh, e.g. --no-mutants, --only-mutants, --memcheck, --mutant NAME;
#      exercises named as 09/gemm_w4a16 take the whole module's place);
#   2. the accuracy lines of every solution's correctness cases (accuracy.txt);
#   3. the SASS evidence (sass.txt): per binary, the conversions (I2F, which the GEMVs must not
#      have in their loops), the LOP3 / PRMT / HSUB2 / FADD of the exponent tricks, HMMA in the
#      tensor-core kernels, registers and local memory.
#
#   OUT=$OUT bash dev/drafts/09_quantization/verify.sh --no-mutants --memcheck   # about 6 min
#   OUT=$OUT bash dev/drafts/09_quantization/verify.sh --only-mutants            # about 5 min
#
# $OUT gets accept.sh's files (solutions.txt, oldest-arch.txt, stubs.txt, checking.txt,
# mutants.txt, memcheck.txt), accuracy.txt and sass.txt; the end of the output is the tables.
# Exit status: accept.sh's. (Times: estimates from module 05's draft, not measured.)
set -uo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-build/verify09}
mkdir -p "$out"
out=$(cd "$out" && pwd)
tree=build/verify09-tree
rm -rf "$tree" && mkdir -p "$tree"
tar --exclude=./build --exclude=./.git --exclude=./.grader --exclude=./.venv -cf - . |
  tar -xf - -C "$tree"
cd "$tree"
bash dev/drafts/09_quantization/move_into_place.sh || exit 2

# Exercises of the module named (09/<exercise>) take its place; the other arguments are accept.sh's.
selectors=() options=()
for argument in "$@"; do
  case $argument in
    09/*) selectors+=("$argument") ;;
    *) options+=("$argument") ;;
  esac
done
[ ${#selectors[@]} -gt 0 ] || selectors=(09)
OUT=$out bash dev/accept.sh "${selectors[@]}" "${options[@]}"
status=$?

binaries=(build/solutions/bin/09_quantization.*.solution)
if [ -x "${binaries[0]}" ]; then
  # The format's accuracy, from the correctness cases (the timed and large cases left out).
  for binary in "${binaries[@]}"; do
    echo "== $binary"
    "$binary" --gtest_color=no \
      --gtest_filter='-*Bandwidth*:*Against*:*Rate*:*MoreThan*:*Largest*' 2>&1 |
      grep -E "^\[accuracy\]|FAILED|^\[  PASSED"
  done > "$out/accuracy.txt" 2>&1

  # Per kernel of the module (the harness's own kernels left out): registers, and the count of
  # each instruction that tells the story.
  {
    for binary in "${binaries[@]}"; do
      echo "== $binary"
      cuobjdump -res-usage "$binary" 2>/dev/null |
        grep -A1 -E "Function .*(quantize|pack|gemv|gemm|mxfp8|tile_int4)" |
        grep -E "Function|REG" | sed -E 's/ +TEXTURE.*//'
      cuobjdump -sass "$binary" 2>/dev/null | awk '
        /Function :/ { kernel = $3; keep = kernel ~ /quantize|pack|gemv|gemm|mxfp8|tile_int4/ }
        keep && match($0, /(I2F|F2I|HMMA|LDSM|HADD2|HFMA2|LOP3|PRMT|RED|ATOM|LDL|STL)[.A-Z0-9_]*/) {
          count[kernel " " substr($0, RSTART, RLENGTH)]++
        }
        END { for (k in count) print "  " count[k], k }' | sort -k2,2 -k1,1nr
    done
  } > "$out/sass.txt" 2>&1
fi

echo "---- accuracy ----"
cat "$out/accuracy.txt" 2>/dev/null
echo "---- SASS (conversions, tensor-core and exponent-trick instructions, per binary) ----"
cat "$out/sass.txt" 2>/dev/null
exit $status
