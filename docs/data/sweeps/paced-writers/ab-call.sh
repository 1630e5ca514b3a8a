#!/usr/bin/env bash
# The A/B call for the writers paced by their block's merges on loopback
# HEAD (docs/perf-history.md, "Writers paced by the merges"): 4 and 8 steps
# behind, against the tree, base first and last. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/paced-writers/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T=$AB_SIMPLE
S=$(ab_sweeps "8 $T" "16 $T" "4 $T" "2 $T" "8 $T --wire fp8" "16 $T --wire fp8" "8 -P AUTO --min-rows 1 --max-rows 32 -f 2")
ab_variants 360 "$S" paced4:paced-writers/paced-4 paced8:paced-writers/paced-8
ab_pack
