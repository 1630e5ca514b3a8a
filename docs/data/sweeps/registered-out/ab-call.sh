#!/usr/bin/env bash
# The call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "Registered outputs"): loopback NONE in two phases with its outputs
# registered (--registered-out 1, made the perf binary's default by
# registered.patch: a host-only variant, the kernels are the tree's) against
# the same binary staging them, base first and last. SIMPLE forced at cp 4,
# 8 and 16 (the A/B of none-direct-out, now through the library's path),
# and cp 8 AUTO from one row, where the line protocols' rounds stage. The
# cp 8 sweeps carry baseline 2 staged as NCCL stages unregistered buffers:
# what a real rank would write instead. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/registered-out/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T=$AB_SIMPLE B="-B 1 --scatter none --staged-gather 1"
S=$(ab_sweeps "8 $T $B" "4 $T --scatter none" "16 $T --scatter none" \
              "8 -P AUTO --min-rows 1 --max-rows 1024 -f 2 $B")
ab_variants 400 "$S" registered:registered-out/registered
ab_pack
