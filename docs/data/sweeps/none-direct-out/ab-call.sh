#!/usr/bin/env bash
# The A/B call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "NONE's phase 2 straight into the peers' outputs"): loopback NONE in two
# phases with each merged SIMPLE vector and LSE stored straight into every
# peer's out / outLse (direct-out.patch; what a registered, symmetric out
# would allow real ranks), phase 2 left only the flag wait, against the
# tree, base first and last. The cp 8 sweeps carry baseline 2 (HEAD + the
# all-gather: the direct copy, and staged), so the variant is compared with
# what a user would write in the same run. HEAD at cp 8 is the control
# (same kernels in both). Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/none-direct-out/ab-call.sh COMMIT
source scripts/ab-lib.sh
ab_build "$1"
T=$AB_SIMPLE B="-B 1 --scatter none"
S=$(ab_sweeps "8 $T $B" "8 $T $B --staged-gather 1" "4 $T --scatter none" "16 $T --scatter none" "8 $T")
ab_variants 420 "$S" direct-out:none-direct-out/direct-out
ab_pack
