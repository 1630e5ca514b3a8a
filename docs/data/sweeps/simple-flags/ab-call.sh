#!/usr/bin/env bash
# The A/B call for docs/data/sweeps/simple-flags/*.patch (docs/perf-history.md, "A branchless scale ..."):
# build, the patches as variants of the tree, Nsight Compute on SIMPLE fp8 / native at 1024 rows; logs packed
# into $OUT/s8a.tgz. Run from the tree's root on the GPU machine: docs/data/sweeps/simple-flags/ab-call.sh COMMIT
export NCCL_DCP_REQUIRE_GPU=1 COMMIT=$1
D=$OUT; G=/tmp/s8a-$(date +%s); mkdir -p $G
start=$(date +%s)
OUT=$G/check timeout -s TERM 150 scripts/gpu-check.sh build > $G/build.txt 2>&1; echo "build rc $? $(( $(date +%s) - start )) s"
tail -3 $G/build.txt
F="-H 16 --head-dim 512 -d bf16 -w 5 -m 10 -G 1 -n 30 -c 1 -B 0 -F 0"
T="-P SIMPLE --min-rows 16 --max-rows 1024 -f 4"
S="--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T;--virtual-ranks 8 $F $T --scatter token"
S="$S;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 16 -f 2;--virtual-ranks 16 $F -P AUTO --min-rows 1 --max-rows 16 -f 2"
: > $G/args
for n in ahead:ahead-loopback-all fence:fence-gpu-loopback both:ahead-fence-loopback rotate:ahead-rotate-loopback; do
  python3 scripts/patch_variant.py ${n%%:*} docs/data/sweeps/simple-flags/${n#*:}.patch >> $G/args || echo "patch_variant $n failed"
done
mapfile -d '' -t v < $G/args
timeout -s TERM 420 scripts/perf-variants.sh build-gpu $G/v "$S" "${v[@]}" > $G/v.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - start )) s"; grep -v '^ok' $G/v.txt | head
python3 scripts/compare_variants.py $G/v > $G/v-table.md 2>&1; cat $G/v-table.md
left=$(( 575 - ($(date +%s) - start) ))
if [ $left -gt 60 ]; then
  timeout -s TERM $left scripts/profile-ncu.sh build-gpu/perf/dcp_a2a_lse_reduce_perf $G/ncu SIMPLE:fp8:head:1024 SIMPLE:native:head:1024 2>&1 | tail -30
  echo "ncu $(( $(date +%s) - start )) s"
fi
tar czf $D/s8a.tgz -C $(dirname $G) $(basename $G)
