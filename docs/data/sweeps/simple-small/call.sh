#!/usr/bin/env bash
# Where SIMPLE's few-step rounds spend their time (issue 41: HEAD at 8-32
# rows, cp 8, is 0.97-1.09x its baseline against 1.3 asked; perf.md "Where
# the time goes" has no profile of them): the in-kernel timeline
# (-Dtimeline=true) of loopback cp 8 HEAD over SIMPLE at 8, 16, 32 and 64
# rows and over LL128 at 8 (AUTO's other choice there), and over SIMPLE at
# 1024 (perf.md "Two cards, the same kernels": on another card than the
# H200, whether a writer's flag waits and fences are the part of the large
# round that does not move with the HBM's rate), then Nsight Compute
# (scripts/profile-ncu.sh: the details page and the per-instruction
# samples) on SIMPLE at 16 and 32 rows and LL128 at 8. Logs packed into
# $OUT/ab.tgz.
#   docs/data/sweeps/simple-small/call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
{ [ -f build-timeline/build.ninja ] ||
    meson setup build-timeline --buildtype=release -Dtimeline=true -Dtests=false > "$G/configure-timeline.log" 2>&1; } &&
  timeout -s TERM 200 ninja -C build-timeline perf/dcp_a2a_lse_reduce_perf > "$G/build-timeline.log" 2>&1
echo "timeline build rc $? $((575 - $(ab_left))) s"
F="--virtual-ranks 8 -H 16 --head-dim 512 -d bf16 -w 5 -m 10 -G 1 -c 0 -B 0 -F 0 --timeline"
for run in SIMPLE:8:64 LL128:8:8 SIMPLE:1024:1024; do
  IFS=: read -r P lo hi <<< "$run"
  # shellcheck disable=SC2086  # F's flags are words
  timeout -s TERM 60 build-timeline/perf/dcp_a2a_lse_reduce_perf $F -P "$P" --min-rows "$lo" --max-rows "$hi" -f 2 \
    > "$G/timeline-$P-$lo-$hi.txt" 2>&1
  echo "timeline $P $lo-$hi rc $?"
done
grep -h "timeline rows" "$G"/timeline-*.txt | head -20
timeout -s TERM $(($(ab_left) - 15)) scripts/profile-ncu.sh build-gpu/perf/dcp_a2a_lse_reduce_perf "$G/ncu" \
  SIMPLE:native:head:16 SIMPLE:native:head:32 LL128:native:head:8
echo "ncu rc $? $((575 - $(ab_left))) s"
ab_pack
