#!/usr/bin/env bash
# Runs a reference solution's kernels on the CPU (no GPU needed) through the emulator in emu.h.
#
#   dev/emu/run.sh MODULE/EXERCISE DRIVER.cpp [driver arguments]
#     e.g. dev/emu/run.sh 06_softmax_norms/layernorm dev/emu/layernorm_main.cpp
#   PATCH=file   applied (git apply) to a copy of the solution first
#   MUTANT=name  then this planted bug of solutions/MODULE/mutants.toml (its replacement)
#   EMU_CLUSTERS=0 (no thread block clusters: pre-Hopper paths), EMU_OPTIN=<KB> (shared memory a
#   block may opt into: 227 for an H100, 163 for an A100, 99 for consumer Ampere)
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -ge 2 ] || { sed -n '2,10p' "$0"; exit 2; }
exercise=$1 driver=$2; shift 2
module=${exercise%%/*} id=${exercise##*/}
work=build/emu/run-$$  # one folder per run: CTest runs two at once
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/solutions/$module"
cp -r dev/emu/shadow "$work/shadow"
# The real cluster helpers, whose includes then resolve to the shadow headers beside them.
cp common/include/course/cluster.h "$work/shadow/course/"
cp "solutions/$module/$id.cu" "$work/solutions/$module/"
[ -z "${PATCH:-}" ] || git apply -p2 --directory="$work/solutions" "$PATCH"
if [ -n "${MUTANT:-}" ]; then
  python3 - "$work/solutions/$module/$id.cu" "solutions/$module/mutants.toml" "$id" "$MUTANT" <<'PY'
import sys
import tomllib

path, manifest, exercise, name = sys.argv[1:]
with open(manifest, "rb") as f:
    mutants = tomllib.load(f).get("mutant", [])
entry = next((m for m in mutants if m["exercise"] == exercise and m["name"] == name), None)
if entry is None:
    sys.exit(f"emu: no planted bug '{name}' of {exercise} in {manifest}")
old, new = entry["replace"]
with open(path) as f:
    text = f.read()
if text.count(old) != 1:
    sys.exit(f"emu: the text of planted bug '{name}' is not in the solution exactly once")
with open(path, "w") as f:
    f.write(text.replace(old, new))
PY
fi
python3 dev/emu/translate.py "$work/solutions/$module/$id.cu" > "$work/$id.cpp"
g++ -std=c++17 -O2 -g -w -D__CUDA_ARCH__=900 -Idev/emu -I"$work/shadow" -I"modules/$module" \
  -include dev/emu/emu.h "$work/$id.cpp" "$driver" -o "$work/$id"
"$work/$id" "$@"
