#!/usr/bin/env bash
# The A/B call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "SIMPLE's merge loads, weaker"): the merges' payload loads as ld.global.cg
# (SASS LDG.E.128.STRONG.GPU; cg.patch) and as weak L1::no_allocate loads
# (LDG.E.NA.128; weak.patch) in place of ld.volatile (LDG.E.128.STRONG.SYS),
# against the tree, base first and last. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/merge-loads/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
F=$AB_FLAGS T=$AB_SIMPLE
S="--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T;--virtual-ranks 4 $F $T;--virtual-ranks 2 $F $T"
S="$S;--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T --scatter token;--virtual-ranks 8 $F $T --scatter none"
S="$S;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 32 -f 2;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 32 -f 2 --wire fp8"
ab_variants 400 "$S" cg:merge-loads/cg weak:merge-loads/weak
ab_pack
