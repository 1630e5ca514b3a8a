#!/usr/bin/env bash
# Prepared 2026-12-05, not a priority: predicted 0-1% (docs/perf-history.md, "SIMPLE's
# spills"), under the 3% rule; run it only with device time to spare. SIMPLE's local-memory
# spills (ncu at 16 rows: 10,240 spill requests, 128 registers). ptxas spills three
# block-uniform scalars of the loopback HEAD kernel (the round's `advances`, myChunks,
# the receive loop's groups), live through the merges. smem-uniforms.patch keeps them
# in shared memory (the receive loop's bound and step, read again per chunk; the
# round re-read by thread 0 for endRound): native HEAD / NONE direct 0 spill bytes,
# the merge as it is. merge-vectors-3.patch: kMergeVectors 4 -> 3 (6 loads in flight
# per lane, not 8): every native SIMPLE kernel 0 spill bytes. both: the two stacked.
# Results bit-exact by construction (same merge order and math); every row checked
# against the CPU model. Base first and last; logs packed into $OUT/ab.tgz; then, with
# time left, Nsight Compute on smem-uniforms at 16 rows (spill requests: 0 expected).
#   docs/data/sweeps/simple-spills/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T="-P SIMPLE --min-rows 8 --max-rows 1024 -f 2"
S=$(ab_sweeps "8 $T" "8 $T --scatter token" "8 $T --wire fp8" "16 $T")
ab_variants 420 "$S" smem:simple-spills/smem-uniforms mv3:simple-spills/merge-vectors-3 \
  both:simple-spills/smem-uniforms both:simple-spills/merge-vectors-3
ab_profile 90 simple-spills/smem-uniforms SIMPLE:native:head:16
ab_pack
