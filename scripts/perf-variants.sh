#!/usr/bin/env bash
# Device-code variants timed side by side in one run on one GPU (issues 39
# and 41: what a change of one constant is worth, measured before it is
# made). Each variant replaces one text, which must occur once, in one file
# of this tree, rebuilds the perf binary, runs every sweep, and puts the
# text back. "base" (the tree as it is) runs first and last, so that drift
# within the run shows.
#
#   scripts/perf-variants.sh BUILD LOGDIR SWEEPS [NAME FILE OLD NEW]...
#     BUILD   a configured meson build directory of this tree
#     SWEEPS  perf arguments of each sweep, ';' between sweeps
#     consecutive replacements of the same NAME make one variant; a
#     patch kept in docs/data/sweeps/ becomes one with scripts/patch_variant.py
#   Writes LOGDIR/<variant>-<sweep index>.txt and .json; exit 1 when a
#   build, a replacement or a sweep fails, 2 when LOGDIR already holds
#   JSON (another run's, which would be tabled with this one's). Stopped
#   (TERM, INT), it puts the variant's texts back before it exits, so the
#   tree that follows in the same call is the tree, not a variant.
#   scripts/compare_variants.py LOGDIR tables them (each variant over the
#   tree, first and last runs).
set -u
[ $# -ge 3 ] && [ $((($# - 3) % 4)) -eq 0 ] || { sed -n '2,20p' "$0"; exit 2; }
build=$1 logs=$2 sweeps=$3
shift 3
if compgen -G "$logs/*.json" > /dev/null; then
  echo "perf-variants.sh: $logs already holds a run's JSON (give a new LOGDIR)" >&2
  exit 2
fi
mkdir -p "$logs"
IFS=';' read -r -a sweep <<< "$sweeps"
failed=0
saved=()  # files the variant being run replaced text in, saved as $logs/.saved<i>

restore() {  # the saved files back, the last saved first
  for i in $(seq $((${#saved[@]} - 1)) -1 0); do cp "$logs/.saved$i" "${saved[$i]}"; done
  saved=()
  rm -f "$logs"/.saved*
}
trap 'restore; exit 143' TERM
trap 'restore; exit 130' INT

replace() {  # FILE OLD NEW: exactly one occurrence, else exit 1
  python3 - "$@" <<'PY'
import sys
path, old, new = sys.argv[1:4]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"{path}: {text.count(old)} occurrences of {old!r} (want 1)")
open(path, "w").write(text.replace(old, new))
PY
}

run_variant() {  # NAME
  if ! ninja -C "$build" perf/dcp_a2a_lse_reduce_perf > "$logs/$1-build.log" 2>&1; then
    echo "FAIL  $1: build (see $1-build.log)"; failed=1; return
  fi
  for i in "${!sweep[@]}"; do
    # shellcheck disable=SC2086  # each sweep is a list of arguments
    if "$build/perf/dcp_a2a_lse_reduce_perf" ${sweep[$i]} -J "$logs/$1-$i.json" > "$logs/$1-$i.txt" 2>&1; then
      echo "ok    $1 sweep $i: ${sweep[$i]}"
    else
      echo "FAIL  $1 sweep $i (see $1-$i.txt)"; failed=1
    fi
  done
}

run_variant base
while [ $# -gt 0 ]; do
  name=$1 ok=1
  while [ $# -gt 0 ] && [ "$1" = "$name" ]; do  # this variant's replacements
    file=$2
    cp "$file" "$logs/.saved${#saved[@]}" || { restore; exit 1; }
    saved+=("$file")
    replace "$file" "$3" "$4" || ok=0
    shift 4
  done
  if [ $ok = 1 ]; then run_variant "$name"; else failed=1; fi
  restore
done
run_variant base-again
exit $failed
