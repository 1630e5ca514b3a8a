#!/usr/bin/env bash
# The A/B call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "The line protocols' sends, one item ahead"): LineProtocol's send loop
# issues the next item's loads before this item's stores
# (pipelined-sends.patch), and LL's native units loaded whole before their
# stores (ll-batch8.patch: 8 groups a batch where 4 left the fifth group's
# load after the first four's stores), each against the tree, base first
# and last, on the
# small-batch sweeps where a warp sends several items (cp 8 from 4 rows,
# cp 16 from one) and where it sends at most one (cp 2, the controls).
# Logs packed into $OUT/ab.tgz.
# WITH_ORDER=1 adds receive-order.patch (receive items from the rank's last
# warp down, where sends outnumber receives) as a third variant: a third
# rebuild, so fewer sweeps fit the call (drop some first).
#   docs/data/sweeps/pipelined-sends/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
A="-P AUTO --min-rows 1 --max-rows 32 -f 2"
S=$(ab_sweeps "8 $A" "8 $A --wire fp8" "16 $A" "4 $A" "2 $A" "8 $A --scatter token" "8 $A --scatter none" \
  "8 -P LL128 --min-rows 1 --max-rows 16 -f 2" "8 -P LL --min-rows 1 --max-rows 8 -f 2" \
  "16 -P LL128 --min-rows 1 --max-rows 16 -f 2")
V=(pipelined:pipelined-sends/pipelined-sends batch8:pipelined-sends/ll-batch8)
[ -z "${WITH_ORDER:-}" ] || V+=(reorder:pipelined-sends/receive-order)
ab_variants 420 "$S" "${V[@]}"
ab_pack
