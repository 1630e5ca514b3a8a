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
T=$AB_SIMPLE A="-P AUTO --min-rows 1 --max-rows 32 -f 2"
S=$(ab_sweeps "8 $T --wire fp8" "16 $T --wire fp8" "4 $T --wire fp8" "8 $T --wire fp8 --scatter token" "8 $T" "16 $T" \
  "4 $T" "8 $T --scatter token" "8 $T --scatter none" "2 $T" "8 $A" "8 $A --wire fp8")
ab_variants 430 "$S" stagedahead:staged-writers/staged-writers stagedahead:simple-flags/ahead-loopback-all \
  stagedaheadfence:staged-writers/staged-writers stagedaheadfence:simple-flags/ahead-loopback-all \
  stagedaheadfence:simple-flags/fence-gpu-loopback
ab_pack
