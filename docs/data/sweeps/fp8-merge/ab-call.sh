#!/usr/bin/env bash
# The A/B call for the next GPU session (docs/perf-history.md, "A branchless scale ..." and "fp8's merge
# staged in shared memory"): build; the five patches below as variants of the tree (scripts/patch_variant.py ->
# scripts/perf-variants.sh, base first and last); then Nsight Compute on the staged merge's SIMPLE fp8
# kernel at cp 8, 1024 rows. Logs packed into $OUT/ab.tgz. From the tree's root on the GPU machine:
#   docs/data/sweeps/fp8-merge/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T=$AB_SIMPLE A="-P AUTO --min-rows 1 --max-rows 16 -f 2"
S=$(ab_sweeps "8 $T --wire fp8" "16 $T --wire fp8" "4 $T --wire fp8" "8 $T --wire fp8 --scatter token" "8 $T" "16 $T" \
  "8 $A --wire fp8" "8 $A")
ab_variants 470 "$S" staged:fp8-merge/staged-merge stagedahead:fp8-merge/staged-ahead \
  ahead:simple-flags/ahead-loopback-all rotate:simple-flags/ahead-rotate-loopback fence:simple-flags/fence-gpu-loopback
ab_profile 90 fp8-merge/staged-merge SIMPLE:fp8:head:1024
ab_pack
