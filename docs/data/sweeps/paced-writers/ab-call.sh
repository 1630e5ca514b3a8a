#!/usr/bin/env bash
# The A/B call for the writers paced by their block's merges on loopback
# HEAD (docs/perf-history.md, "Writers paced by the merges"): 4 and 8 steps
# behind, against the tree, base first and last. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/paced-writers/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
F=$AB_FLAGS T=$AB_SIMPLE
S="--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T;--virtual-ranks 4 $F $T;--virtual-ranks 2 $F $T"
S="$S;--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 32 -f 2"
ab_variants 360 "$S" paced4:paced-writers/paced-4 paced8:paced-writers/paced-8
ab_pack
