#!/usr/bin/env bash
# Moves a draft module from dev/drafts/<module>/ to where the course picks it up, in the checkout
# this script lies in (or in a copy of it without .git, like build/draft09/tree: then outside
# git's index). Each draft's move_into_place.sh calls it with the draft's own files:
#
#   dev/drafts/move_draft.sh MODULE [PATH...]    # PYTHON=... to name the grader's Python
#     MODULE  the draft's folder, 09_quantization: modules/MODULE, solutions/MODULE,
#             notes/MODULE.md and dev/emu/modules/MODULE move, with every PATH (the CPU
#             references and their host tests, which CMake globs)
#
# Applies the draft's course.patch where it has one (the shared files that name the module),
# writes the grader's blocks of progress.md and ROADMAP.md again (dev/regenerate_blocks.py: the
# module's week is planned in grader/templates/roadmap_checklist.md.j2 already), and removes the
# draft folder.
#
# Everything is checked before anything changes: a path already in place, a hunk of course.patch
# that does not apply (git apply --check: all or nothing), a Python without the grader's packages
# (PYTHON, else the checkout's .venv/bin/python, else python3) stop it with the reason and exit
# status 2, the tree untouched.
set -Eeuo pipefail  # -E: the ERR trap below fires inside the functions too
root=$(cd "$(dirname "$0")/../.." && pwd)
module=${1:?usage: move_draft.sh MODULE [PATH...]}
shift
number=${module%%_*}
draft=dev/drafts/$module
cd "$root"
refuse() { echo "move_draft.sh $module: $*; nothing was changed" >&2; exit 2; }

[ -d "$draft/modules/$module" ] || refuse "$draft is gone: module $number has moved already"
paths=(modules/"$module" solutions/"$module" notes/"$module".md "$@" dev/emu/modules/"$module")
for path in "${paths[@]}"; do
  [ ! -e "$path" ] || refuse "$path is there already"
done

python=${PYTHON:-}
if [ -z "$python" ]; then
  python=python3
  [ ! -x .venv/bin/python ] || python=.venv/bin/python
fi
"$python" -c 'import sys; sys.path.insert(0, "."); import grader.progress' 2>/dev/null ||
  refuse "$python cannot import the grader (dev/regenerate_blocks.py needs it): activate the" \
         "course's virtual environment or set PYTHON"
command -v git > /dev/null || refuse "git is needed (git apply applies course.patch)"

# A git checkout of its own (not a copy that merely lies inside one, like build/draft09/tree):
# through the index. Otherwise git apply works as patch does, once the checkout around the copy
# is out of its sight.
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" = "$root" ]; then
  in_git=1
  apply() { git apply --index "$@"; }
  move() { git mv "$1" "$2"; }
  # git mv and git rm leave the emptied folders behind: a later check_moves.sh would take them
  # for drafts.
  remove() { git rm -rq "$1" && rm -rf "$1"; }
else
  in_git=0
  apply() { env -u GIT_DIR -u GIT_WORK_TREE GIT_CEILING_DIRECTORIES="$(dirname "$root")" git apply "$@"; }
  move() { mv "$1" "$2"; }
  remove() { rm -rf "$1"; }
fi
patch_file=$draft/course.patch
if [ -f "$patch_file" ] && ! apply --check "$patch_file"; then
  refuse "$patch_file does not apply to this checkout (the hunks above): write it again against" \
         "main (dev/drafts/README.md says how)"
fi

trap 'echo "move_draft.sh $module: stopped half-way (the step above failed): the tree is part moved" \
  "(git status lists what changed; a copy: make it again)" >&2' ERR
[ ! -f "$patch_file" ] || apply "$patch_file"
for path in "${paths[@]}"; do move "$draft/$path" "$path"; done
"$python" dev/regenerate_blocks.py
[ "$in_git" = 0 ] || git add progress.md ROADMAP.md
remove "$draft"
trap - ERR
echo "module $number moved into place; dev/drafts/README.md still describes it: update that page"
