#!/usr/bin/env bash
# An earlier version of nccl-dcp built beside this one and compared with it
# in one run on the GPU (issue 38: "no behaviour change, shown"):
#   1. the output bits of test/tools/bitdump.cc's fixed matrix of loopback
#      calls (native wire; NONE under both algorithms), this build against
#      the old one: every line must match;
#   2. loopback perf tables of both builds, run alternately, side by side
#      (scripts/compare_perf.py: time new / old per row).
#
#   scripts/compare-version.sh OLD BUILD LOGS [TABLE...]
#     OLD    a tarball of the old tree (git archive <commit> | gzip) or its directory
#     BUILD  this tree's build directory (built; perf binary and dcp_bitdump in it)
#     LOGS   where the logs, JSON and tables go
#     TABLE  protocol:scatter[:none-algo][:wire], default
#            AUTO:head LL128:head SIMPLE:head AUTO:token AUTO:none:direct AUTO:none:two_phase AUTO:head::fp8
#   NEW_SIZES / OLD_SIZES: each binary's rows arguments (default "-b 1 -e 1024 -f 4").
# Exit status: 0 when the bits match and every run worked (the perf table
# is a report, not a verdict).
set -uo pipefail
old=$1 build=$2 logs=$3
shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
tables=("$@")
[ ${#tables[@]} -gt 0 ] || tables=(AUTO:head LL128:head SIMPLE:head AUTO:token AUTO:none:direct AUTO:none:two_phase
  AUTO:head::fp8)
mkdir -p "$logs"
src=/tmp/dcp-old-src oldBuild=/tmp/dcp-old-build
status=0

if [ -d "$old" ]; then src=$old; else rm -rf "$src" && mkdir -p "$src" && tar xzf "$old" -C "$src"; fi
# The old tree gets this tree's bitdump tool (its test/common API is the same).
mkdir -p "$src/test/tools" && cp "$root/test/tools/bitdump.cc" "$src/test/tools/"
grep -q dcp_bitdump "$src/test/meson.build" ||
  printf "executable('dcp_bitdump', files('tools/bitdump.cc', 'common/device_problem.cc'), link_with: test_common,\n  dependencies: test_deps)\n" >> "$src/test/meson.build"
start=$SECONDS
if [ ! -f "$oldBuild/build.ninja" ]; then
  meson setup "$oldBuild" "$src" --buildtype=release -Dmpi=disabled > "$logs/old-configure.log" 2>&1 || status=1
fi
ninja -C "$oldBuild" perf/dcp_a2a_lse_reduce_perf test/dcp_bitdump > "$logs/old-build.log" 2>&1 ||
  { status=1; tail -20 "$logs/old-build.log"; }
echo "== old build: status $status, $((SECONDS - start)) s"

# 1. Output bits.
bits=0
for algo in direct two_phase; do
  for side in new old; do
    bin=$build/test/dcp_bitdump
    [ $side = new ] || bin=$oldBuild/test/dcp_bitdump
    NCCL_DCP_NONE_ALGO=$algo DCP_BITDUMP_FILE="$logs/bits-$side-$algo.txt" "$bin" > "$logs/bits-$side-$algo.log" 2>&1 ||
      { echo "== bitdump $side $algo failed"; tail -5 "$logs/bits-$side-$algo.log"; bits=1; }
  done
  if diff "$logs/bits-old-$algo.txt" "$logs/bits-new-$algo.txt" > "$logs/bits-diff-$algo.txt"; then
    echo "== bits, NONE $algo: $(wc -l < "$logs/bits-new-$algo.txt") cases, every one equal to the old build's"
  else
    bits=1
    echo "== bits, NONE $algo: $(grep -c '^>' "$logs/bits-diff-$algo.txt") of $(wc -l < "$logs/bits-new-$algo.txt") cases differ:"
    head -10 "$logs/bits-diff-$algo.txt"
  fi
done
[ $bits -eq 0 ] || status=1

# 2. Perf tables, alternately (new, old) so drift hits both alike.
shape=(--virtual-ranks 8 -H 16 --head-dim 512 -d bf16 -m 10 -c 0 -B 1 -F 0)
for t in "${tables[@]}"; do
  IFS=: read -r proto scatter algo wire <<< "$t"
  name=$proto-$scatter${algo:+-$algo}${wire:+-$wire}
  for side in new old; do
    bin=$build/perf/dcp_a2a_lse_reduce_perf sizes=${NEW_SIZES:--b 1 -e 1024 -f 4}
    [ $side = new ] || { bin=$oldBuild/perf/dcp_a2a_lse_reduce_perf; sizes=${OLD_SIZES:--b 1 -e 1024 -f 4}; }
    # shellcheck disable=SC2086  # sizes are words
    env ${algo:+NCCL_DCP_NONE_ALGO=$algo} "$bin" "${shape[@]}" $sizes -P "$proto" --scatter "$scatter" \
      ${wire:+--wire $wire} -J "$logs/perf-$side-$name.json" > "$logs/perf-$side-$name.txt" 2>&1 ||
      { echo "== perf $side $name failed"; tail -5 "$logs/perf-$side-$name.txt"; status=1; }
  done
done
python3 "$root/scripts/compare_perf.py" "$logs" "${tables[@]}" | tee "$logs/compare.md"
exit $status
