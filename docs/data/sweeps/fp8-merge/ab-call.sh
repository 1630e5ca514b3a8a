#!/usr/bin/env bash
# The A/B call for the next GPU session (docs/perf-history.md, "A branchless scale ..." and "fp8's merge
# staged in shared memory"): build; the five patches below as variants of the tree (scripts/patch_variant.py ->
# scripts/perf-variants.sh, base first and last); then Nsight Compute on the staged merge's SIMPLE fp8
# kernel at cp 8, 1024 rows. Logs packed into $OUT/ab.tgz. From the tree's root on the GPU machine:
#   docs/data/sweeps/fp8-merge/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
F=$AB_FLAGS T=$AB_SIMPLE
S="--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T --wire fp8 --scatter token;--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T"
S="$S;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 16 -f 2 --wire fp8;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 16 -f 2"
ab_variants 470 "$S" staged:fp8-merge/staged-merge stagedahead:fp8-merge/staged-ahead \
  ahead:simple-flags/ahead-loopback-all rotate:simple-flags/ahead-rotate-loopback fence:simple-flags/fence-gpu-loopback
left=$(ab_left)
if [ $left -gt 90 ] && git apply docs/data/sweeps/fp8-merge/staged-merge.patch; then
  timeout -s TERM $(( left - 15 )) bash -c "ninja -C build-gpu perf/dcp_a2a_lse_reduce_perf > $G/ncu-build.log 2>&1 &&
    scripts/profile-ncu.sh build-gpu/perf/dcp_a2a_lse_reduce_perf $G/ncu SIMPLE:fp8:head:1024" 2>&1 | tail -12
  git apply -R docs/data/sweeps/fp8-merge/staged-merge.patch
  echo "ncu $(( 575 - $(ab_left) )) s"
fi
ab_pack
