#!/usr/bin/env bash
# Module 09 built and tested where it will be, without moving it: a copy of this checkout (no
# .git, no build trees) in build/draft09/tree with move_into_place.sh run in it. No GPU needed.
#
#   dev/drafts/09_quantization/scratch.sh             # copy (or refresh), configure, build, test
#   ARCHS="90 80 75" dev/drafts/09_quantization/scratch.sh build
#
# Steps (each also alone, as the first argument):
#   tree     the copy: made once, then refreshed with the draft's newer files (their times kept,
#            so ninja rebuilds only what changed)
#   build    for each architecture of ARCHS (default 90 80 75): configure build/sm<NN> in the copy
#            (learner and solution variants) and build every target of module 09, the harness's
#            host tests and the emulated checkers (sm 90 only)
#   test     the host tests of the references (harness.host), then module 09's readable solutions
#            with their real checkers on the CPU emulator (dev/emu: correctness cases only)
#   mutants  the planted bugs, on the emulator (grader check --mutants --emulate 09, or the
#            selector given as the second argument: 09/gemm_w4a16)
# JOBS (default 2) is ninja's -j.
set -euo pipefail
draft=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$draft/../../.." && pwd)
tree=$root/build/draft09/tree
archs=${ARCHS:-90 80 75}
jobs=${JOBS:-2}
module=09_quantization

make_tree() {
  if [ ! -d "$tree" ]; then
    mkdir -p "$tree"
    tar -C "$root" --exclude=./build --exclude=./.git --exclude=./.grader --exclude=./.venv \
      -cf - . | tar -xf - -C "$tree"
    # The copy has no virtual environment: the checkout's rewrites the copy's ROADMAP and
    # progress. A refused move leaves no tree behind (the next call would take it for a moved one;
    # set -e does not stop a function called in a && list).
    PYTHON=${PYTHON:-$root/.venv/bin/python} bash "$tree/dev/drafts/$module/move_into_place.sh" ||
      { rm -rf "$tree"; echo "scratch.sh: the move failed, the copy is removed" >&2; return 1; }
    return
  fi
  # Refresh: the draft's newer files where move_into_place.sh put them, their times kept (after a
  # change to course.patch, or a file removed from the draft, delete the tree).
  for path in modules/$module solutions/$module dev/emu/modules/$module; do
    cp -a -u "$draft/$path/." "$tree/$path/"
  done
  for path in notes/$module.md common/include/course/reference/quantize.h \
              common/src/reference/quantize.cpp common/tests/reference_quantize_test.cpp; do
    cp -a -u "$draft/$path" "$tree/$path"
  done
}

build() {
  for arch in $archs; do
    local dir=$tree/build/sm$arch variants="learner;solution"
    [ "$arch" = 90 ] && variants="learner;solution;emulated"
    if [ ! -f "$dir/build.ninja" ]; then
      mkdir -p "$dir"
      cmake -S "$tree" -B "$dir" -G Ninja -DCMAKE_CUDA_ARCHITECTURES="$arch" \
        -DCOURSE_VARIANTS="$variants" -DCOURSE_TEST_GRADER=OFF \
        -DCOURSE_EMULATED_MODULES="$module" > "$dir/configure.log"
    fi
    local targets
    targets=$(ninja -C "$dir" -t targets all | grep -oE "^$module\.[a-z0-9_]+\.[a-z_]+" | sort -u)
    [ "$arch" = 90 ] && targets="$targets course_harness_tests"
    echo "== sm_$arch: $(echo "$targets" | wc -w) targets"
    ninja -C "$dir" -j "$jobs" -k 0 $targets
  done
}

run_tests() {
  local dir=$tree/build/sm90
  "$dir/common/course_harness_tests" --gtest_color=no --gtest_brief=1 --gtest_filter='ReferenceQuantize.*'
  (cd "$dir" && ctest -L emulated --output-on-failure)
}

mutants() {
  (cd "$tree" && "$root/.venv/bin/python" -m grader check --mutants --emulate "${1:-$module}")
}

case "${1:-all}" in
  tree) make_tree ;;
  build) make_tree && build ;;
  test) run_tests ;;
  mutants) mutants "${2:-}" ;;
  all) make_tree && build && run_tests ;;
  *) echo "usage: $0 [tree|build|test|mutants|all]" >&2; exit 2 ;;
esac
