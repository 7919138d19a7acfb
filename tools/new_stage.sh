#!/usr/bin/env bash
# new_stage.sh FROM NAME: start a learner stage as a copy of an existing one.
#
#   tools/new_stage.sh 03 my_tiles   ->  stages/03x_my_tiles/ (a copy of stages/03_*/)
#
# FROM selects a stage the way the Makefile's STAGE= does: the first folder, in sorted order,
# whose name starts with FROM. The copy is named <source prefix>x_<NAME>, so it sorts right after
# its source and before the next numbered stage (03_blocking < 03x_my_tiles < 04_openmp), and a
# copy of a copy gets one more x (03x_my_tiles -> 03xx_NAME). The Makefile picks the new folder up
# by itself: make test / bench / diff / run see it, and STAGE=03x selects it.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: make new-stage FROM=NN NAME=name   (NAME: lowercase letters, digits, _)" >&2
  exit 2
}
[ $# -eq 2 ] && [ -n "$1" ] && [ -n "$2" ] || usage
from=$1
name=$2
[[ "$name" =~ ^[a-z0-9][a-z0-9_]*$ ]] || {
  echo "new-stage: NAME '$name' must be lowercase letters, digits and _" >&2
  usage
}

# The stage folders the Makefile builds, sorted as make's $(sort) does (byte order).
source=""
while IFS= read -r dir; do
  stage=$(basename "$dir")
  if [[ "$stage" == "$from"* ]]; then
    source=$stage
    break
  fi
done < <(find stages -mindepth 1 -maxdepth 1 -type d \
  \( -name '[0-9][0-9]_*' -o -name '[0-9][0-9]x*_*' \) | LC_ALL=C sort)
[ -n "$source" ] || {
  echo "new-stage: no stage folder under stages/ starts with '$from'" >&2
  exit 1
}

target="${source%%_*}x_${name}"
[ ! -e "stages/$target" ] || {
  echo "new-stage: stages/$target already exists" >&2
  exit 1
}
cp -r "stages/$source" "stages/$target"
echo "created stages/$target (a copy of stages/$source)"
echo "next:"
printf '  %-52s %s\n' "edit stages/$target/*.cpp" "one idea, as in every stage" \
  "make test STAGE=$target" "the shared suite against your stage" \
  "make diff FROM=$source TO=$target" "what you changed" \
  "make bench ONLY=\"$source $target\"" "prefill and decode tok/s, side by side"
