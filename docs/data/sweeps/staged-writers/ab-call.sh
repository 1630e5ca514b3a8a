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
T=$AB_SIMPLE
S=$(ab_sweeps "8 $T --wire fp8" "16 $T --wire fp8" "4 $T --wire fp8" "8 $T --wire fp8 --scatter token" "8 $T" "16 $T" \
  "4 $T" "8 $T --scatter token" "8 $T --scatter none" "2 $T" "2 $T --wire fp8")
ab_variants 430 "$S" staged:staged-writers/staged-writers staged3:staged-writers/staged-writers-3
ab_profile 80 staged-writers/staged-writers SIMPLE:fp8:head:1024 SIMPLE:native:head:1024
ab_pack
