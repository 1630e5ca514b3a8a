#!/usr/bin/env bash
# The second A/B call of 2026-12-05 (docs/perf-history.md, "SIMPLE's writers
# staged in shared memory"): the staged writers with the writers unbounded
# ahead of the flags on loopback (staged-writers.patch + simple-flags/
# ahead-loopback-all.patch), and that with the signalling warp's fence at
# GPU scope on loopback (+ simple-flags/fence-gpu-loopback.patch), against
# the tree, base first and last. No profile. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/staged-writers/ab-call-2.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
F=$AB_FLAGS T=$AB_SIMPLE
S="--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T --wire fp8 --scatter token;--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T"
S="$S;--virtual-ranks 4 $F $T;--virtual-ranks 8 $F $T --scatter token;--virtual-ranks 8 $F $T --scatter none"
S="$S;--virtual-ranks 2 $F $T;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 32 -f 2"
S="$S;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 32 -f 2 --wire fp8"
ab_variants 430 "$S" stagedahead:staged-writers/staged-writers stagedahead:simple-flags/ahead-loopback-all \
  stagedaheadfence:staged-writers/staged-writers stagedaheadfence:simple-flags/ahead-loopback-all \
  stagedaheadfence:simple-flags/fence-gpu-loopback
ab_pack
