#!/usr/bin/env bash
# The A/B call of 2026-12-05 (docs/perf-history.md, "SIMPLE's writers staged
# in shared memory"): build; the writers' inputs staged one step ahead
# (staged-writers.patch) and two steps ahead (staged-writers-3.patch) as
# variants of the tree (scripts/patch_variant.py -> scripts/perf-variants.sh,
# base first and last), every SIMPLE sweep both codecs touch; then Nsight
# Compute on the one-step variant's SIMPLE fp8 and native kernels at cp 8,
# 1024 rows. Logs packed into $OUT/ab.tgz. From the tree's root on the GPU
# machine:   docs/data/sweeps/staged-writers/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
F=$AB_FLAGS T=$AB_SIMPLE
S="--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T --wire fp8 --scatter token;--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T"
S="$S;--virtual-ranks 4 $F $T;--virtual-ranks 8 $F $T --scatter token;--virtual-ranks 8 $F $T --scatter none"
S="$S;--virtual-ranks 2 $F $T;--virtual-ranks 2 $F $T --wire fp8"
ab_variants 430 "$S" staged:staged-writers/staged-writers staged3:staged-writers/staged-writers-3
left=$(ab_left)
if [ $left -gt 80 ] && git apply docs/data/sweeps/staged-writers/staged-writers.patch; then
  timeout -s TERM $(( left - 15 )) bash -c "ninja -C build-gpu perf/dcp_a2a_lse_reduce_perf > $G/ncu-build.log 2>&1 &&
    scripts/profile-ncu.sh build-gpu/perf/dcp_a2a_lse_reduce_perf $G/ncu SIMPLE:fp8:head:1024 SIMPLE:native:head:1024" 2>&1 | tail -12
  git apply -R docs/data/sweeps/staged-writers/staged-writers.patch
  echo "ncu $(( 575 - $(ab_left) )) s"
fi
ab_pack
