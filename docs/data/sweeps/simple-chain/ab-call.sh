#!/usr/bin/env bash
# The A/B call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "SIMPLE's small rounds: three dependent chains"): the first writer's LSE
# stored after its copy, its load beside the payload's (lse-after.patch: the
# step no longer waits a round trip on one warp); a merging lane with half
# its vectors or fewer folding its idle load slots onto the next sources
# (fold.patch: at cp 8 two passes over the sources instead of four); the
# flags polled with relaxed loads and acquired once seen (relaxed-poll.patch:
# no CCTL.IVALL per spin); and all three, against the tree, base first and
# last. SIMPLE forced at 4-64 rows (cp 2-16, HEAD, TOKEN, NONE, fp8) and at
# 256-1024 (the control). Every row checked (-c 1). Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/simple-chain/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T="-P SIMPLE --min-rows 4 --max-rows 64 -f 2" L="-P SIMPLE --min-rows 256 --max-rows 1024 -f 4"
S=$(ab_sweeps "8 $T" "16 $T" "4 $T" "2 $T" "8 $T --scatter token" "8 $T --scatter none" "8 $T --wire fp8" "8 $L")
ab_variants 430 "$S" lse:simple-chain/lse-after fold:simple-chain/fold poll:simple-chain/relaxed-poll \
  all:simple-chain/lse-after all:simple-chain/fold all:simple-chain/relaxed-poll
ab_pack
