#!/usr/bin/env bash
# notebooks/free_gpu.ipynb run on a GPU through dev/run_notebook.py (course authors, on the device
# machine), in three parts, each meant to fit one device command; run them back to back on one
# machine (the build trees carry over from one part to the next):
#   dev/accept_notebook.sh a   cells 1-8: the GPU, the course, the install, grader doctor, module 01,
#                              a hint, the profile of 02/transpose, the report
#   dev/accept_notebook.sh b   cells 9-10: modules 05 and 07 on the tensor cores
#   dev/accept_notebook.sh c   cell 11: the trainer's small preset, 100 steps (needs data/shakespeare:
#                              carry it, the device machine cannot fetch it)
#   Parts b and c run cells 2 and 3 first (the course's folder, the imports); c runs cell 5 too
#   where the grader's tree is not configured yet.
#   ARCH=75   the T4's build on this GPU: the notebook run in a copy of the tree
#             (build/notebook-sm75, made once) configured with CUDAARCHS=75, its code JIT-compiled
#             from PTX: modules 05 and 07 in fp16 with sm_75's instructions, mma_pipeline and
#             wgmma_gemm skipped. train_gpt picks its precision from the GPU (bf16 here), so part c
#             then also trains in fp32, the T4's.
#   OUT=dir   where notebook-<part>.txt (notebook-<part>-sm75.txt) goes (default build/accept)
# Exit status: dev/run_notebook.py's, 0 when every cell ran.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
case "${1:-}" in
  a) cells=1-8 ;;
  b) cells=2,3,9-10 ;;
  c) cells=2,3,11 ;;
  *) sed -n '2,18p' "$0"; exit 2 ;;
esac
out=${OUT:-build/accept}
mkdir -p "$out"
course=$PWD log=$out/notebook-$1.txt
case "${ARCH:-}" in
  "") ;;
  75)
    course=$PWD/build/notebook-sm75 log=$out/notebook-$1-sm75.txt
    export CUDAARCHS=75
    if [ ! -f "$course/CMakeLists.txt" ]; then
      mkdir -p "$course" && tar --exclude=./build --exclude=./.git --exclude=./.venv -cf - . | tar -xf - -C "$course"
    fi
    # The data carried into this call, also where the copy was made before it came.
    [ -d data/shakespeare ] && mkdir -p "$course/data" && cp -r data/shakespeare "$course/data/" ;;
  *) echo "ARCH: 75 (the T4's build) or unset" >&2; exit 2 ;;
esac
# Cell 11 builds train_gpt in the grader's tree, which cell 5 (`grader run 01`) configures.
[ "$1" = c ] && [ ! -f "$course/build/learner/build.ninja" ] && cells=2,3,5,11
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
COURSE_DIR=$course python3 dev/run_notebook.py notebooks/free_gpu.ipynb --cells "$cells" 2>&1 |
  tee "$log"
status=$?
if [ "$1" = c ] && [ -n "${ARCH:-}" ] && [ "$status" = 0 ]; then
  echo "=== the T4's precision: fp32"
  (cd "$course" && build/learner/bin/train_gpt -m small -b 8 --steps 100 --val-every 25 \
    --dtype fp32 --out out/notebook-fp32) 2>&1 | tee -a "$log"
  status=$?
fi
exit "$status"
