#!/usr/bin/env bash
# This tree and another commit timed side by side in one run on one GPU
# (issues 39 and 41: what a change of several files is worth, where
# perf-variants.sh replaces one text). The other commit travels as a
# `git archive` tarball beside the tree (the device tool copies the
# working tree without .git). Both build at once; each sweep then runs
# REPS rounds of old-then-new, so that drift within the run shows.
#
#   git archive -o ab-old.tar <commit>        (here: an untracked file travels)
#   scripts/perf-ab.sh OLD_TAR LOGDIR SWEEPS [REPS]
#     SWEEPS  perf arguments of each sweep, ';' between sweeps
#     REPS    rounds of old-then-new (default 2)
#   OLD_COMMIT, COMMIT: what the JSON records for each build (default
#   "old", "new").
#   Writes LOGDIR/{old,new}<rep>-<sweep index>.{txt,json} and
#   LOGDIR/summary.txt (per sweep and rows: each build's time, the mean of
#   its rounds, and new / old); exit 1 when a build or a sweep fails.
set -u
[ $# -ge 3 ] && [ $# -le 4 ] || { sed -n '2,17p' "$0"; exit 2; }
old_tar=$1 logs=$2 sweeps=$3 reps=${4:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$logs"
logs=$(cd "$logs" && pwd)
IFS=';' read -r -a sweep <<< "$sweeps"
work=$(mktemp -d /tmp/perf-ab.XXXXXX)
mkdir -p "$work/old-src"
tar xf "$old_tar" -C "$work/old-src" || { echo "FAIL  cannot extract $old_tar"; exit 1; }

build() {  # NAME SOURCE COMMIT
  meson setup "$work/$1" "$2" --buildtype=release -Dtests=false -Dmpi=disabled -Dcommit="$3" \
    > "$logs/$1-configure.log" 2>&1 &&
    ninja -C "$work/$1" perf/dcp_a2a_lse_reduce_perf > "$logs/$1-build.log" 2>&1
}
build old "$work/old-src" "${OLD_COMMIT:-old}" & old_pid=$!
build new "$here" "${COMMIT:-new}" & new_pid=$!
failed=0
wait "$old_pid" || { echo "FAIL  old: build (see old-build.log)"; failed=1; }
wait "$new_pid" || { echo "FAIL  new: build (see new-build.log)"; failed=1; }
[ "$failed" -eq 0 ] || exit 1

for rep in $(seq 1 "$reps"); do
  for i in "${!sweep[@]}"; do
    for name in old new; do
      # shellcheck disable=SC2086  # each sweep is a list of arguments
      "$work/$name/perf/dcp_a2a_lse_reduce_perf" ${sweep[$i]} -J "$logs/$name$rep-$i.json" \
        > "$logs/$name$rep-$i.txt" 2>&1 || { echo "FAIL  $name round $rep sweep $i (see $name$rep-$i.txt)"; failed=1; }
    done
  done
done

HERE="$here" python3 - "$logs" "${#sweep[@]}" "$reps" > "$logs/summary.txt" <<'PY' || failed=1
import os, sys
sys.path.insert(0, os.path.join(os.environ.get("HERE", "."), "scripts"))
import perf_json
logs, sweeps, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(sweeps):
    t = {}
    for name in ("old", "new"):
        for rep in range(1, reps + 1):
            for r in perf_json.load(f"{logs}/{name}{rep}-{i}.json")[1]:
                t.setdefault((r["rows"], name), []).append(r["fused_us"])
    print(f"sweep {i}: rows  old us  new us  new / old")
    for rows in sorted({k[0] for k in t}):
        o, n = (sum(t[rows, x]) / len(t[rows, x]) for x in ("old", "new"))
        print(f"  {rows:6d} {o:9.2f} {n:9.2f} {n / o:8.3f}")
PY
cat "$logs/summary.txt"
rm -rf "$work"
exit $failed
