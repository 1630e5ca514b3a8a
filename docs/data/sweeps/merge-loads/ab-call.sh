#!/usr/bin/env bash
# Timed 2026-12-05 on an H100 (ab-97d677b-h100/). weak.patch landed in 3c24654:
# both patches apply only to trees before it (97d677b).
# The A/B call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "SIMPLE's merge loads, weaker"): the merges' payload loads as ld.global.cg
# (SASS LDG.E.128.STRONG.GPU; cg.patch) and as weak L1::no_allocate loads
# (LDG.E.NA.128; weak.patch) in place of ld.volatile (LDG.E.128.STRONG.SYS),
# against the tree, base first and last. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/merge-loads/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T=$AB_SIMPLE A="-P AUTO --min-rows 1 --max-rows 32 -f 2"
S=$(ab_sweeps "8 $T" "16 $T" "4 $T" "2 $T" "8 $T --wire fp8" "16 $T --wire fp8" "4 $T --wire fp8" \
  "8 $T --scatter token" "8 $T --scatter none" "8 $A" "8 $A --wire fp8")
ab_variants 400 "$S" cg:merge-loads/cg weak:merge-loads/weak
ab_pack
