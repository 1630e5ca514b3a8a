#!/usr/bin/env bash
# The A/B call prepared 2026-12-05 for the next GPU session (docs/perf-history.md,
# "SIMPLE's merge loads, weaker"): the merges' payload loads as ld.global.cg
# (SASS LDG.E.128.STRONG.GPU; cg.patch) and as weak L1::no_allocate loads
# (LDG.E.NA.128; weak.patch) in place of ld.volatile (LDG.E.128.STRONG.SYS),
# against the tree, base first and last. Logs packed into $OUT/ab.tgz.
#   docs/data/sweeps/merge-loads/ab-call.sh COMMIT
export NCCL_DCP_REQUIRE_GPU=1 COMMIT=$1
D=$OUT; G=/tmp/ab-$(date +%s); mkdir -p $G
start=$(date +%s)
OUT=$G/check timeout -s TERM 150 scripts/gpu-check.sh build > $G/build.txt 2>&1; echo "build rc $? $(( $(date +%s) - start )) s"
tail -3 $G/build.txt
F="-H 16 --head-dim 512 -d bf16 -w 5 -m 10 -G 1 -n 30 -c 1 -B 0 -F 0"
T="-P SIMPLE --min-rows 16 --max-rows 1024 -f 4"
S="--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T;--virtual-ranks 4 $F $T;--virtual-ranks 2 $F $T"
S="$S;--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T --scatter token;--virtual-ranks 8 $F $T --scatter none"
S="$S;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 32 -f 2;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 32 -f 2 --wire fp8"
: > $G/args
for n in cg:cg weak:weak; do
  python3 scripts/patch_variant.py ${n%%:*} docs/data/sweeps/merge-loads/${n#*:}.patch >> $G/args || echo "patch_variant $n failed"
done
mapfile -d '' -t v < $G/args
timeout -s TERM 400 scripts/perf-variants.sh build-gpu $G/v "$S" "${v[@]}" > $G/v.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - start )) s"; grep -v '^ok' $G/v.txt | head
python3 scripts/compare_variants.py $G/v > $G/v-table.md 2>&1; cat $G/v-table.md
tar czf $D/ab.tgz -C $(dirname $G) $(basename $G)
