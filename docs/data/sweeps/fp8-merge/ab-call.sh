#!/usr/bin/env bash
# The A/B call for the next GPU session (docs/perf-history.md, "A branchless scale ..." and "fp8's merge
# staged in shared memory"): build; the five patches below as variants of the tree (scripts/patch_variant.py ->
# scripts/perf-variants.sh, base first and last); then Nsight Compute on the staged merge's SIMPLE fp8
# kernel at cp 8, 1024 rows. Logs packed into $OUT/ab.tgz. From the tree's root on the GPU machine:
#   docs/data/sweeps/fp8-merge/ab-call.sh COMMIT
export NCCL_DCP_REQUIRE_GPU=1 COMMIT=$1
D=$OUT; G=/tmp/ab-$(date +%s); mkdir -p $G
start=$(date +%s)
OUT=$G/check timeout -s TERM 150 scripts/gpu-check.sh build > $G/build.txt 2>&1; echo "build rc $? $(( $(date +%s) - start )) s"
tail -3 $G/build.txt
F="-H 16 --head-dim 512 -d bf16 -w 5 -m 10 -G 1 -n 30 -c 1 -B 0 -F 0"
T="-P SIMPLE --min-rows 16 --max-rows 1024 -f 4"
S="--virtual-ranks 8 $F $T --wire fp8;--virtual-ranks 16 $F $T --wire fp8;--virtual-ranks 4 $F $T --wire fp8"
S="$S;--virtual-ranks 8 $F $T --wire fp8 --scatter token;--virtual-ranks 8 $F $T;--virtual-ranks 16 $F $T"
S="$S;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 16 -f 2 --wire fp8;--virtual-ranks 8 $F -P AUTO --min-rows 1 --max-rows 16 -f 2"
: > $G/args
for n in staged:fp8-merge/staged-merge stagedahead:fp8-merge/staged-ahead ahead:simple-flags/ahead-loopback-all \
         rotate:simple-flags/ahead-rotate-loopback fence:simple-flags/fence-gpu-loopback; do
  python3 scripts/patch_variant.py ${n%%:*} docs/data/sweeps/${n#*:}.patch >> $G/args || echo "patch_variant $n failed"
done
mapfile -d '' -t v < $G/args
timeout -s TERM 470 scripts/perf-variants.sh build-gpu $G/v "$S" "${v[@]}" > $G/v.txt 2>&1
echo "A/B rc $? $(( $(date +%s) - start )) s"; grep -v '^ok' $G/v.txt | head
python3 scripts/compare_variants.py $G/v > $G/v-table.md 2>&1; cat $G/v-table.md
left=$(( 575 - ($(date +%s) - start) ))
if [ $left -gt 90 ] && git apply docs/data/sweeps/fp8-merge/staged-merge.patch; then
  timeout -s TERM $(( left - 15 )) bash -c "ninja -C build-gpu perf/dcp_a2a_lse_reduce_perf > $G/ncu-build.log 2>&1 &&
    scripts/profile-ncu.sh build-gpu/perf/dcp_a2a_lse_reduce_perf $G/ncu SIMPLE:fp8:head:1024" 2>&1 | tail -12
  git apply -R docs/data/sweeps/fp8-merge/staged-merge.patch
  echo "ncu $(( $(date +%s) - start )) s"
fi
tar czf $D/ab.tgz -C $(dirname $G) $(basename $G)
