#!/usr/bin/env bash
# The A/B call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "SIMPLE's merge chain in small rounds"): a SIMPLE merging lane with half
# its vectors or fewer loads twice the sources at once (fold.patch: at cp
# 8 three round trips after the LSEs' instead of four), the flags polled
# with relaxed loads and acquired once seen (relaxed-poll.patch: no
# CCTL.IVALL per spin), and both, against the tree, base first and last.
# SIMPLE forced at 4-64 rows (cp 2-16, HEAD, TOKEN, NONE, fp8), AUTO at
# 1-64 and SIMPLE's large rounds as controls. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/merge-chain/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T="-P SIMPLE --min-rows 4 --max-rows 64 -f 2" L="-P SIMPLE --min-rows 256 --max-rows 1024 -f 4"
A="-P AUTO --min-rows 1 --max-rows 64 -f 2"
S=$(ab_sweeps "8 $T" "16 $T" "4 $T" "2 $T" "8 $T --scatter token" "8 $T --scatter none" "8 $T --wire fp8" \
  "8 $A" "8 $L")
ab_variants 420 "$S" fold:merge-chain/fold poll:merge-chain/relaxed-poll \
  both:merge-chain/fold both:merge-chain/relaxed-poll
ab_pack
