#!/usr/bin/env bash
# Where pairwise_cosine's fast reference spends its time at N 8192, D 768 (course authors, on a
# Hopper GPU, from the repository root; about 40 s): the kernel as committed, without its global
# stores (PC_NO_STORES: the epilogue computes and stages, stores nothing), and without its
# epilogue (PC_NO_EPILOGUE: the products alone), each against cuBLAS's bf16 N x N x D GEMM timed in
# the same process. The variants are made from solutions/10_inference/pairwise_cosine_fast.cu by
# text hooks (below), so they follow the committed file; a hook that no longer matches stops here.
# Twelfth session, H100 80GB HBM3, the epilogue of then: 63.7% / 58.6% / 97.7% of cuBLAS's rate.
# Thirteenth session, H200, the kernel as committed: 81.0% and 81.2% (two runs), and 112.5% for
# the products alone, by the same hooks in a session script (dev/tuning/10_inference.md); the
# hooks here were rewritten for the new epilogue and compiled, not yet run in this script.
set -euo pipefail
cd "$(dirname "$0")"
work=${WORK:-/tmp/pairwise_epilogue}
mkdir -p "$work"
python3 - "$work" <<'PY'
import sys
from pathlib import Path
work = Path(sys.argv[1])
src = Path("../../../solutions/10_inference/pairwise_cosine_fast.cu").read_text()
hooks = {
    "            if (unit.col0 > unit.row0 && unit.col0 + kBN <= N)\n"
    "                sum += store_distances<false>(acc, inverse_row, column_norms, distances, N, unit,\n"
    "                                              thread, staging);\n"
    "            else\n"
    "                sum += store_distances<true>(acc, inverse_row, column_norms, distances, N, unit,\n"
    "                                             thread, staging);":
    "#if defined(PC_NO_EPILOGUE)\n            sum += acc[0][0] + acc[1][63];\n#else\n"
    "            if (unit.col0 > unit.row0 && unit.col0 + kBN <= N)\n"
    "                sum += store_distances<false>(acc, inverse_row, column_norms, distances, N, unit,\n"
    "                                              thread, staging);\n"
    "            else\n"
    "                sum += store_distances<true>(acc, inverse_row, column_norms, distances, N, unit,\n"
    "                                             thread, staging);\n#endif",
    "__stcs(reinterpret_cast<float4*>(place[i] + c), body[i][pass]);":
    "PC_STORE4(reinterpret_cast<float4*>(place[i] + c), body[i][pass]);",
    "__stcs(place[i] + end_column[i], end[i]);": "PC_STORE1(place[i] + end_column[i], end[i]);",
}
for old, new in hooks.items():
    if src.count(old) != 1:
        sys.exit(f"a hook no longer matches pairwise_cosine_fast.cu: {old[:60]!r}")
    src = src.replace(old, new)
stores = """#if defined(PC_NO_STORES)  // a store that never happens, so that the values stay computed
#define PC_STORE4(p, v) do { if ((v).x == 12345.0f) __stcs(p, v); } while (0)
#define PC_STORE1(p, v) do { if ((v) == 12345.0f) __stcs(p, v); } while (0)
#else
#define PC_STORE4(p, v) __stcs(p, v)
#define PC_STORE1(p, v) __stcs(p, v)
#endif
"""
(work / "pairwise_cosine_fast_hooked.cu").write_text(stores + src)
PY
root=$PWD/../../..
for variant in BASE NO_STORES NO_EPILOGUE; do
  flag=""; [ $variant != BASE ] && flag=-DPC_$variant
  nvcc -gencode arch=compute_90a,code=sm_90a -O3 -std=c++17 -I"$work" -I"$root/common/include" \
    -I"$root/solutions/10_inference" -I"$root/modules/10_inference" -DVARIANT="\"$variant\"" $flag \
    bench.cu "$root/common/src/tensor_map.cpp" -lcublas -lcuda -o "$work/$variant" &
done
wait
for variant in BASE NO_STORES NO_EPILOGUE; do "$work/$variant"; done
